// DNS on the wire for the escape suite: A queries and answers, names without compression.
#include "escape/dns_wire.h"

#include <arpa/inet.h>

#include <cctype>

namespace airlock::escape {
namespace {

void put16(std::string& s, uint16_t v) {
  s += static_cast<char>(v >> 8);
  s += static_cast<char>(v & 0xff);
}

uint16_t get16(std::string_view m, size_t at) {
  return static_cast<uint16_t>((static_cast<uint8_t>(m[at]) << 8) | static_cast<uint8_t>(m[at + 1]));
}

std::string encode_name(std::string_view name) {
  std::string out;
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    size_t len = std::min<size_t>(dot - start, 63);
    // An empty label would be the root's zero byte: the name would end there and the rest of
    // the message be read as something else.
    if (len > 0) {
      out += static_cast<char>(len);
      out.append(name.substr(start, len));
    }
    start = dot + 1;
  }
  out += '\0';
  return out;
}

// Reads an uncompressed name at `at`; advances `at` past it.
std::optional<std::string> read_name(std::string_view m, size_t& at) {
  std::string name;
  while (at < m.size()) {
    auto len = static_cast<uint8_t>(m[at++]);
    if (len == 0) return name;
    if (len > 63 || at + len > m.size()) return std::nullopt;
    // A label holding a dot has no dotted form: ".a" as one label would be written back as two
    // (fuzz/corpus/dns/label_with_dot.bin).
    if (m.substr(at, len).find('.') != std::string_view::npos) return std::nullopt;
    if (!name.empty()) name += '.';
    for (char c : m.substr(at, len)) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    at += len;
  }
  return std::nullopt;
}

// Skips a name that may end in a compression pointer.
bool skip_name(std::string_view m, size_t& at) {
  while (at < m.size()) {
    auto len = static_cast<uint8_t>(m[at]);
    if ((len & 0xc0) == 0xc0) {
      at += 2;
      return at <= m.size();
    }
    at += 1 + len;
    if (len == 0) return at <= m.size();
  }
  return false;
}

}  // namespace

std::string encode_dns_query(uint16_t id, std::string_view name) {
  std::string q;
  put16(q, id);
  put16(q, 0x0100);  // a standard query, recursion desired
  put16(q, 1);
  put16(q, 0);
  put16(q, 0);
  put16(q, 0);
  q += encode_name(name);
  put16(q, 1);  // A
  put16(q, 1);  // IN
  return q;
}

std::optional<DnsQuestion> parse_dns_question(std::string_view msg) {
  if (msg.size() < 12 || (static_cast<uint8_t>(msg[2]) & 0x80) || get16(msg, 4) < 1) return std::nullopt;
  DnsQuestion q;
  q.id = get16(msg, 0);
  size_t at = 12;
  auto name = read_name(msg, at);
  if (!name || at + 4 > msg.size()) return std::nullopt;
  q.name = *name;
  q.qtype = get16(msg, at);
  return q;
}

std::string encode_dns_answer(const DnsQuestion& q, const std::vector<std::string>& ipv4) {
  std::vector<in_addr> addrs;
  for (const auto& a : ipv4) {
    in_addr in{};
    if (::inet_pton(AF_INET, a.c_str(), &in) == 1) addrs.push_back(in);
  }
  if (q.qtype != 1) addrs.clear();
  std::string r;
  put16(r, q.id);
  put16(r, addrs.empty() ? 0x8183 : 0x8180);  // a response, recursion available; NXDOMAIN if empty
  put16(r, 1);
  put16(r, static_cast<uint16_t>(addrs.size()));
  put16(r, 0);
  put16(r, 0);
  r += encode_name(q.name);
  put16(r, q.qtype);
  put16(r, 1);
  for (const auto& in : addrs) {
    put16(r, 0xc00c);  // the question's name
    put16(r, 1);
    put16(r, 1);
    put16(r, 0);  // ttl 0: every lookup asks again
    put16(r, 0);
    put16(r, 4);
    r.append(reinterpret_cast<const char*>(&in), 4);
  }
  return r;
}

std::optional<std::vector<std::string>> parse_dns_answer(std::string_view msg, uint16_t id) {
  if (msg.size() < 12 || get16(msg, 0) != id || !(static_cast<uint8_t>(msg[2]) & 0x80)) return std::nullopt;
  uint16_t qd = get16(msg, 4), an = get16(msg, 6);
  size_t at = 12;
  for (uint16_t i = 0; i < qd; ++i)
    if (!skip_name(msg, at) || (at += 4) > msg.size()) return std::nullopt;
  std::vector<std::string> out;
  for (uint16_t i = 0; i < an; ++i) {
    if (!skip_name(msg, at) || at + 10 > msg.size()) return std::nullopt;
    uint16_t type = get16(msg, at), len = get16(msg, at + 8);
    at += 10;
    if (at + len > msg.size()) return std::nullopt;
    if (type == 1 && len == 4) {
      char text[INET_ADDRSTRLEN];
      if (::inet_ntop(AF_INET, msg.data() + at, text, sizeof text)) out.emplace_back(text);
    }
    at += len;
  }
  return out;
}

}  // namespace airlock::escape
