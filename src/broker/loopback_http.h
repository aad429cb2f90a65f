// A small HTTP/1.1 responder on a loopback address: the attack suite's servers. One connection
// at a time, `Connection: close`; enough for GETs from libcurl, and nothing airlock serves to
// anyone else.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"

namespace airlock::broker {

struct HttpRequest {
  std::string path;
  std::string head;  // the request line and headers as received
  // The value of header `name` (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct HttpReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class LoopbackHttp {
 public:
  using Handler = std::function<HttpReply(const HttpRequest& request)>;
  // Listens on `address` (an IPv4 loopback address) and `port` (0: any free one).
  static Result<std::unique_ptr<LoopbackHttp>> start(const std::string& address, int port, Handler handler);
  ~LoopbackHttp();  // stops accepting and joins its thread
  int port() const { return port_; }

 private:
  LoopbackHttp() = default;
  void serve();
  UniqueFd listener_, stop_;
  int port_ = 0;
  Handler handler_;
  std::thread thread_;
};

}  // namespace airlock::broker
