// LoopbackHttp: accept, read one request head, answer from the handler, close.
#include "broker/loopback_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace airlock::broker {

namespace {

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 302: return "Found";
    case 404: return "Not Found";
    default: return "Status";
  }
}

void send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    // MSG_NOSIGNAL: a client that stops reading (a capped fetch) is not a SIGPIPE.
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  auto lower = [](std::string_view v) {
    std::string out(v);
    for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return out;
  };
  std::string want = lower(name) + ":";
  std::string text = lower(head);
  for (size_t at = text.find("\r\n"); at != std::string::npos; at = text.find("\r\n", at + 2)) {
    if (text.compare(at + 2, want.size(), want) != 0) continue;
    size_t from = at + 2 + want.size(), to = head.find("\r\n", from);
    std::string v = head.substr(from, to - from);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
  return "";
}

Result<std::unique_ptr<LoopbackHttp>> LoopbackHttp::start(const std::string& address, int port, Handler handler) {
  std::unique_ptr<LoopbackHttp> s(new LoopbackHttp());
  s->handler_ = std::move(handler);
  s->listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s->listener_) return fail_errno(Code::IoError, "socket", errno);
  int one = 1;
  ::setsockopt(s->listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &sin.sin_addr) != 1)
    return fail(Code::OptionInvalid, fmt::format("{} is not an IPv4 address", address));
  if ((ntohl(sin.sin_addr.s_addr) >> 24) != 127)
    return fail(Code::OptionInvalid, fmt::format("{} is not a loopback address", address));
  if (::bind(s->listener_.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0)
    return fail_errno(Code::IoError, fmt::format("bind {}:{}", address, port), errno);
  if (::listen(s->listener_.get(), 16) < 0) return fail_errno(Code::IoError, "listen", errno);
  socklen_t len = sizeof sin;
  ::getsockname(s->listener_.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  s->port_ = ntohs(sin.sin_port);
  s->stop_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!s->stop_) return fail_errno(Code::IoError, "eventfd", errno);
  s->thread_ = std::thread([p = s.get()] { p->serve(); });
  return s;
}

LoopbackHttp::~LoopbackHttp() {
  uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void LoopbackHttp::serve() {
  for (;;) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents & POLLIN) return;
    UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;
    timeval tv{2, 0};  // a client that sends no request head is dropped, not waited for
    ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
      ssize_t n = ::recv(conn.get(), buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    // "GET /path HTTP/1.1"
    size_t sp1 = head.find(' '), sp2 = sp1 == std::string::npos ? sp1 : head.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) continue;
    HttpReply r = handler_(HttpRequest{head.substr(sp1 + 1, sp2 - sp1 - 1), head});
    std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n", r.status,
                                  reason(r.status), r.body.size());
    for (const auto& [k, v] : r.headers) out += fmt::format("{}: {}\r\n", k, v);
    out += "\r\n";
    out += r.body;
    send_all(conn.get(), out);
  }
}

}  // namespace airlock::broker
