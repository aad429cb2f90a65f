// A small blocking HTTP/1.1 client for `airlock serve` over its unix socket or loopback TCP (tests, bench).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"

namespace airlock::server {

// Where a server listens: a unix socket path, or a TCP host and port (with its bearer token).
struct Endpoint {
  std::string unix_path;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;  // sent as Authorization: Bearer when not empty
};

struct HttpReply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string header(std::string_view name) const;  // "" when absent; names compared without case
  Json json() const;                                 // the body parsed; null when it is not JSON
};

// One connection, kept alive between requests and reopened when the server closed it.
// Not thread-safe: one client per thread.
class HttpClient {
 public:
  explicit HttpClient(Endpoint at, int timeout_seconds = 120) : at_(std::move(at)), timeout_(timeout_seconds) {}
  Result<HttpReply> request(std::string_view method, std::string_view path, std::string_view body = "",
                            const std::vector<std::pair<std::string, std::string>>& headers = {});  // a Host among them replaces "localhost"
  Result<HttpReply> get(std::string_view path) { return request("GET", path); }
  Result<HttpReply> post(std::string_view path, const Json& body) { return request("POST", path, body.dump()); }

 private:
  Result<void> connect();
  Result<HttpReply> exchange(const std::string& wire);
  Endpoint at_;
  int timeout_;
  UniqueFd fd_;
};

}  // namespace airlock::server
