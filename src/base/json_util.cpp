// JSON helpers: a bounded SAX builder for untrusted text, and the lossless UTF-8 repair of values.
#include "base/json_util.h"

#include <utility>
#include <vector>

#include "base/encoding.h"

namespace airlock {

std::string canonical_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::strict);
}

namespace {

// Builds a Json from nlohmann's SAX events (the parser itself keeps its own stack and does not
// recurse), refusing depth, duplicate keys and number overflow as they are met. Pointers on the
// stack stay valid: a value is only ever added to the innermost open container, and an open
// container's own address does not move while its children are added.
class BoundedBuilder {
 public:
  explicit BoundedBuilder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return put(Json(v)); }
  bool string(std::string& v) { return put(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return put(Json::binary(std::move(v))); }
  bool start_object(size_t) { return open(Json::object()); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = stack_.back();
    if (!limits_.allow_duplicate_keys && f.value->contains(k)) {
      why_ = Why::Duplicate;
      f.key = std::move(k);
      error_path_ = path();
      return false;
    }
    f.key = std::move(k);
    return true;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    why_ = ex.id == 406 ? Why::Overflow : Why::Syntax;
    byte_ = position;
    // nlohmann quotes the last token read, which may be any bytes: keep the message UTF-8.
    message_ = lossy_utf8(ex.what());
    return false;
  }

  enum class Why { None, Depth, Duplicate, Overflow, Syntax };
  Why why() const { return why_; }
  const std::string& error_path() const { return error_path_; }
  const std::string& message() const { return message_; }
  size_t byte() const { return byte_; }
  Json take() { return std::move(root_); }

 private:
  struct Frame {
    Json* value;
    std::string key;  // objects: the key whose value comes next
  };

  Json* put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      f.value->push_back(std::move(v));
      return &f.value->back();
    }
    Json& slot = (*f.value)[f.key];
    slot = std::move(v);
    return &slot;
  }
  bool open(Json container) {
    if (stack_.size() >= limits_.max_depth) {
      why_ = Why::Depth;
      error_path_ = path();
      return false;
    }
    Json* p = put(std::move(container));
    stack_.push_back(Frame{p, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  // The JSON path of the value being read, e.g. $.tools[2].argv.
  std::string path() const {
    std::string p = "$";
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      if (f.value->is_object()) {
        p = path_join(p, lossy_utf8(f.key));
      } else {
        // Below the top the open child is the last element; at the top the next one is coming.
        size_t n = f.value->size();
        p = path_join(p, i + 1 < stack_.size() && n > 0 ? n - 1 : n);
      }
    }
    return p;
  }

  const JsonLimits& limits_;
  Json root_;
  std::vector<Frame> stack_;
  Why why_ = Why::None;
  std::string error_path_ = "$";
  std::string message_;
  size_t byte_ = 0;
};

}  // namespace

Result<Json> parse_json(std::string_view text, Code code, std::string_view what, JsonLimits limits) {
  if (text.size() > limits.max_bytes)
    return fail(code, fmt::format("{} is {} bytes, more than the {} allowed", what, text.size(), limits.max_bytes),
                {{"path", "$"}, {"bytes", text.size()}, {"max_bytes", limits.max_bytes}});
  BoundedBuilder b(limits);
  bool ok = false;
  try {
    ok = Json::sax_parse(text, &b, Json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {  // nothing thrown leaves the parser (STYLE.md rule 4)
    return fail(code, fmt::format("{} could not be read: {}", what, lossy_utf8(e.what())), {{"path", "$"}});
  }
  if (ok) return b.take();
  using Why = BoundedBuilder::Why;
  switch (b.why()) {
    case Why::Depth:
      return fail(code, fmt::format("{} nests deeper than {} levels at {}", what, limits.max_depth, b.error_path()),
                  {{"path", b.error_path()}, {"max_depth", limits.max_depth}});
    case Why::Duplicate:
      return fail(code, fmt::format("{}: key {} appears more than once", what, b.error_path()),
                  {{"path", b.error_path()}});
    case Why::Overflow:
      return fail(code, fmt::format("{} holds a number too large for a double: {}", what, b.message()),
                  {{"path", "$"}, {"byte", b.byte()}});
    case Why::Syntax:
    case Why::None:
      break;
  }
  return fail(code, fmt::format("{} is not valid JSON: {}", what, b.message()), {{"path", "$"}, {"byte", b.byte()}});
}

namespace {

// RFC 6901: '~' is "~0" and '/' is "~1".
std::string pointer_token(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

}  // namespace

Json repair_utf8(Json& value) {
  Json exact = Json::array();
  struct Item {
    Json* value;
    std::string pointer;
    size_t depth;
  };
  std::vector<Item> todo{{&value, "", 0}};
  while (!todo.empty()) {
    Item it = std::move(todo.back());
    todo.pop_back();
    Json& v = *it.value;
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (!is_valid_utf8(s)) {
        exact.push_back({{"pointer", it.pointer}, {"base64", base64_encode(s)}});
        v = lossy_utf8(s);
      }
      continue;
    }
    if (!v.is_structured()) continue;
    if (it.depth >= kMaxRecordDepth) {
      exact.push_back({{"pointer", it.pointer}, {"dropped", fmt::format("nested deeper than {} levels", kMaxRecordDepth)}});
      v = nullptr;
      continue;
    }
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i)
        todo.push_back({&v[i], fmt::format("{}/{}", it.pointer, i), it.depth + 1});
      continue;
    }
    // Keys first: renaming moves values, so children are queued only once the keys are settled.
    std::vector<std::string> bad;
    for (const auto& [k, child] : v.items())
      if (!is_valid_utf8(k)) bad.push_back(k);
    for (const std::string& k : bad) {
      std::string fixed = lossy_utf8(k);
      // Two keys may repair to the same text: the later one gets a suffix, still recorded exactly.
      for (int n = 2; v.contains(fixed); ++n) fixed = fmt::format("{}~{}", lossy_utf8(k), n);
      Json moved = std::move(v[k]);
      v.erase(k);
      v[fixed] = std::move(moved);
      exact.push_back({{"pointer", it.pointer + "/" + pointer_token(fixed)}, {"key", true}, {"base64", base64_encode(k)}});
    }
    for (auto c = v.begin(); c != v.end(); ++c)
      todo.push_back({&c.value(), it.pointer + "/" + pointer_token(c.key()), it.depth + 1});
  }
  return exact;
}

std::string lossless_canonical_json(Json j) {
  Json exact = repair_utf8(j);
  if (exact.empty()) return canonical_json(j);
  return canonical_json(Json{{"value", std::move(j)}, {"not_utf8", std::move(exact)}});
}

std::string path_join(std::string_view base, std::string_view key) {
  return fmt::format("{}.{}", base, key);
}
std::string path_join(std::string_view base, size_t index) {
  return fmt::format("{}[{}]", base, index);
}

}  // namespace airlock
