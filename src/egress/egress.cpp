// Egress: URL parsing, allow-list admission with address classes, and the pinned libcurl fetch.
#include "egress/egress.h"

#include "egress/curl_api.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "base/encoding.h"
#include "base/hash.h"

namespace airlock::egress {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::unexpected<Error> denied(std::string message, Json facts) {
  return fail(Code::EgressDenied, std::move(message), std::move(facts));
}

std::optional<std::string> url_part(const CurlApi& c, CURLU* u, CURLUPart part, unsigned flags = 0) {
  char* out = nullptr;
  if (c.url_get(u, part, &out, flags) != CURLUE_OK || !out) return std::nullopt;
  std::string s(out);
  c.free(out);
  return s;
}

}  // namespace

Resolver system_resolver() {
  return [](const std::string& host) -> Result<std::vector<IpAddress>> {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0)
      return denied(fmt::format("{} does not resolve: {}", host, ::gai_strerror(rc)), {{"host", host}});
    std::vector<IpAddress> out;
    for (addrinfo* p = res; p; p = p->ai_next) {
      IpAddress a;
      if (p->ai_family == AF_INET) {
        auto* sin = reinterpret_cast<sockaddr_in*>(p->ai_addr);
        std::memcpy(a.bytes.data(), &sin->sin_addr, 4);
      } else if (p->ai_family == AF_INET6) {
        a.v6 = true;
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(p->ai_addr);
        std::memcpy(a.bytes.data(), &sin6->sin6_addr, 16);
      } else {
        continue;
      }
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
    ::freeaddrinfo(res);
    return out;
  };
}

Result<Target> parse_target(std::string_view url) {
  const CurlApi& c = *TRY(curl_api());
  auto deleter = [&c](CURLU* u) { c.url_cleanup(u); };
  std::unique_ptr<CURLU, decltype(deleter)> u(c.url(), deleter);
  std::string text(url);
  Json facts = {{"url", text}};
  if (c.url_set(u.get(), CURLUPART_URL, text.c_str(), 0) != CURLUE_OK)
    return denied(fmt::format("\"{}\" is not an absolute URL", text), facts);
  Target t;
  t.scheme = lower(url_part(c, u.get(), CURLUPART_SCHEME).value_or(""));
  if (t.scheme != "http" && t.scheme != "https")
    return denied(fmt::format("the scheme \"{}\" is not fetched (http and https only)", t.scheme), facts);
  if (url_part(c, u.get(), CURLUPART_USER) || url_part(c, u.get(), CURLUPART_PASSWORD))
    return denied("a URL with credentials in it (user@host) is refused: it names one host and reaches another",
                  facts);
  if (url_part(c, u.get(), CURLUPART_ZONEID)) return denied("an IPv6 zone id is refused", facts);
  auto host = url_part(c, u.get(), CURLUPART_HOST);
  if (!host || host->empty()) return denied("the URL has no host", facts);
  std::string h = lower(*host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  while (!h.empty() && h.back() == '.') h.pop_back();
  // Whatever spelling the URL used ("2130706433", "0x7f.1", "[::ffff:7f00:1]"), the host
  // is compared and classed in its canonical form.
  if (auto lit = parse_literal(h)) {
    t.literal = true;
    h = lit->to_string();
  }
  t.host = h;
  auto port = url_part(c, u.get(), CURLUPART_PORT, CURLU_DEFAULT_PORT);
  if (!port) return denied("the URL has no port", facts);
  t.port = std::atoi(port->c_str());
  t.url = url_part(c, u.get(), CURLUPART_URL).value_or(text);
  return t;
}

namespace {

bool host_matches(const std::string& rule, const std::string& host) {
  if (rule == "*") return true;
  if (rule.starts_with("*.")) {
    std::string_view suffix = std::string_view(rule).substr(1);  // ".example.com"
    return host.size() > suffix.size() && host.ends_with(suffix);
  }
  return rule == host;
}

std::string rule_text(const policy::EgressRule& r) {
  return r.host ? fmt::format("host {}", *r.host) : fmt::format("cidr {}", r.cidr.value_or(""));
}

}  // namespace

Result<Admission> admit(const std::vector<policy::EgressRule>& rules, std::string_view url, const Resolver& resolve) {
  Target t = TRY(parse_target(url));
  Json facts = {{"url", t.url}, {"scheme", t.scheme}, {"host", t.host}, {"port", t.port}};
  std::optional<std::vector<IpAddress>> addrs;
  Json reasons = Json::array();
  for (size_t i = 0; i < rules.size(); ++i) {
    const auto& r = rules[i];
    if (std::find(r.schemes.begin(), r.schemes.end(), t.scheme) == r.schemes.end()) {
      reasons.push_back(fmt::format("rule {} ({}) does not admit scheme {}", i, rule_text(r), t.scheme));
      continue;
    }
    if (std::find(r.ports.begin(), r.ports.end(), t.port) == r.ports.end()) {
      reasons.push_back(fmt::format("rule {} ({}) does not admit port {}", i, rule_text(r), t.port));
      continue;
    }
    if (r.host && !host_matches(*r.host, t.host)) {
      reasons.push_back(fmt::format("rule {} ({}) does not name {}", i, rule_text(r), t.host));
      continue;
    }
    // Resolved once per admission: the addresses checked here are the only ones fetched from.
    if (!addrs) {
      if (t.literal) {
        addrs = std::vector<IpAddress>{*parse_literal(t.host)};
      } else {
        auto got = resolve(t.host);
        if (!got) {  // an allowed name that does not resolve: the network failed, not the policy
          Error e = got.error();
          e.code = Code::EgressFailed;
          for (auto& [k, v] : facts.items()) e.facts[k] = v;
          return std::unexpected(e);
        }
        if (got->empty()) return fail(Code::EgressFailed, fmt::format("{} resolves to no address", t.host), facts);
        addrs = std::move(*got);
      }
      Json list = Json::array();
      for (const auto& a : *addrs) list.push_back({{"address", a.to_string()}, {"class", classify(a).describe()}});
      facts["addresses"] = list;
    }
    std::optional<std::string> refusal;
    for (const auto& a : *addrs) {
      if (r.cidr) {
        auto range = TRY(parse_cidr(*r.cidr));
        if (!range.contains(a)) refusal = fmt::format("{} is outside {}", a.to_string(), *r.cidr);
      } else if (!r.allow_private) {
        auto c = classify(a);
        if (!c.global())
          refusal = fmt::format("{} is {}, and the rule admits only globally routable addresses "
                                "(allow_private is not set)",
                                a.to_string(), c.describe());
      }
      if (refusal) break;
    }
    if (refusal) {
      reasons.push_back(fmt::format("rule {} ({}): {}", i, rule_text(r), *refusal));
      continue;
    }
    Admission adm{t, *addrs, addrs->front(), i, r.allow_private};
    return adm;
  }
  facts["reasons"] = reasons;
  std::string why = reasons.empty() ? std::string("the policy admits no egress")
                                    : reasons.back().get<std::string>();
  return denied(fmt::format("{} is not on the allow-list: {}", t.url, why), facts);
}

Json FetchResponse::to_json() const {
  Json h = Json::array();
  for (const auto& [k, v] : headers) h.push_back({k, v});
  Json j = {{"status", status}, {"headers", h}, {"pinned_address", pinned_address}, {"elapsed_ms", elapsed_ms},
            {"bytes", body.size()}};
  if (!redirect_to.empty()) j["redirect_to"] = redirect_to;
  if (is_valid_utf8(body))
    j["body"] = body;
  else
    j["body_base64"] = base64_encode(body);
  return j;
}

namespace {

struct Transfer {
  const Admission* adm;
  uint64_t cap;
  std::string body;
  HeaderFields headers;
  bool over_cap = false;
  bool wrong_address = false;
  std::string attempted;
  // Streaming (FetchRequest::on_head/on_body): the handle, to read the status when the body starts.
  const FetchStream* stream = nullptr;
  const CurlApi* api = nullptr;
  CURL* handle = nullptr;
  uint64_t received = 0;
  bool head_sent = false;
  bool sink_refused = false;
  bool send_head() {
    head_sent = true;
    long status = 0;
    api->easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    return stream->on_head(status, headers);
  }
};

size_t on_body(char* p, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  size_t len = size * n;
  if (t->received + len > t->cap) {
    t->over_cap = true;
    return 0;  // aborts the transfer
  }
  t->received += len;
  if (t->stream) {
    if ((!t->head_sent && !t->send_head()) || !t->stream->on_body(std::string_view(p, len))) {
      t->sink_refused = true;
      return 0;
    }
    return len;
  }
  t->body.append(p, len);
  return len;
}

int on_progress(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return (*static_cast<const std::function<bool()>*>(ud))() ? 1 : 0;
}

size_t on_header(char* p, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  std::string_view line(p, size * n);
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    if (line.starts_with("HTTP/")) t->headers.clear();  // a new response (after 100 Continue)
    return size * n;
  }
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    return std::string(s);
  };
  t->headers.emplace_back(lower(trim(line.substr(0, colon))), trim(line.substr(colon + 1)));
  return size * n;
}

// The pin's enforcement point: libcurl asks us for every socket it opens, with the address
// it is about to connect to. Anything but the admitted address is refused.
curl_socket_t on_open_socket(void* ud, curlsocktype purpose, curl_sockaddr* addr) {
  auto* t = static_cast<Transfer*>(ud);
  IpAddress a;
  int port = 0;
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
  if (addr->family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&addr->addr);
    std::memcpy(a.bytes.data(), &sin->sin_addr, 4);
    port = ntohs(sin->sin_port);
  } else if (addr->family == AF_INET6) {
    a.v6 = true;
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&addr->addr);
    std::memcpy(a.bytes.data(), &sin6->sin6_addr, 16);
    port = ntohs(sin6->sin6_port);
  } else {
    return CURL_SOCKET_BAD;
  }
  if (!(a == t->adm->pinned) || port != t->adm->target.port) {
    t->wrong_address = true;
    t->attempted = fmt::format("{} port {}", a.to_string(), port);
    return CURL_SOCKET_BAD;
  }
  return ::socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}


}  // namespace

Result<FetchResponse> fetch_pinned(const Admission& adm, const FetchRequest& req, const FetchLimits& limits,
                                   const FetchStream* stream) {
  const CurlApi& api = *TRY(curl_api());
  auto easy_deleter = [&api](CURL* h) { api.easy_cleanup(h); };
  auto slist_deleter = [&api](curl_slist* l) { api.slist_free_all(l); };
  std::unique_ptr<CURL, decltype(easy_deleter)> c(api.easy_init(), easy_deleter);
  if (!c) return fail(Code::ConfigError, "libcurl could not make a handle");
  Transfer tr{&adm, limits.max_response_bytes, {}, {}, false, false, {}};
  bool streamed = stream != nullptr;
  if (streamed) {
    tr.stream = stream;
    tr.api = &api;
    tr.handle = c.get();
  }
  const Target& t = adm.target;
  std::string pin_addr = adm.pinned.v6 ? "[" + adm.pinned.to_string() + "]" : adm.pinned.to_string();
  std::unique_ptr<curl_slist, decltype(slist_deleter)> resolve(
      api.slist_append(nullptr, fmt::format("{}:{}:{}", t.host, t.port, pin_addr).c_str()), slist_deleter);
  std::unique_ptr<curl_slist, decltype(slist_deleter)> headers(nullptr, slist_deleter);
  for (const auto& [k, v] : req.headers) {
    if (k.find_first_of(":\r\n") != std::string::npos || v.find_first_of("\r\n") != std::string::npos)
      return fail(Code::EgressDenied, fmt::format("the header \"{}\" is malformed", k), {{"header", k}});
    headers.reset(api.slist_append(headers.release(), fmt::format("{}: {}", k, v).c_str()));
  }
  CURL* h = c.get();
  api.easy_setopt(h, CURLOPT_URL, t.url.c_str());
  api.easy_setopt(h, CURLOPT_RESOLVE, resolve.get());
  api.easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  api.easy_setopt(h, CURLOPT_OPENSOCKETDATA, &tr);
  api.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  api.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  api.easy_setopt(h, CURLOPT_PROXY, "");  // never a proxy from the environment
  api.easy_setopt(h, CURLOPT_NOPROXY, "*");
  api.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
  api.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!limits.ca_file.empty()) api.easy_setopt(h, CURLOPT_CAINFO, limits.ca_file.c_str());
  api.easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(limits.timeout_ms));
  api.easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_response_bytes));
  api.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  api.easy_setopt(h, CURLOPT_WRITEDATA, &tr);
  api.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  api.easy_setopt(h, CURLOPT_HEADERDATA, &tr);
  api.easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  if (stream && stream->cancelled) {
    api.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    api.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    api.easy_setopt(h, CURLOPT_XFERINFODATA, const_cast<std::function<bool()>*>(&stream->cancelled));
  }
  std::string method = req.method;
  for (char& ch : method) ch = static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
  if (method == "HEAD") {
    api.easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method != "GET" || !req.body.empty()) {
    if (!req.body.empty() || method == "POST") {
      api.easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
      api.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    }
    api.easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  auto started = std::chrono::steady_clock::now();
  CURLcode rc = api.easy_perform(h);
  double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  Json facts = {{"url", t.url}, {"pinned_address", adm.pinned.to_string()}, {"elapsed_ms", elapsed}};
  if (tr.wrong_address)
    return fail(Code::EgressDenied,
                fmt::format("the connection went for {} instead of the admitted {}", tr.attempted,
                            adm.pinned.to_string()),
                facts);
  if (tr.over_cap || rc == CURLE_FILESIZE_EXCEEDED) {
    facts["limit_bytes"] = limits.max_response_bytes;
    return fail(Code::LimitExceeded,
                fmt::format("the response from {} is larger than the {} bytes allowed", t.host,
                            limits.max_response_bytes),
                facts);
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK)
    return fail(Code::ToolFailed, fmt::format("fetching {} was cancelled", t.url), facts);
  if (tr.sink_refused)
    return fail(Code::ToolFailed, fmt::format("the response from {} could not be passed on: its reader went away", t.host),
                facts);
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    facts["timeout_ms"] = limits.timeout_ms;
    return fail(Code::ToolTimeout, fmt::format("{} did not answer within {} ms", t.host, limits.timeout_ms), facts);
  }
  if (rc != CURLE_OK) {
    facts["curl"] = api.easy_strerror(rc);
    long os_errno = 0;
    if (api.easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno > 0) {
      facts["errno"] = os_errno;
      const char* name = strerrorname_np(static_cast<int>(os_errno));
      facts["errno_name"] = name ? name : "";
    }
    // Allowed, admitted, pinned, and then the network failed: not the policy's refusal.
    Code code = rc == CURLE_COULDNT_CONNECT ? Code::EgressFailed : Code::ToolFailed;
    return fail(code, fmt::format("fetching {} failed: {}", t.url, api.easy_strerror(rc)), facts);
  }
  if (streamed && !tr.head_sent && !tr.send_head())
    return fail(Code::ToolFailed, fmt::format("the response from {} could not be passed on: its reader went away", t.host),
                facts);
  FetchResponse resp;
  api.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  char* location = nullptr;
  if (api.easy_getinfo(h, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location) resp.redirect_to = location;
  resp.headers = std::move(tr.headers);
  resp.body = std::move(tr.body);
  resp.pinned_address = adm.pinned.to_string();
  resp.elapsed_ms = elapsed;
  return resp;
}

}  // namespace airlock::egress
