// Addresses: literal parsing in every spelling, CIDR containment, and the special-purpose registries.
#include "egress/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

namespace airlock::egress {

std::string IpAddress::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), text, sizeof text);
  return text;
}

namespace {

IpAddress v4(uint32_t host_order) {
  IpAddress a;
  a.bytes[0] = static_cast<uint8_t>(host_order >> 24);
  a.bytes[1] = static_cast<uint8_t>(host_order >> 16);
  a.bytes[2] = static_cast<uint8_t>(host_order >> 8);
  a.bytes[3] = static_cast<uint8_t>(host_order);
  return a;
}

IpAddress v4_from(const uint8_t* p) {
  IpAddress a;
  std::copy(p, p + 4, a.bytes.begin());
  return a;
}

bool in(const IpAddress& a, std::string_view cidr) {
  auto c = parse_cidr(cidr);
  return c && c->contains(a);
}

}  // namespace

std::optional<IpAddress> parse_literal(std::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return std::nullopt;
  if (h.find(':') != std::string::npos) {
    IpAddress a;
    a.v6 = true;
    if (::inet_pton(AF_INET6, h.c_str(), a.bytes.data()) != 1) return std::nullopt;
    return a;
  }
  // inet_aton is the spelling libc, curl and browsers share: "2130706433", "0177.1",
  // "0x7f.0.0.1". It tolerates trailing text after a space, so only the characters a
  // numeric host can have are passed to it.
  bool numeric = std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == 'x' ||
           c == 'X' || c == '.';
  });
  if (!numeric) return std::nullopt;
  in_addr addr{};
  if (::inet_aton(h.c_str(), &addr) == 0) return std::nullopt;
  return v4(ntohl(addr.s_addr));
}

bool Cidr::contains(const IpAddress& a) const {
  if (a.v6 != base.v6) return false;
  for (int b = 0; b < prefix; ++b) {
    uint8_t mask = static_cast<uint8_t>(0x80 >> (b % 8));
    if ((a.bytes[b / 8] & mask) != (base.bytes[b / 8] & mask)) return false;
  }
  return true;
}

Result<Cidr> parse_cidr(std::string_view text) {
  std::string s(text);
  size_t slash = s.find('/');
  auto bad = [&] { return fail(Code::PolicyInvalid, fmt::format("\"{}\" is not a CIDR range", s)); };
  if (slash == std::string::npos) return bad();
  Cidr c;
  c.base.v6 = s.find(':') != std::string::npos;
  std::string addr = s.substr(0, slash);
  if (::inet_pton(c.base.v6 ? AF_INET6 : AF_INET, addr.c_str(), c.base.bytes.data()) != 1) return bad();
  std::string len = s.substr(slash + 1);
  if (len.empty() || len.size() > 3 || !std::all_of(len.begin(), len.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return bad();
  c.prefix = std::stoi(len);
  if (c.prefix > (c.base.v6 ? 128 : 32)) return bad();
  return c;
}

std::string Classification::describe() const {
  std::string s(to_string(cls));
  if (embedded) s += fmt::format(" (embeds {})", embedded->to_string());
  return s;
}

namespace {

// IANA IPv4 special-purpose registry, most specific first.
AddressClass classify_v4(const IpAddress& a) {
  struct Range {
    std::string_view cidr;
    AddressClass cls;
  };
  static constexpr Range kRanges[] = {
      {"255.255.255.255/32", AddressClass::Broadcast},
      {"169.254.169.254/32", AddressClass::Metadata},
      {"100.100.100.200/32", AddressClass::Metadata},
      {"0.0.0.0/8", AddressClass::Unspecified},
      {"10.0.0.0/8", AddressClass::Private},
      {"100.64.0.0/10", AddressClass::SharedNat},
      {"127.0.0.0/8", AddressClass::Loopback},
      {"169.254.0.0/16", AddressClass::LinkLocal},
      {"172.16.0.0/12", AddressClass::Private},
      {"192.0.0.0/24", AddressClass::Reserved},
      {"192.0.2.0/24", AddressClass::Documentation},
      {"192.31.196.0/24", AddressClass::Reserved},
      {"192.52.193.0/24", AddressClass::Reserved},
      {"192.88.99.0/24", AddressClass::Reserved},
      {"192.168.0.0/16", AddressClass::Private},
      {"192.175.48.0/24", AddressClass::Reserved},
      {"198.18.0.0/15", AddressClass::Benchmarking},
      {"198.51.100.0/24", AddressClass::Documentation},
      {"203.0.113.0/24", AddressClass::Documentation},
      {"224.0.0.0/4", AddressClass::Multicast},
      {"240.0.0.0/4", AddressClass::Reserved},
  };
  for (const auto& r : kRanges)
    if (in(a, r.cidr)) return r.cls;
  return AddressClass::Global;
}

}  // namespace

Classification classify(const IpAddress& a) {
  if (!a.v6) return {classify_v4(a), std::nullopt};
  const uint8_t* b = a.bytes.data();
  auto zero = [&](int from, int to) { return std::all_of(b + from, b + to, [](uint8_t x) { return x == 0; }); };
  if (zero(0, 16)) return {AddressClass::Unspecified, std::nullopt};
  if (zero(0, 15) && b[15] == 1) return {AddressClass::Loopback, std::nullopt};
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible): never global, named by what they carry.
  if (zero(0, 10) && b[10] == 0xff && b[11] == 0xff) return {AddressClass::Ipv4Mapped, v4_from(b + 12)};
  if (zero(0, 12)) return {AddressClass::Ipv4Mapped, v4_from(b + 12)};
  // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) reach the IPv4 address they embed: class by it.
  if (in(a, "64:ff9b::/96") || in(a, "2002::/16")) {
    IpAddress e = v4_from(in(a, "2002::/16") ? b + 2 : b + 12);
    AddressClass c = classify_v4(e);
    return {c, e};
  }
  struct Range {
    std::string_view cidr;
    AddressClass cls;
  };
  static constexpr Range kRanges[] = {
      {"fd00:ec2::254/128", AddressClass::Metadata},
      {"64:ff9b:1::/48", AddressClass::Reserved},
      {"100::/64", AddressClass::Reserved},
      {"2001::/32", AddressClass::Reserved},     // Teredo: tunnels to an address we cannot see
      {"2001:2::/48", AddressClass::Benchmarking},
      {"2001:10::/28", AddressClass::Reserved},  // ORCHID
      {"2001:20::/28", AddressClass::Reserved},  // ORCHIDv2
      {"2001:db8::/32", AddressClass::Documentation},
      {"3fff::/20", AddressClass::Documentation},
      {"fc00::/7", AddressClass::Private},
      {"fe80::/10", AddressClass::LinkLocal},
      {"fec0::/10", AddressClass::Reserved},     // site-local, deprecated
      {"ff00::/8", AddressClass::Multicast},
  };
  for (const auto& r : kRanges)
    if (in(a, r.cidr)) return {r.cls, std::nullopt};
  // Only 2000::/3 is allocated as global unicast; anything else is not an internet address.
  if ((b[0] & 0xe0) != 0x20) return {AddressClass::Reserved, std::nullopt};
  return {AddressClass::Global, std::nullopt};
}

}  // namespace airlock::egress
