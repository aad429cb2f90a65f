// The action protocol: strict request parsing, dispatch to the Session, results as JSON.
#include "broker/protocol.h"

#include <algorithm>
#include <set>

#include "base/encoding.h"

namespace airlock::broker {

namespace {

std::unexpected<Error> bad(const std::string& path, std::string message) {
  return fail(Code::ProtocolError, std::move(message), {{"path", path}});
}

// The arguments a request may carry, per action: anything else is refused by name.
Result<void> check_keys(const Json& req, std::initializer_list<std::string_view> allowed) {
  for (const auto& [k, v] : req.items()) {
    if (k == "id" || k == "action") continue;
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      return bad("$." + k, fmt::format("$.{} is not an argument of \"{}\"", k, req["action"].get<std::string>()));
  }
  return {};
}

Result<std::string> str(const Json& req, const char* key, std::optional<std::string> dflt = std::nullopt) {
  if (!req.contains(key)) {
    if (dflt) return *dflt;
    return bad(fmt::format("$.{}", key), fmt::format("$.{} is required", key));
  }
  if (!req[key].is_string()) return bad(fmt::format("$.{}", key), fmt::format("$.{} must be a string", key));
  return req[key].get<std::string>();
}

Result<std::optional<uint64_t>> uint(const Json& req, const char* key) {
  if (!req.contains(key)) return std::optional<uint64_t>{};
  if (!req[key].is_number_unsigned())
    return bad(fmt::format("$.{}", key), fmt::format("$.{} must be a non-negative integer", key));
  return std::optional<uint64_t>{req[key].get<uint64_t>()};
}

Json bytes_json(const std::string& bytes, const char* key) {
  Json j;
  if (is_valid_utf8(bytes))
    j[key] = bytes;
  else
    j[std::string(key) + "_base64"] = base64_encode(bytes);
  return j;
}

Result<Json> dispatch(Session& s, const Json& req) {
  if (!req.is_object()) return bad("$", "a request must be a JSON object");
  if (!req.contains("action") || !req["action"].is_string()) return bad("$.action", "$.action (a string) is required");
  std::string action = req["action"].get<std::string>();
  if (action == "read_file") {
    TRY(check_keys(req, {"path", "offset", "length"}));
    auto path = TRY(str(req, "path"));
    auto offset = TRY(uint(req, "offset"));
    auto length = TRY(uint(req, "length"));
    auto r = TRY(s.read_file(path, offset.value_or(0), length));
    Json j = bytes_json(r.data, "content");
    j["path"] = path;
    j["bytes"] = r.data.size();
    j["size"] = r.size;
    j["offset"] = r.offset;
    return j;
  }
  if (action == "write_file") {
    TRY(check_keys(req, {"path", "content", "content_base64"}));
    auto path = TRY(str(req, "path"));
    bool text = req.contains("content"), b64 = req.contains("content_base64");
    if (text == b64) return bad("$.content", "exactly one of $.content or $.content_base64 is required");
    std::string data;
    if (text) {
      data = TRY(str(req, "content"));
    } else {
      auto decoded = base64_decode(TRY(str(req, "content_base64")));
      if (!decoded) return bad("$.content_base64", "$.content_base64 is not base64");
      data = std::move(*decoded);
    }
    auto r = TRY(s.write_file(path, data));
    return Json{{"path", path}, {"bytes", r.bytes}, {"created", r.created}, {"write_back", r.landing.to_json()}};
  }
  if (action == "list_dir") {
    TRY(check_keys(req, {"path"}));
    auto path = TRY(str(req, "path", "."));
    auto r = TRY(s.list_dir(path));
    Json entries = Json::array();
    for (const auto& e : r.entries) entries.push_back({{"name", e.name}, {"type", e.type}, {"size", e.size}});
    return Json{{"path", path}, {"entries", entries}, {"truncated", r.truncated}};
  }
  if (action == "http_fetch") {
    TRY(check_keys(req, {"url", "method", "headers", "body"}));
    egress::FetchRequest f;
    f.url = TRY(str(req, "url"));
    f.method = TRY(str(req, "method", "GET"));
    f.body = TRY(str(req, "body", ""));
    if (req.contains("headers")) {
      if (!req["headers"].is_object()) return bad("$.headers", "$.headers must be an object of strings");
      for (const auto& [k, v] : req["headers"].items()) {
        if (!v.is_string()) return bad("$.headers." + k, fmt::format("$.headers.{} must be a string", k));
        f.headers.emplace_back(k, v.get<std::string>());
      }
    }
    static const std::set<std::string> kMethods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    if (!kMethods.contains(f.method)) return bad("$.method", fmt::format("$.method \"{}\" is not an HTTP method", f.method));
    auto r = TRY(s.http_fetch(f));
    return r.to_json();
  }
  if (action == "run_tool") {
    TRY(check_keys(req, {"tool", "args", "step"}));
    auto tool = TRY(str(req, "tool"));
    Json args = req.contains("args") ? req["args"] : Json(nullptr);
    if (args.is_array()) {
      for (size_t i = 0; i < args.size(); ++i)
        if (!args[i].is_string()) return bad(path_join("$.args", i), "$.args must be an array of strings");
    } else if (!args.is_null() && !args.is_object()) {
      return bad("$.args", "$.args must be an array of strings (an argv tool's) or an object (a json tool's)");
    }
    auto step = TRY(uint(req, "step"));
    auto r = TRY(s.run_tool(tool, args, step));
    return r.to_json();
  }
  if (action == "receipts") {
    TRY(check_keys(req, {}));
    auto r = TRY(s.receipts());
    return Json{{"receipts", r}, {"path", s.receipts_path()}};
  }
  if (action == "close") {
    TRY(check_keys(req, {"write_back"}));
    bool write_back = true;
    if (req.contains("write_back")) {
      if (!req["write_back"].is_boolean()) return bad("$.write_back", "$.write_back must be true or false");
      write_back = req["write_back"].get<bool>();
    }
    auto r = TRY(s.close(write_back));
    return Json{{"closed", true}, {"written_back", r.to_json()}};
  }
  if (action == "kill") {
    TRY(check_keys(req, {}));
    TRY(s.kill());
    return Json{{"killed", true}};
  }
  return bad("$.action", fmt::format("unknown action \"{}\" (read_file, write_file, list_dir, http_fetch, run_tool, "
                                     "receipts, close, kill)",
                                     action));
}

// A result or an error as the peer gets it: names from the sandbox (a listed file, a message
// quoting one) that are not UTF-8 are sent lossy, with their exact bytes under "not_utf8".
Json lossless(Json j) {
  if (Json exact = repair_utf8(j); !exact.empty() && j.is_object()) j["not_utf8"] = std::move(exact);
  return j;
}

}  // namespace

std::string request_action(const Json& request) {
  if (request.is_object() && request.contains("action") && request["action"].is_string())
    return request["action"].get<std::string>();
  return "";
}

Json handle_request(Session& s, const Json& request) {
  Json id = request.is_object() && request.contains("id") ? request["id"] : Json(nullptr);
  Result<Json> r = [&]() -> Result<Json> {
    try {
      return dispatch(s, request);
    } catch (const std::exception& e) {  // nothing thrown crosses the adapter (STYLE.md rule 4)
      return fail(Code::ProtocolError, fmt::format("the request could not be handled: {}", e.what()));
    }
  }();
  if (r) return Json{{"id", id}, {"ok", true}, {"result", lossless(std::move(*r))}};
  // Refused by the adapter, before any action saw it: recorded too (a digest of the request).
  // A receipt that cannot be written is reported instead of the refusal.
  if (r.error().code == Code::ProtocolError)
    if (auto noted = s.note_refusal("protocol.refused", request, r.error()); !noted)
      return Json{{"id", id}, {"ok", false}, {"error", lossless(noted.error().to_json())}};
  return Json{{"id", id}, {"ok", false}, {"error", lossless(r.error().to_json())}};
}

}  // namespace airlock::broker
