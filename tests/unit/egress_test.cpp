// Egress: every spelling of an address, the special-purpose classes, and allow-list admission.
#include <gtest/gtest.h>

#include <map>

#include "egress/door.h"
#include "egress/egress.h"

namespace airlock::egress {
namespace {

IpAddress ip(std::string_view s) {
  auto a = parse_literal(s);
  EXPECT_TRUE(a.has_value()) << s;
  return a.value_or(IpAddress{});
}

TEST(AddressLiteral, EverySpellingOfLoopbackIsLoopback) {
  for (std::string_view s : {"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1", "[::1]",
                             "::1", "0:0:0:0:0:0:0:1"}) {
    auto c = classify(ip(s));
    EXPECT_EQ(c.cls, AddressClass::Loopback) << s << " is " << c.describe();
  }
}

TEST(AddressLiteral, NamesAreNotLiterals) {
  for (std::string_view s : {"example.com", "cafe.de", "localhost", "1.2.3.4.example", "fe80::1%eth0"})
    EXPECT_FALSE(parse_literal(s).has_value()) << s;
}

TEST(AddressClass, SpecialPurposeRangesAreNotGlobal) {
  std::map<std::string, AddressClass> cases = {
      {"10.1.2.3", AddressClass::Private},          {"172.31.0.1", AddressClass::Private},
      {"192.168.1.1", AddressClass::Private},       {"169.254.169.254", AddressClass::Metadata},
      {"169.254.1.1", AddressClass::LinkLocal},     {"100.64.0.1", AddressClass::SharedNat},
      {"100.100.100.200", AddressClass::Metadata},  {"0.0.0.0", AddressClass::Unspecified},
      {"224.0.0.1", AddressClass::Multicast},       {"255.255.255.255", AddressClass::Broadcast},
      {"192.0.2.1", AddressClass::Documentation},   {"198.18.0.1", AddressClass::Benchmarking},
      {"240.0.0.1", AddressClass::Reserved},        {"fc00::1", AddressClass::Private},
      {"fd00:ec2::254", AddressClass::Metadata},    {"fe80::1", AddressClass::LinkLocal},
      {"ff02::1", AddressClass::Multicast},         {"2001:db8::1", AddressClass::Documentation},
      {"2001:0:4136:e378::1", AddressClass::Reserved}, {"::", AddressClass::Unspecified},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(classify(ip(text)).cls, want) << text;
}

TEST(AddressClass, EmbeddedIpv4FormsAreClassedByWhatTheyCarry) {
  auto mapped = classify(ip("::ffff:127.0.0.1"));
  EXPECT_EQ(mapped.cls, AddressClass::Ipv4Mapped);
  ASSERT_TRUE(mapped.embedded);
  EXPECT_EQ(mapped.embedded->to_string(), "127.0.0.1");
  EXPECT_EQ(classify(ip("[::ffff:7f00:1]")).cls, AddressClass::Ipv4Mapped);
  EXPECT_EQ(classify(ip("::ffff:8.8.8.8")).cls, AddressClass::Ipv4Mapped);  // never global, whatever it carries
  EXPECT_EQ(classify(ip("::10.0.0.1")).cls, AddressClass::Ipv4Mapped);
  EXPECT_EQ(classify(ip("64:ff9b::a00:1")).cls, AddressClass::Private);     // NAT64 of 10.0.0.1
  EXPECT_EQ(classify(ip("2002:a9fe:a9fe::1")).cls, AddressClass::Metadata); // 6to4 of 169.254.169.254
  EXPECT_TRUE(classify(ip("64:ff9b::808:808")).global());                  // NAT64 of 8.8.8.8
}

TEST(AddressClass, GlobalAddressesAreGlobal) {
  for (std::string_view s : {"8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::1"})
    EXPECT_TRUE(classify(ip(s)).global()) << s;
}

policy::EgressRule host_rule(std::string host, int port, bool allow_private = false,
                             std::vector<std::string> schemes = {"http", "https"}) {
  policy::EgressRule r;
  r.host = std::move(host);
  r.ports = {port};
  r.schemes = std::move(schemes);
  r.allow_private = allow_private;
  return r;
}

Resolver table(std::map<std::string, std::vector<std::string>> t) {
  return [t](const std::string& host) -> Result<std::vector<IpAddress>> {
    auto it = t.find(host);
    if (it == t.end()) return fail(Code::EgressDenied, host + " does not resolve");
    std::vector<IpAddress> out;
    for (const auto& a : it->second) out.push_back(*parse_literal(a));
    return out;
  };
}

TEST(Admit, HostRuleAdmitsGlobalAddressesAndPinsTheCheckedOne) {
  auto r = admit({host_rule("api.example.com", 443)}, "https://API.example.com./v1",
                 table({{"api.example.com", {"93.184.216.34"}}}));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->target.host, "api.example.com");
  EXPECT_EQ(r->pinned.to_string(), "93.184.216.34");
}

TEST(Admit, NameResolvingToLoopbackIsDenied) {
  auto r = admit({host_rule("api.example.com", 443)}, "https://api.example.com/",
                 table({{"api.example.com", {"93.184.216.34", "127.0.0.1"}}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::EgressDenied);
  EXPECT_NE(r.error().message.find("loopback"), std::string::npos) << r.error().message;
}

TEST(Admit, AllowPrivateRelaxesTheAddressCheckOnly) {
  auto res = table({{"svc.internal", {"10.0.0.7"}}});
  EXPECT_TRUE(admit({host_rule("svc.internal", 8080, true)}, "http://svc.internal:8080/", res));
  auto wrong_port = admit({host_rule("svc.internal", 8080, true)}, "http://svc.internal:8081/", res);
  ASSERT_FALSE(wrong_port);
  EXPECT_EQ(wrong_port.error().code, Code::EgressDenied);
}

TEST(Admit, WildcardHostStillRefusesEveryEncodingOfPrivateAddresses) {
  auto res = table({});
  std::vector<policy::EgressRule> any = {host_rule("*", 80, false, {"http"})};
  for (std::string_view url : {"http://2130706433/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/",
                               "http://[::ffff:a9fe:a9fe]/", "http://169.254.169.254/", "http://[fd00:ec2::254]/",
                               "http://0177.0.0.1/", "http://10.1/"}) {
    auto r = admit(any, url, res);
    ASSERT_FALSE(r) << url;
    EXPECT_EQ(r.error().code, Code::EgressDenied) << url;
  }
  EXPECT_TRUE(admit(any, "http://93.184.216.34/", res));
}

TEST(Admit, SchemeAndSuffixWildcard) {
  auto res = table({{"a.example.com", {"93.184.216.34"}}, {"example.com.evil.net", {"93.184.216.35"}}});
  std::vector<policy::EgressRule> rules = {host_rule("*.example.com", 443, false, {"https"})};
  EXPECT_TRUE(admit(rules, "https://a.example.com/", res));
  EXPECT_FALSE(admit(rules, "http://a.example.com:443/", res));
  EXPECT_FALSE(admit(rules, "https://example.com.evil.net/", res));
}

TEST(Admit, CredentialsInTheUrlAreRefused) {
  auto r = admit({host_rule("*", 443)}, "https://api.example.com@evil.net/", table({{"evil.net", {"1.1.1.1"}}}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::EgressDenied);
}

TEST(Admit, CidrRuleNeedsEveryAddressInside) {
  policy::EgressRule cidr;
  cidr.cidr = "127.0.0.1/32";
  cidr.ports = {8080};
  cidr.schemes = {"http"};
  EXPECT_TRUE(admit({cidr}, "http://127.0.0.1:8080/", table({})));
  EXPECT_FALSE(admit({cidr}, "http://127.0.0.2:8080/", table({})));
  EXPECT_FALSE(admit({cidr}, "http://both.test:8080/", table({{"both.test", {"127.0.0.1", "127.0.0.2"}}})));
}

TEST(Admit, NoRulesNoEgress) {
  auto r = admit({}, "https://example.com/", table({}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::EgressDenied);
}

}  // namespace
}  // namespace airlock::egress

namespace airlock::egress {
namespace {

// The model gateway forwards only the profile's paths, and never one the upstream client would
// resolve into another (dot segments, encoded dots or slashes, empty segments).
TEST(GatewayPath, OnlyListedCleanPathsAreForwarded) {
  std::vector<std::string> allowed = {"/v1/messages", "/v1/models"};
  for (const char* ok : {"/v1/messages", "/v1/messages?beta=true", "/v1/messages/count_tokens", "/v1/models",
                         "/v1/models/claude?x=/../y"})
    EXPECT_TRUE(gateway_path_allowed(ok, allowed)) << ok;
  for (const char* bad : {"/v1/messagesX", "/v1", "/", "/v1/files", "/v1/messages/../files", "/v1/messages/./x",
                          "/v1/messages/%2e%2e/files", "/v1/messages/%2E./files", "/v1/messages%2f..%2ffiles",
                          "/v1/messages//x", "/v1/messages\\..\\files", "v1/messages", "", "/v1/messages/.."})
    EXPECT_FALSE(gateway_path_allowed(bad, allowed)) << bad;
  EXPECT_TRUE(gateway_path_allowed("/anything", {}));
  EXPECT_FALSE(gateway_path_allowed("/a/../b", {}));
}

}  // namespace
}  // namespace airlock::egress
