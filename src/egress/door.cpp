// The network door: CONNECT tunnels and plain HTTP forwarding, each request admitted and pinned.
#include "egress/door.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include <fmt/ranges.h>

namespace airlock::egress {

std::string describe_rules(const std::vector<policy::EgressRule>& rules) {
  std::vector<std::string> parts;
  for (const auto& r : rules)
    parts.push_back(fmt::format("{} {} ports [{}] schemes [{}]{}", r.host ? "host" : "cidr",
                                r.host ? *r.host : r.cidr.value_or(""), fmt::join(r.ports, ", "),
                                fmt::join(r.schemes, ", "), r.allow_private ? " allow_private" : ""));
  return parts.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(parts, "; "));
}

struct DoorServer::State {
  DoorOptions opts;
  UniqueFd listener;
  UniqueFd stop;  // an eventfd: readable once the server stops, for every poll that watches it
  std::mutex mu;
  struct Conn {
    std::thread thread;
    std::atomic<bool> done = false;
  };
  std::list<Conn> conns;
  std::thread acceptor;
  std::string self;  // the listener's own "address:port": an absolute URL for it is the gateway
  std::atomic<size_t> gateway_active = 0;
  void serve(UniqueFd client);
};

namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kChunk = 256 * 1024;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

// Waits until `fd` has `events` or the server stops (false) or the timeout passes (false).
bool wait_for(int fd, short events, int stop, int timeout_ms = -1) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {stop, POLLIN, 0}};
    int r = ::poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || (p[1].revents & POLLIN)) return false;
    return true;
  }
}

bool write_all(int fd, std::string_view data, int stop, uint64_t* counted = nullptr) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, stop)) return false;
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
    if (counted) *counted += static_cast<uint64_t>(n);
  }
  return true;
}

// One direction of a connection, with what was read ahead of what the parser took.
struct Stream {
  int fd;
  int stop;
  std::string buf;
  // Reads more into buf; false at EOF, on error, or when the server stops.
  bool fill() {
    char tmp[kChunk];
    for (;;) {
      ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n > 0) {
        buf.append(tmp, static_cast<size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (!wait_for(fd, POLLIN, stop)) return false;
    }
  }
  // Everything up to and including `delim`; nullopt at EOF or past kMaxHead (then *too_large).
  std::optional<std::string> until(std::string_view delim, bool* too_large = nullptr) {
    for (;;) {
      size_t end = buf.find(delim);
      if (end != std::string::npos) {
        std::string h = buf.substr(0, end + delim.size());
        buf.erase(0, end + delim.size());
        return h;
      }
      if (buf.size() > kMaxHead) {
        if (too_large) *too_large = true;
        return std::nullopt;
      }
      if (!fill()) return std::nullopt;
    }
  }
  std::optional<std::string> head(bool* too_large) { return until("\r\n\r\n", too_large); }
  std::optional<std::string> line() { return until("\r\n"); }
  // Copies exactly n bytes to `to`.
  bool relay(int to, uint64_t n, uint64_t* counted) {
    while (n > 0) {
      if (buf.empty() && !fill()) return false;
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      if (!write_all(to, std::string_view(buf).substr(0, take), stop, counted)) return false;
      buf.erase(0, take);
      n -= take;
    }
    return true;
  }
  bool relay_chunked(int to, uint64_t* counted) {
    for (;;) {
      auto size_line = line();
      if (!size_line) return false;
      if (!write_all(to, *size_line, stop, counted)) return false;
      char* end = nullptr;
      uint64_t size = std::strtoull(size_line->c_str(), &end, 16);
      if (end == size_line->c_str()) return false;
      if (size == 0) {  // trailers, then the empty line
        for (;;) {
          auto t = line();
          if (!t || !write_all(to, *t, stop, counted)) return false;
          if (*t == "\r\n") return true;
        }
      }
      if (!relay(to, size + 2, counted)) return false;  // the data and its CRLF
    }
  }
  // Appends exactly n bytes to `out`.
  bool take(uint64_t n, std::string& out) {
    while (buf.size() < n)
      if (!fill()) return false;
    out.append(buf, 0, static_cast<size_t>(n));
    buf.erase(0, static_cast<size_t>(n));
    return true;
  }
  // A chunked body, decoded, appended to `out`; false past `max` bytes (then *too_large) or on a
  // malformed chunk.
  bool take_chunked(std::string& out, uint64_t max, bool* too_large) {
    for (;;) {
      auto size_line = line();
      if (!size_line) return false;
      char* end = nullptr;
      uint64_t size = std::strtoull(size_line->c_str(), &end, 16);
      if (end == size_line->c_str()) return false;
      if (size == 0) {
        for (;;) {
          auto t = line();
          if (!t) return false;
          if (*t == "\r\n") return true;
        }
      }
      if (size > max || out.size() + size > max) {
        *too_large = true;
        return false;
      }
      std::string crlf;
      if (!take(size, out) || !take(2, crlf) || crlf != "\r\n") return false;
    }
  }
  bool relay_to_eof(int to, uint64_t* counted) {
    for (;;) {
      if (!buf.empty() && !write_all(to, buf, stop, counted)) return false;
      buf.clear();
      if (!fill()) return true;
    }
  }
};

}  // namespace

bool gateway_path_allowed(std::string_view path, const std::vector<std::string>& allowed) {
  std::string_view p = path.substr(0, path.find('?'));
  if (p.empty() || p.front() != '/') return false;
  // What the upstream client (libcurl) would normalise into another path, or a server decode into one.
  std::string low = lower(std::string(p));
  if (low.find("%2e") != std::string::npos || low.find("%2f") != std::string::npos ||
      low.find("%5c") != std::string::npos || low.find('\\') != std::string::npos || low.find("//") != std::string::npos)
    return false;
  for (size_t i = 0; i < p.size();) {
    size_t j = p.find('/', i + 1);
    std::string_view seg = p.substr(i + 1, (j == std::string_view::npos ? p.size() : j) - i - 1);
    if (seg == "." || seg == "..") return false;
    if (j == std::string_view::npos) break;
    i = j;
  }
  if (allowed.empty()) return true;
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) {
    return p == a || (p.starts_with(a) && (a.ends_with("/") || p[a.size()] == '/'));
  });
}

std::string ProxyHead::get(std::string_view name) const {
  for (const auto& [k, v] : fields)
    if (k == name) return v;
  return "";
}
bool ProxyHead::has(std::string_view name) const {
  return std::any_of(fields.begin(), fields.end(), [&](const auto& f) { return f.first == name; });
}

std::optional<ProxyHead> parse_proxy_head(std::string_view text) {
  ProxyHead h;
  size_t pos = text.find("\r\n");
  h.first = std::string(text.substr(0, pos));
  if (pos == std::string_view::npos) return h;
  pos += 2;
  while (pos < text.size()) {
    size_t end = text.find("\r\n", pos);
    if (end == pos || end == std::string_view::npos) break;
    std::string_view l(text.data() + pos, end - pos);
    size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    std::string name = lower(std::string(l.substr(0, colon)));
    if (name.find_first_of(" \t") != std::string::npos) return std::nullopt;  // smuggling's favourite
    h.fields.emplace_back(std::move(name), trim(l.substr(colon + 1)));
    pos = end + 2;
  }
  return h;
}

Framing body_framing(const ProxyHead& h, bool is_request) {
  Framing f;
  if (h.has("transfer-encoding")) {
    f.kind = lower(h.get("transfer-encoding")) == "chunked" ? Framing::Chunked : Framing::Invalid;
    return f;
  }
  std::optional<std::string> length;
  for (const auto& [k, v] : h.fields) {
    if (k != "content-length") continue;
    if (length && *length != v) return {Framing::Invalid, 0};
    length = v;
  }
  if (length) {
    if (length->empty() || length->find_first_not_of("0123456789") != std::string::npos || length->size() > 18)
      return {Framing::Invalid, 0};
    return {Framing::Length, std::stoull(*length)};
  }
  f.kind = is_request ? Framing::None : Framing::UntilClose;
  return f;
}

namespace {

using Head = ProxyHead;

std::optional<Head> parse_head(const std::string& text) { return parse_proxy_head(text); }

bool relay_body(Stream& from, int to, const Framing& f, uint64_t* counted) {
  switch (f.kind) {
    case Framing::None: return true;
    case Framing::Length: return from.relay(to, f.length, counted);
    case Framing::Chunked: return from.relay_chunked(to, counted);
    case Framing::UntilClose: return from.relay_to_eof(to, counted);
    case Framing::Invalid: return false;
  }
  return false;
}

std::string status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
  }
  return "Error";
}

Result<UniqueFd> connect_pinned(const IpAddress& a, int port, uint64_t timeout_ms, int stop) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (a.v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(static_cast<uint16_t>(port));
    std::memcpy(&sin6->sin6_addr, a.bytes.data(), 16);
    len = sizeof *sin6;
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(static_cast<uint16_t>(port));
    std::memcpy(&sin->sin_addr, a.bytes.data(), 4);
    len = sizeof *sin;
  }
  Json facts = {{"address", a.to_string()}, {"port", port}};
  // The destination is allowed: what goes wrong from here is the network's, said with errno.
  auto failed = [&](std::string what, int err) {
    auto e = fail_errno(Code::EgressFailed, std::move(what), err);
    for (auto& [k, v] : facts.items()) e.error().facts[k] = v;
    return e;
  };
  UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return failed("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) < 0 && errno != EINPROGRESS)
    return failed(fmt::format("connecting to {} port {} failed", a.to_string(), port), errno);
  if (!wait_for(fd.get(), POLLOUT, stop, static_cast<int>(timeout_ms)))
    return failed(fmt::format("connecting to {} port {} timed out", a.to_string(), port), ETIMEDOUT);
  int err = 0;
  socklen_t elen = sizeof err;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
  if (err != 0) return failed(fmt::format("connecting to {} port {} failed", a.to_string(), port), err);
  return fd;
}

std::string bracketed(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Fields that describe one hop, never forwarded by either route.
bool hop_by_hop(const std::string& k) {
  return k == "host" || k == "connection" || k == "proxy-connection" || k == "keep-alive" ||
         k == "proxy-authorization" || k == "upgrade" || k == "te";
}

// One client connection: a loop of requests until one ends it.
class Connection {
 public:
  Connection(DoorServer::State& st, UniqueFd client) : st_(st), client_(std::move(client)), in_{client_.get(), stop(), {}} {}

  void run() {
    for (;;) {
      bool too_large = false;
      auto text = in_.head(&too_large);
      if (!text) {
        if (too_large) refuse_plain(431, Error{Code::ProtocolError, "the request head is larger than 64 KiB", {}});
        return;
      }
      started_ = std::chrono::steady_clock::now();
      receipt_ = Json::object();
      up_ = down_ = 0;
      if (!one_request(*text)) return;
    }
  }

 private:
  int stop() const { return st_.stop.get(); }

  // Answers with an error and records the request refused. The connection ends after it.
  void refuse_plain(int status, const Error& e) {
    // An allowed destination that could not be reached failed; only a policy decision is "refused".
    std::string body = fmt::format("airlock: {}: {}: {}\n", e.code == Code::EgressFailed ? "failed" : "refused",
                                   to_name(e.code), e.message);
    if (e.code == Code::EgressDenied) body += fmt::format("allowed: {}\n", describe_rules(st_.opts.rules));
    std::string resp = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Airlock-Refusal: {}\r\n"
        "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        status, status_text(status), to_name(e.code), body.size(), body);
    (void)write_all(client_.get(), resp, stop());
    // A destination the policy allows that could not be reached failed; it was not refused.
    receipt_["decision"] = e.code == Code::EgressFailed ? "failed" : "refused";
    receipt_["status"] = status;
    receipt_["error"] = e.to_json();
    if (e.facts.contains("addresses") && !receipt_.contains("addresses")) receipt_["addresses"] = e.facts["addresses"];
    record();
  }

  void record() {
    receipt_["bytes_up"] = up_;
    receipt_["bytes_down"] = down_;
    receipt_["duration_us"] =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started_).count();
    if (st_.opts.record) st_.opts.record(std::move(receipt_));
    receipt_ = Json::object();
  }

  // What an admission found, into the receipt.
  void note(const Admission& adm) {
    Json addrs = Json::array();
    for (const auto& a : adm.resolved) addrs.push_back({{"address", a.to_string()}, {"class", classify(a).describe()}});
    receipt_["host"] = adm.target.host;
    receipt_["port"] = adm.target.port;
    receipt_["addresses"] = addrs;
    receipt_["rule"] = adm.rule;
    if (adm.allow_private) receipt_["allow_private"] = true;
  }

  // Admits `url`, connects to the pinned address; on refusal answers and returns nullopt.
  std::optional<UniqueFd> admit_and_connect(const std::string& url) {
    auto adm = admit(st_.opts.rules, url, st_.opts.resolve);
    if (!adm) {
      refuse_plain(adm.error().code == Code::EgressDenied ? 403 : 502, adm.error());
      return std::nullopt;
    }
    note(*adm);
    auto fd = connect_pinned(adm->pinned, adm->target.port, st_.opts.connect_timeout_ms, stop());
    if (!fd) {
      refuse_plain(502, fd.error());
      return std::nullopt;
    }
    receipt_["connected"] = fmt::format("{}:{}", bracketed(adm->pinned.to_string()), adm->target.port);
    target_ = adm->target;
    return std::move(*fd);
  }

  // Returns whether the connection may carry another request.
  bool one_request(const std::string& text) {
    auto head = parse_head(text);
    std::string method, target, version;
    if (head) {
      std::string_view first = head->first;
      size_t a = first.find(' '), b = first.rfind(' ');
      if (a != std::string_view::npos && b > a) {
        method = first.substr(0, a);
        target = first.substr(a + 1, b - a - 1);
        version = first.substr(b + 1);
      }
    }
    receipt_["method"] = method;
    receipt_["target"] = target;
    if (!head || method.empty() || !version.starts_with("HTTP/1.")) {
      refuse_plain(400, Error{Code::ProtocolError, "the request is not HTTP/1.x", {}});
      return false;
    }
    if (st_.opts.gateway) {
      if (target.starts_with("/")) return gateway(*head, method, target);
      std::string own = "http://" + st_.self;
      if (lower(target).starts_with(own) && (target.size() == own.size() || target[own.size()] == '/'))
        return gateway(*head, method, target.size() == own.size() ? "/" : target.substr(own.size()));
    }
    if (method == "CONNECT") return tunnel(target);
    if (lower(target.substr(0, 7)) == "http://") return forward(*head, method, target);
    if (lower(target.substr(0, 8)) == "https://") {
      refuse_plain(400, Error{Code::ProtocolError,
                              "the door forwards https only through CONNECT (set HTTPS_PROXY, not a https:// request line)",
                              {}});
      return false;
    }
    refuse_plain(400, Error{Code::ProtocolError,
                            fmt::format("\"{}\" is not a proxy request: ask for an absolute http:// URL or CONNECT "
                                        "host:port",
                                        target),
                            {}});
    return false;
  }

  bool tunnel(const std::string& authority) {
    receipt_["door"] = "connect";
    // host:port, an IPv6 address in brackets; the URL admitted is https://host:port/.
    size_t colon = authority.rfind(':');
    std::string host = colon == std::string::npos ? "" : authority.substr(0, colon);
    std::string port = colon == std::string::npos ? "" : authority.substr(colon + 1);
    if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
        port.size() > 5 || host.find_first_of("/@?#") != std::string::npos) {
      refuse_plain(400, Error{Code::ProtocolError, fmt::format("CONNECT wants host:port, not \"{}\"", authority), {}});
      return false;
    }
    auto upstream = admit_and_connect(fmt::format("https://{}:{}/", host, port));
    if (!upstream) return false;
    receipt_["decision"] = "allowed";
    if (!write_all(client_.get(), "HTTP/1.1 200 Connection established\r\n\r\n", stop())) {
      record();
      return false;
    }
    // From here bytes go only to the pinned address, whatever they say.
    int up = upstream->get();
    bool client_open = true, upstream_open = true;
    if (!in_.buf.empty()) {
      client_open = write_all(up, in_.buf, stop(), &up_);
      in_.buf.clear();
    }
    char buf[kChunk];
    while (client_open || upstream_open) {
      pollfd p[3] = {{client_open ? client_.get() : -1, POLLIN, 0}, {upstream_open ? up : -1, POLLIN, 0},
                     {stop(), POLLIN, 0}};
      int r = ::poll(p, 3, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[2].revents & POLLIN)) break;
      auto pump = [&](int from, int to, bool& open, uint64_t* counted) {
        ssize_t n = ::recv(from, buf, sizeof buf, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
        if (n <= 0) {
          open = false;
          ::shutdown(to, SHUT_WR);
          return true;
        }
        return write_all(to, std::string_view(buf, static_cast<size_t>(n)), stop(), counted);
      };
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
        if (!pump(client_.get(), up, client_open, &up_)) break;
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
        if (!pump(up, client_.get(), upstream_open, &down_)) break;
    }
    record();
    return false;
  }

  // The model gateway (door.h): one request, then the connection ends. The receipt says which
  // model host, the method and path (never the query), status, bytes and time; never the key, the
  // placeholder or a body.
  bool gateway(const Head& req, const std::string& method, const std::string& path) {
    const ModelGateway& g = *st_.opts.gateway;
    receipt_["door"] = "model_gateway";
    receipt_["target"] = path.substr(0, path.find('?'));
    if (!gateway_path_allowed(path, g.paths)) {
      refuse_plain(403, Error{Code::EgressDenied,
                              fmt::format("the model gateway forwards only {}", g.paths.empty() ? std::string("clean paths")
                                                                          : fmt::format("{}", fmt::join(g.paths, ", "))),
                              {{"allowed_paths", g.paths}}});
      return false;
    }
    if (req.get(g.header) != g.prefix + g.placeholder) {
      refuse_plain(403, Error{Code::EgressDenied,
                              fmt::format("a model request carries the session's placeholder credential in {}", g.header),
                              {{"header", g.header}}});
      return false;
    }
    Framing f = body_framing(req, true);
    std::string body;
    bool too_large = f.kind == Framing::Length && f.length > g.max_request_bytes;
    bool ok = !too_large && (f.kind == Framing::None || (f.kind == Framing::Length && in_.take(f.length, body)) ||
                             (f.kind == Framing::Chunked && in_.take_chunked(body, g.max_request_bytes, &too_large)));
    if (!ok) {
      if (too_large)
        refuse_plain(413, Error{Code::LimitExceeded,
                                fmt::format("a model request is larger than {} bytes", g.max_request_bytes), {}});
      else if (f.kind == Framing::Invalid || f.kind == Framing::UntilClose)
        refuse_plain(400, Error{Code::ProtocolError, "the request's Content-Length or Transfer-Encoding is not one the door forwards", {}});
      else
        record();  // the client went away mid-body
      return false;
    }
    auto adm = admit(st_.opts.rules, g.upstream + path, st_.opts.resolve);
    if (!adm) {
      refuse_plain(adm.error().code == Code::EgressDenied ? 403 : 502, adm.error());
      return false;
    }
    note(*adm);
    // Each request holds its body in this process: a bounded number at once bounds the memory.
    struct Slot {
      std::atomic<size_t>& n;
      ~Slot() { --n; }
    } slot{st_.gateway_active};
    if (++st_.gateway_active > g.max_concurrent) {
      refuse_plain(503, Error{Code::LimitExceeded,
                              fmt::format("more than {} model requests at once", g.max_concurrent), {}});
      return false;
    }
    FetchRequest fr;
    fr.method = method;
    fr.url = adm->target.url;
    for (const auto& [k, v] : req.fields)
      if (!hop_by_hop(k) && k != g.header && k != "content-length" && k != "transfer-encoding" && k != "expect")
        fr.headers.emplace_back(k, v);
    fr.headers.emplace_back(g.header, g.prefix + g.secret);
    fr.body = std::move(body);
    up_ = fr.body.size();
    bool answered = false;
    FetchStream out_stream;
    out_stream.on_head = [&](long status, const HeaderFields& fields) {
      answered = true;
      receipt_["status"] = status;
      std::string out = fmt::format("HTTP/1.1 {} \r\n", status);
      for (const auto& [k, v] : fields)
        if (!hop_by_hop(k) && k != "content-length" && k != "transfer-encoding") out += fmt::format("{}: {}\r\n", k, v);
      out += "Connection: close\r\n\r\n";
      return write_all(client_.get(), out, stop(), &down_);
    };
    out_stream.on_body = [&](std::string_view piece) { return write_all(client_.get(), piece, stop(), &down_); };
    out_stream.cancelled = [this] {  // the door is stopping: a slow model does not hold its destructor
      pollfd p{stop(), POLLIN, 0};
      return ::poll(&p, 1, 0) > 0;
    };
    receipt_["decision"] = "allowed";
    auto resp = fetch_pinned(*adm, fr, FetchLimits{g.max_response_bytes, g.timeout_ms, g.ca_file}, &out_stream);
    if (!resp) {
      if (!answered) {
        refuse_plain(502, resp.error());
        return false;
      }
      receipt_["error"] = resp.error().to_json();
    }
    record();
    return false;
  }

  bool forward(const Head& req, const std::string& method, const std::string& url) {
    receipt_["door"] = "http";
    Framing body = body_framing(req, true);
    if (body.kind == Framing::Invalid) {
      refuse_plain(400, Error{Code::ProtocolError, "the request's Content-Length or Transfer-Encoding is not one the door forwards", {}});
      return false;
    }
    auto upstream = admit_and_connect(url);
    if (!upstream) return false;
    receipt_["url"] = target_.url;
    int up = upstream->get();
    // Origin form of the admitted URL, and a Host that names the host admitted (not one the
    // client made up). Hop-by-hop fields stay here; the upstream connection serves one request.
    std::string_view rest = std::string_view(target_.url).substr(target_.url.find("://") + 3);
    size_t slash = rest.find_first_of("/?");
    std::string path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
    if (path.front() == '?') path = "/" + path;
    if (size_t hash = path.find('#'); hash != std::string::npos) path.erase(hash);
    bool default_port = (target_.scheme == "http" && target_.port == 80);
    std::string out = fmt::format("{} {} HTTP/1.1\r\nHost: {}{}\r\n", method, path, bracketed(target_.host),
                                  default_port ? "" : fmt::format(":{}", target_.port));
    for (const auto& [k, v] : req.fields)
      if (!hop_by_hop(k)) out += fmt::format("{}: {}\r\n", k, v);
    out += "Connection: close\r\n\r\n";
    bool client_wants_close = lower(req.get("connection")) == "close" || lower(req.get("proxy-connection")) == "close";
    receipt_["decision"] = "allowed";
    if (!write_all(up, out, stop(), &up_) || !relay_body(in_, up, body, &up_)) {
      record();
      return false;
    }
    Stream from_up{up, stop(), {}};
    for (;;) {
      bool too_large = false;
      auto rtext = from_up.head(&too_large);
      if (!rtext) {
        if (down_ == 0)
          refuse_plain(502, Error{Code::EgressFailed, fmt::format("{} sent no response", target_.host), {}});
        else
          record();
        return false;
      }
      auto rhead = parse_head(*rtext);
      int status = rhead && rhead->first.size() >= 12 ? std::atoi(rhead->first.c_str() + 9) : 0;
      if (!rhead || status < 100) {
        refuse_plain(502, Error{Code::EgressFailed, fmt::format("{} sent a response that is not HTTP", target_.host), {}});
        return false;
      }
      if (!write_all(client_.get(), *rtext, stop(), &down_)) {
        record();
        return false;
      }
      if (status >= 100 && status < 200) continue;  // 100 Continue and friends: the real one follows
      receipt_["status"] = status;
      Framing rf = (method == "HEAD" || status == 204 || status == 304) ? Framing{} : body_framing(*rhead, false);
      bool ok = relay_body(from_up, client_.get(), rf, &down_);
      record();
      return ok && rf.kind != Framing::UntilClose && rf.kind != Framing::Invalid && !client_wants_close;
    }
  }

  DoorServer::State& st_;
  UniqueFd client_;
  Stream in_;
  Json receipt_ = Json::object();
  uint64_t up_ = 0, down_ = 0;
  Target target_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace

void DoorServer::State::serve(UniqueFd client) {
  try {
    Connection(*this, std::move(client)).run();
  } catch (const std::exception&) {
    // Nothing thrown leaves a thread (STYLE.md rule 4); the connection simply ends.
  }
}

Result<std::unique_ptr<DoorServer>> DoorServer::start(DoorOptions opts, UniqueFd listener) {
  auto st = std::make_shared<State>();
  st->opts = std::move(opts);
  st->listener = std::move(listener);
  st->stop = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!st->stop) return fail_errno(Code::ExecutorUnavailable, "eventfd for the network door", errno);
  int flags = ::fcntl(st->listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(st->listener.get(), F_SETFL, flags | O_NONBLOCK) < 0)
    return fail_errno(Code::ExecutorUnavailable, "the network door's listening socket", errno);
  sockaddr_storage own{};
  socklen_t own_len = sizeof own;
  if (::getsockname(st->listener.get(), reinterpret_cast<sockaddr*>(&own), &own_len) == 0) {
    char text[INET6_ADDRSTRLEN] = {};
    if (own.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&own);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      st->self = fmt::format("{}:{}", text, ntohs(a->sin_port));
    } else if (own.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&own);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      st->self = fmt::format("[{}]:{}", text, ntohs(a->sin6_port));
    }
  }
  State* s = st.get();
  s->acceptor = std::thread([s] {
    while (wait_for(s->listener.get(), POLLIN, s->stop.get())) {
      UniqueFd c(::accept4(s->listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c) continue;
      std::lock_guard lk(s->mu);
      // Finished connections leave the list here, so it holds only live ones.
      for (auto it = s->conns.begin(); it != s->conns.end();) {
        if (it->done) {
          it->thread.join();
          it = s->conns.erase(it);
        } else {
          ++it;
        }
      }
      if (s->conns.size() >= s->opts.max_connections) {
        std::string body = "airlock: refused: AIRLOCK_LIMIT_EXCEEDED: too many connections through the door at once\n";
        (void)write_all(c.get(),
                        fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                                    body.size(), body),
                        s->stop.get());
        continue;
      }
      auto& conn = s->conns.emplace_back();
      conn.thread = std::thread([s, &conn, fd = c.release()] {
        s->serve(UniqueFd(fd));
        conn.done = true;
      });
    }
  });
  return std::unique_ptr<DoorServer>(new DoorServer(std::move(st)));
}

DoorServer::~DoorServer() {
  uint64_t one = 1;
  (void)!::write(st_->stop.get(), &one, sizeof one);
  if (st_->acceptor.joinable()) st_->acceptor.join();
  std::lock_guard lk(st_->mu);
  for (auto& c : st_->conns) c.thread.join();
  st_->conns.clear();
}

}  // namespace airlock::egress
