// The escape suite's DNS wire format: a query, its question, the answer and what the probe reads back.
#include "escape/dns_wire.h"

#include <gtest/gtest.h>

namespace airlock::escape {
namespace {

TEST(DnsWire, AQueryRoundTripsThroughTheResponder) {
  std::string q = encode_dns_query(0x1234, "Airlock-Escape-AbC.exfil.test");
  auto question = parse_dns_question(q);
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->id, 0x1234);
  EXPECT_EQ(question->name, "airlock-escape-abc.exfil.test");  // names compare lower-case
  EXPECT_EQ(question->qtype, 1);
  std::string a = encode_dns_answer(*question, {"127.0.0.1", "127.0.0.2"});
  auto addrs = parse_dns_answer(a, 0x1234);
  ASSERT_TRUE(addrs.has_value());
  EXPECT_EQ(*addrs, (std::vector<std::string>{"127.0.0.1", "127.0.0.2"}));
}

TEST(DnsWire, ANameWithoutAddressesIsNxdomainWithNoAnswers) {
  auto question = parse_dns_question(encode_dns_query(7, "nothing.test"));
  ASSERT_TRUE(question.has_value());
  std::string a = encode_dns_answer(*question, {});
  EXPECT_EQ(static_cast<uint8_t>(a[3]) & 0x0f, 3);  // rcode NXDOMAIN
  auto addrs = parse_dns_answer(a, 7);
  ASSERT_TRUE(addrs.has_value());
  EXPECT_TRUE(addrs->empty());
}

// Found by fuzz_dns (fuzz/corpus/dns/label_with_dot.bin): a label holding a dot was read as a
// name the responder then wrote back as other labels, so its answer could not be read.
TEST(DnsWire, ALabelHoldingADotIsNotAQuestion) {
  std::string q("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                "\x06.anao\xf8\x00\x00\x01\x00\x01",
                24);
  EXPECT_FALSE(parse_dns_question(q));
  // And a name with an empty label is written without ending early.
  auto back = parse_dns_question(encode_dns_query(7, "a..b"));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, "a.b");
  EXPECT_EQ(back->qtype, 1);
}

TEST(DnsWire, AnswersToAnotherQueryAndQueriesAreNotAnswers) {
  std::string q = encode_dns_query(9, "allowed.test");
  auto question = parse_dns_question(q);
  ASSERT_TRUE(question.has_value());
  std::string a = encode_dns_answer(*question, {"127.0.0.1"});
  EXPECT_FALSE(parse_dns_answer(a, 10).has_value());
  EXPECT_FALSE(parse_dns_answer(q, 9).has_value());
  EXPECT_FALSE(parse_dns_question(a).has_value());
  EXPECT_FALSE(parse_dns_question("short").has_value());
  EXPECT_FALSE(parse_dns_answer(a.substr(0, a.size() - 2), 9).has_value());  // a truncated record
}

}  // namespace
}  // namespace airlock::escape
