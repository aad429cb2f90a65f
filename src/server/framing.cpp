// RequestFramer: the bounds on request lines, headers and bodies, checked before httplib reads a byte.
#include "server/framing.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace airlock::server {

namespace {

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

Result<void> RequestFramer::refuse(Error e) {
  refused_ = e;
  return std::unexpected(std::move(e));
}

void RequestFramer::next_request() {
  state_ = State::RequestLine;
  line_.clear();
  head_bytes_ = headers_ = 0;
  remaining_ = body_bytes_ = 0;
  content_length_.reset();
  chunked_ = transfer_encoding_ = body_expected_ = false;
}

Result<void> RequestFramer::feed(std::string_view bytes) {
  if (refused_) return std::unexpected(*refused_);
  size_t i = 0;
  while (i < bytes.size()) {
    if (state_ == State::Body || state_ == State::ChunkData) {
      uint64_t take = std::min<uint64_t>(remaining_, bytes.size() - i);
      remaining_ -= take;
      i += take;
      if (remaining_ == 0) {
        if (state_ == State::Body)
          next_request();
        else
          state_ = State::ChunkEnd;
      }
      continue;
    }
    // A line of the head, a chunk-size line, or a chunk's closing CRLF.
    char c = bytes[i++];
    if (state_ != State::ChunkSize && state_ != State::ChunkEnd && ++head_bytes_ > limits_.max_head_bytes)
      return refuse(Error{Code::RequestHeadTooLarge,
                          fmt::format("the request head is longer than {} bytes", limits_.max_head_bytes),
                          {{"max_head_bytes", limits_.max_head_bytes}}});
    if (c == '\n') {
      TRY(line_done());
      continue;
    }
    size_t bound = state_ == State::RequestLine ? limits_.max_request_line
                   : (state_ == State::ChunkSize || state_ == State::ChunkEnd) ? 1024
                                                                               : limits_.max_header_line;
    if (line_.size() >= bound) {
      if (state_ == State::ChunkSize || state_ == State::ChunkEnd)
        return refuse(Error{Code::ProtocolError, "a chunk-size line is longer than 1024 bytes", {}});
      return refuse(Error{Code::RequestHeadTooLarge,
                          fmt::format("a {} is longer than {} bytes",
                                      state_ == State::RequestLine ? "request line" : "header line", bound),
                          {{state_ == State::RequestLine ? "max_request_line" : "max_header_line", bound}}});
    }
    line_ += c;
  }
  return {};
}

Result<void> RequestFramer::line_done() {
  std::string line = std::move(line_);
  line_.clear();
  // Every line ends in CRLF. httplib skips a header line that ends in a bare LF, while a reader
  // that accepted it would see the head end where httplib does not: the two must never disagree.
  if (line.empty() || line.back() != '\r')
    return refuse(Error{Code::ProtocolError, "a line of the request ends in LF without CR", {}});
  line.pop_back();
  switch (state_) {
    case State::RequestLine: {  // even empty: httplib refuses it, and the connection closes
      std::string_view method = std::string_view(line).substr(0, line.find(' '));
      // httplib reads a body for these whatever the headers say (to end of file without a length).
      body_expected_ = method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE" ||
                       method == "PRI";
      state_ = State::Header;
      return {};
    }
    case State::Header: {
      if (!line.empty()) {
        if (++headers_ > limits_.max_headers)
          return refuse(Error{Code::RequestHeadTooLarge,
                              fmt::format("the request has more than {} headers", limits_.max_headers),
                              {{"max_headers", limits_.max_headers}}});
        size_t colon = line.find(':');
        if (colon == std::string::npos) return {};  // httplib skips it
        // A name httplib would read differently (it does not trim): whitespace in or around it,
        // or a folded continuation line.
        if (colon == 0 || line.find_first_of(" \t") < colon)
          return refuse(Error{Code::ProtocolError, "a header name is empty or holds whitespace", {}});
        std::string name = lower_trimmed(std::string_view(line).substr(0, colon));
        std::string value = lower_trimmed(std::string_view(line).substr(colon + 1));
        if (name == "content-length") {
          if (value.empty() || value.size() > 19 || value.find_first_not_of("0123456789") != std::string::npos ||
              content_length_)
            return refuse(Error{Code::ProtocolError, "the Content-Length header is malformed or repeated", {}});
          content_length_ = std::stoull(value);
        } else if (name == "transfer-encoding") {
          if (transfer_encoding_ || value != "chunked")
            return refuse(Error{Code::ProtocolError,
                                "only one Transfer-Encoding header, and only \"chunked\", is accepted", {}});
          transfer_encoding_ = chunked_ = true;
        }
        return {};
      }
      // The end of the head: what follows is the body, framed one way only.
      if (chunked_ && content_length_)
        return refuse(Error{Code::ProtocolError, "Content-Length and Transfer-Encoding together", {}});
      if (content_length_ && *content_length_ > limits_.max_body_bytes)
        return refuse(Error{Code::RequestTooLarge,
                            fmt::format("the request body is larger than {} bytes", limits_.max_body_bytes),
                            {{"max_body_bytes", limits_.max_body_bytes}}});
      if (body_expected_ && !chunked_ && !content_length_)
        return refuse(Error{Code::ProtocolError,
                            "a request that may carry a body needs Content-Length or chunked Transfer-Encoding", {}});
      if (chunked_) {
        state_ = State::ChunkSize;
      } else if (content_length_ && *content_length_ > 0) {
        state_ = State::Body;
        remaining_ = *content_length_;
      } else {
        next_request();
      }
      return {};
    }
    case State::ChunkSize: {
      std::string_view size = std::string_view(line).substr(0, line.find(';'));
      while (!size.empty() && (size.back() == ' ' || size.back() == '\t')) size.remove_suffix(1);
      if (size.empty() || size.size() > 15 || size.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        return refuse(Error{Code::ProtocolError, "a chunk size is malformed", {}});
      uint64_t n = std::stoull(std::string(size), nullptr, 16);
      body_bytes_ += n;
      if (body_bytes_ > limits_.max_body_bytes)
        return refuse(Error{Code::RequestTooLarge,
                            fmt::format("the chunked request body is larger than {} bytes", limits_.max_body_bytes),
                            {{"max_body_bytes", limits_.max_body_bytes}}});
      if (n == 0) {
        state_ = State::Trailer;
      } else {
        state_ = State::ChunkData;
        remaining_ = n;
      }
      return {};
    }
    case State::ChunkEnd:
      state_ = State::ChunkSize;
      return {};
    case State::Trailer:
      if (line.empty()) {
        next_request();
        return {};
      }
      if (++headers_ > limits_.max_headers)
        return refuse(Error{Code::RequestHeadTooLarge,
                            fmt::format("the request has more than {} headers and trailers", limits_.max_headers),
                            {{"max_headers", limits_.max_headers}}});
      return {};
    case State::Body:
    case State::ChunkData:
      break;
  }
  return {};
}

}  // namespace airlock::server
