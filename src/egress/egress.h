// Egress: the allow-list check for one URL and the fetch pinned to the address that was checked.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "egress/address.h"
#include "policy/task_policy.h"

namespace airlock::egress {

// Name resolution is a seam: production asks getaddrinfo, tests answer from a table (and
// may answer differently the second time, as a rebinding DNS server would).
using Resolver = std::function<Result<std::vector<IpAddress>>(const std::string& host)>;
Resolver system_resolver();

struct Target {
  std::string url;     // as normalised by the URL parser
  std::string scheme;  // "http" | "https"
  std::string host;    // lower-case, no trailing dot, IPv6 without brackets
  int port = 0;
  bool literal = false;  // the host is an address literal (in any spelling)
};

// Parses an absolute http(s) URL. Userinfo ("user:pass@") and zone ids are refused:
// they are how a URL is made to look like one host and reach another.
Result<Target> parse_target(std::string_view url);

struct Admission {
  Target target;
  std::vector<IpAddress> resolved;  // every address the name had; each one was checked
  IpAddress pinned;                 // the one the connection must reach
  size_t rule = 0;                  // index of the rule that admitted it
  bool allow_private = false;       // the admitting rule relaxed the address check
};

// Checks `url` against the rules: scheme, port, then host (a name rule: exact, "*.suffix"
// or "*"; a CIDR rule: every address inside the range). Every resolved address must pass;
// a name rule admits only globally routable addresses unless it says allow_private. A
// refusal is AIRLOCK_EGRESS_DENIED with the reason and the addresses in its facts.
Result<Admission> admit(const std::vector<policy::EgressRule>& rules, std::string_view url,
                        const Resolver& resolve);

using HeaderFields = std::vector<std::pair<std::string, std::string>>;

struct FetchRequest {
  std::string method = "GET";
  std::string url;
  HeaderFields headers;
  std::string body;
};

// A response streamed instead of kept (the model gateway): `on_head` once, with the status and the
// fields (names lower-cased), before the first body byte or at the end when there is none; then
// `on_body` for each piece. Either returning false ends the transfer (AIRLOCK_TOOL_FAILED). The
// response cap still applies to the whole body. `cancelled` is polled while the transfer runs;
// true ends it.
struct FetchStream {
  std::function<bool(long status, const HeaderFields& fields)> on_head;
  std::function<bool(std::string_view piece)> on_body;
  std::function<bool()> cancelled;
};

struct FetchLimits {
  uint64_t max_response_bytes = 1 << 20;
  uint64_t timeout_ms = 30000;
  std::string ca_file;  // empty: the system's trust store
};

struct FetchResponse {
  long status = 0;
  HeaderFields headers;
  std::string body;  // empty when streamed
  std::string pinned_address;
  std::string redirect_to;  // a Location the fetch did not follow
  double elapsed_ms = 0;
  Json to_json() const;  // body as "body" (UTF-8) or "body_base64"
};

// Fetches exactly once, from `admission.pinned`: libcurl is told that address for the host
// and its socket callback refuses any other, so a second DNS answer cannot redirect the
// connection. Redirects are returned, not followed; no proxy from the environment is used;
// TLS certificates and host names are verified. A response larger than the cap is
// AIRLOCK_LIMIT_EXCEEDED, a slow one AIRLOCK_TOOL_TIMEOUT; other failures AIRLOCK_EGRESS_DENIED
// (refused connection) or AIRLOCK_TOOL_FAILED (TLS, protocol) with curl's reason.
Result<FetchResponse> fetch_pinned(const Admission& admission, const FetchRequest& req, const FetchLimits& limits,
                                   const FetchStream* stream = nullptr);

}  // namespace airlock::egress
