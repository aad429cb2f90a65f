// RequestFramer: follows HTTP/1.1 request framing byte by byte and refuses what exceeds its bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace airlock::server {

// The bounds a connection is held to before anything reads its requests. Memory per
// connection before authentication is at most the head bound (the body is read only after
// the bearer check); the body bound holds for every transfer encoding.
struct FramingLimits {
  size_t max_request_line = 8192;
  size_t max_header_line = 8192;
  size_t max_headers = 100;
  size_t max_head_bytes = 64u << 10;  // request line, headers and chunked trailers together
  size_t max_body_bytes = 8u << 20;   // Content-Length, or the sum of chunk sizes
  // From a request's first byte to its last (0: no bound). A client dribbling a byte at a time
  // would otherwise hold a worker for as long as it likes.
  uint64_t request_ms = 30'000;
};

// Pure: fed the bytes of a connection in order, it says whether they stay within the limits.
// It never holds more than one header line. Once it refuses, it refuses everything after.
class RequestFramer {
 public:
  explicit RequestFramer(FramingLimits limits) : limits_(limits) {}
  // Checks `bytes`, the next bytes of the connection. An error names the bound broken:
  // AIRLOCK_REQUEST_HEAD_TOO_LARGE, AIRLOCK_REQUEST_TOO_LARGE, or AIRLOCK_PROTOCOL_ERROR for
  // framing that two readers could read differently (Content-Length with chunked, a
  // Transfer-Encoding other than chunked, a malformed chunk size).
  Result<void> feed(std::string_view bytes);
  // Between requests: nothing of a next request has been seen.
  bool idle() const { return state_ == State::RequestLine && line_.empty() && head_bytes_ == 0; }
  const std::optional<Error>& refused() const { return refused_; }

 private:
  enum class State { RequestLine, Header, Body, ChunkSize, ChunkData, ChunkEnd, Trailer };
  Result<void> line_done();
  Result<void> refuse(Error e);
  void next_request();

  FramingLimits limits_;
  State state_ = State::RequestLine;
  std::string line_;  // the current line of the head (bounded by max_header_line)
  size_t head_bytes_ = 0;
  size_t headers_ = 0;
  uint64_t remaining_ = 0;  // body or chunk bytes still to come
  uint64_t body_bytes_ = 0;
  std::optional<uint64_t> content_length_;
  bool chunked_ = false;
  bool transfer_encoding_ = false;
  bool body_expected_ = false;  // the method is one httplib reads a body for
  std::optional<Error> refused_;
};

}  // namespace airlock::server
