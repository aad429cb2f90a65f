// Addresses: IPv4/IPv6 values, every literal spelling of them, CIDR ranges, address classes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/enum_names.h"
#include "base/error.h"

namespace airlock::egress {

struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};  // v4: the first four
  bool operator==(const IpAddress&) const = default;
  // Canonical text: "127.0.0.1", "::1" (no brackets).
  std::string to_string() const;
};

// Parses a host that is an address literal in any spelling a URL parser or libc accepts:
// dotted quad, decimal ("2130706433"), octal ("0177.0.0.1"), hex ("0x7f.1"), short forms
// ("127.1"), and IPv6 with or without brackets. A zone id ("fe80::1%eth0") is not an
// address we accept. Returns nullopt when `host` is a name, not a literal.
std::optional<IpAddress> parse_literal(std::string_view host);

struct Cidr {
  IpAddress base;
  int prefix = 0;
  bool contains(const IpAddress& a) const;
};
// "10.0.0.0/8", "fd00::/8" (the policy parser has already refused host bits).
Result<Cidr> parse_cidr(std::string_view text);

// What kind of address this is. Everything except Global is refused by a host rule unless
// the rule says allow_private. An address that embeds an IPv4 address (IPv4-mapped,
// IPv4-compatible, NAT64, 6to4) is classed by what it embeds, and the mapped/compatible
// forms are never global: a resolver has no business answering them.
#define AIRLOCK_ADDRESS_CLASSES(X)                                                             \
  X(Global, "global")                                                                          \
  X(Unspecified, "unspecified")                                                                \
  X(Loopback, "loopback")                                                                      \
  X(Private, "private")                     /* RFC 1918, IPv6 unique local */                  \
  X(SharedNat, "shared (carrier-grade NAT)") /* 100.64.0.0/10 */                               \
  X(LinkLocal, "link-local")                                                                   \
  /* cloud instance metadata (169.254.169.254, fd00:ec2::254, 100.100.100.200) */              \
  X(Metadata, "cloud metadata")                                                                \
  X(Multicast, "multicast")                                                                    \
  X(Broadcast, "broadcast")                                                                    \
  X(Documentation, "documentation")                                                            \
  X(Benchmarking, "benchmarking")                                                              \
  /* IETF special-purpose ranges, deprecated site-local, Teredo, ORCHID, discard */            \
  X(Reserved, "reserved")                                                                      \
  X(Ipv4Mapped, "IPv4-mapped IPv6") /* ::ffff:a.b.c.d and ::a.b.c.d, whatever they embed */
AIRLOCK_ENUM(AddressClass, AIRLOCK_ADDRESS_CLASSES)

struct Classification {
  AddressClass cls = AddressClass::Global;
  std::optional<IpAddress> embedded;  // the IPv4 address an IPv6 form carries
  bool global() const { return cls == AddressClass::Global; }
  std::string describe() const;  // "loopback", "private (embedded 10.0.0.1 in 2002:a00:1::)"
};
Classification classify(const IpAddress& a);

}  // namespace airlock::egress
