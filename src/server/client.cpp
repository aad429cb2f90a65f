// The HTTP/1.1 client: one kept-alive connection, Content-Length framed replies (what httplib sends).
#include "server/client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <strings.h>

namespace airlock::server {

std::string HttpReply::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return "";
}

Json HttpReply::json() const {
  auto j = parse_json(body, Code::ProtocolError, "the reply");
  return j ? std::move(*j) : Json(nullptr);
}

Result<void> HttpClient::connect() {
  fd_.reset();
  if (!at_.unix_path.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (at_.unix_path.size() >= sizeof addr.sun_path) return fail(Code::OptionInvalid, "socket path too long");
    std::memcpy(addr.sun_path, at_.unix_path.c_str(), at_.unix_path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0)
      return fail_errno(Code::ServerUnreachable, fmt::format("cannot connect to {}", at_.unix_path), errno);
    fd_ = std::move(fd);
  } else {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    std::string port = std::to_string(at_.port);
    if (int rc = ::getaddrinfo(at_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
      return fail(Code::ServerUnreachable, fmt::format("cannot resolve {}: {}", at_.host, ::gai_strerror(rc)));
    UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int rc = fd ? ::connect(fd.get(), res->ai_addr, res->ai_addrlen) : -1;
    int err = errno;
    ::freeaddrinfo(res);
    if (rc < 0) return fail_errno(Code::ServerUnreachable, fmt::format("cannot connect to {}:{}", at_.host, at_.port), err);
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = std::move(fd);
  }
  timeval tv{timeout_, 0};
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return {};
}

Result<HttpReply> HttpClient::exchange(const std::string& wire) {
  for (size_t off = 0; off < wire.size();) {
    ssize_t n = ::send(fd_.get(), wire.data() + off, wire.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail_errno(Code::ProtocolError, "sending the request", errno);
    off += static_cast<size_t>(n);
  }
  std::string buf;
  char chunk[65536];
  size_t head_end = std::string::npos;
  HttpReply r;
  size_t need = std::string::npos;
  bool close_after = false;
  for (;;) {
    if (head_end == std::string::npos && (head_end = buf.find("\r\n\r\n")) != std::string::npos) {
      std::string_view head(buf.data(), head_end);
      size_t eol = head.find("\r\n");
      std::string_view status_line = head.substr(0, eol);
      if (status_line.size() < 12 || !status_line.starts_with("HTTP/1."))
        return fail(Code::ProtocolError, "not an HTTP response");
      r.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
      while (eol != std::string_view::npos) {
        size_t start = eol + 2;
        eol = head.find("\r\n", start);
        std::string_view line = head.substr(start, eol == std::string_view::npos ? head.size() - start : eol - start);
        size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string value(line.substr(colon + 1));
        value.erase(0, value.find_first_not_of(' '));
        r.headers.emplace_back(std::string(line.substr(0, colon)), value);
      }
      std::string len = r.header("Content-Length");
      need = len.empty() ? 0 : std::stoul(len);
      close_after = ::strcasecmp(r.header("Connection").c_str(), "close") == 0;
    }
    if (head_end != std::string::npos && buf.size() >= head_end + 4 + need) {
      r.body = buf.substr(head_end + 4, need);
      if (close_after) fd_.reset();
      return r;
    }
    ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::ProtocolError, "reading the response", errno);
    if (n == 0) return fail(Code::ProtocolError, "the server closed the connection before answering");
    buf.append(chunk, static_cast<size_t>(n));
  }
}

Result<HttpReply> HttpClient::request(std::string_view method, std::string_view path, std::string_view body,
                                      const std::vector<std::pair<std::string, std::string>>& headers) {
  bool own_host = std::any_of(headers.begin(), headers.end(), [](const auto& h) { return strcasecmp(h.first.c_str(), "host") == 0; });
  std::string wire = fmt::format("{} {} HTTP/1.1\r\n{}Content-Length: {}\r\n", method, path,
                                 own_host ? "" : "Host: localhost\r\n", body.size());
  if (!body.empty()) wire += "Content-Type: application/json\r\n";
  if (!at_.token.empty()) wire += fmt::format("Authorization: Bearer {}\r\n", at_.token);
  for (const auto& [k, v] : headers) wire += fmt::format("{}: {}\r\n", k, v);
  wire += "\r\n";
  wire += body;
  // A kept-alive connection the server has since closed fails on first use: retry once, fresh.
  bool fresh = !fd_;
  if (fresh) TRY(connect());
  auto r = exchange(wire);
  if (!r && !fresh) {
    TRY(connect());
    r = exchange(wire);
  }
  if (!r) fd_.reset();
  return r;
}

}  // namespace airlock::server
