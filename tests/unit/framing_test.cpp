// RequestFramer: the request bounds, fed byte streams with no server behind them.
#include <gtest/gtest.h>

#include "server/framing.h"

namespace airlock::server {
namespace {

FramingLimits small() {
  FramingLimits l;
  l.max_request_line = 64;
  l.max_header_line = 64;
  l.max_headers = 4;
  l.max_head_bytes = 256;
  l.max_body_bytes = 100;
  return l;
}

std::optional<Code> refusal(std::string_view bytes, bool one_at_a_time = false) {
  RequestFramer f(small());
  if (one_at_a_time) {
    for (char c : bytes)
      if (auto r = f.feed(std::string_view(&c, 1)); !r) return r.error().code;
    return std::nullopt;
  }
  auto r = f.feed(bytes);
  return r ? std::nullopt : std::optional(r.error().code);
}

TEST(RequestFramer, RequestsWithinTheBoundsPassWhateverTheSplit) {
  std::string two = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                    "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(refusal(two), std::nullopt);
  EXPECT_EQ(refusal(two, true), std::nullopt);
  RequestFramer f(small());
  ASSERT_TRUE(f.feed(two));
  EXPECT_TRUE(f.idle());
}

TEST(RequestFramer, HeadBoundsAreRefusedByName) {
  EXPECT_EQ(refusal("GET /" + std::string(100, 'a') + " HTTP/1.1\r\n"), Code::RequestHeadTooLarge);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nX: " + std::string(100, 'a') + "\r\n"), Code::RequestHeadTooLarge);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n"), Code::RequestHeadTooLarge);
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nA: " + std::string(60, 'a') + "\r\nB: " + std::string(60, 'a') + "\r\nC: " +
                    std::string(60, 'a') + "\r\nD: " + std::string(60, 'a') + "\r\n"),
            Code::RequestHeadTooLarge);
}

TEST(RequestFramer, BodyBoundHoldsForEveryTransferEncoding) {
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n"), Code::RequestTooLarge);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'a') +
                    "\r\n40\r\n"),
            Code::RequestTooLarge);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), Code::ProtocolError);
}

TEST(RequestFramer, AmbiguousFramingIsRefused) {
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), Code::ProtocolError);
}

// Where httplib would read the bytes differently from the framer, the framer refuses them: a
// bare LF (httplib skips such a header line, so the framer would see the head end early), a
// header name with whitespace (httplib does not trim it), a body with no length (httplib reads
// it to end of file).
TEST(RequestFramer, RefusesWhatHttplibWouldReadDifferently) {
  EXPECT_EQ(refusal("GET / HTTP/1.1\r\nHost: x\n\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("GET / HTTP/1.1\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\n Content-Length: 5\r\n\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("POST / HTTP/1.1\r\nHost: x\r\n\r\n"), Code::ProtocolError);
  EXPECT_EQ(refusal("DELETE /v1/x HTTP/1.1\r\n\r\n"), Code::ProtocolError);
  RequestFramer f(small());
  EXPECT_TRUE(f.feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(f.idle());
  EXPECT_TRUE(f.feed("DELETE /v1/x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_TRUE(f.idle());
}

TEST(RequestFramer, OnceRefusedEverythingAfterIsRefused) {
  RequestFramer f(small());
  EXPECT_FALSE(f.feed("GET /" + std::string(100, 'a')));
  EXPECT_FALSE(f.feed("GET / HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(f.refused());
}

}  // namespace
}  // namespace airlock::server
