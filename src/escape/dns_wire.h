// DNS on the wire, the little the escape suite needs: an A query, its question, an answer to it.
// The suite's loopback responder and the door_dns_query / door_rebinding_name probes share it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::escape {

struct DnsQuestion {
  uint16_t id = 0;
  std::string name;  // lower-case, dot-separated, no trailing dot
  uint16_t qtype = 0;
};

// A recursive query for `name`'s A records.
std::string encode_dns_query(uint16_t id, std::string_view name);
// The first question of a query, if the message is one (no compression in questions).
std::optional<DnsQuestion> parse_dns_question(std::string_view msg);
// The answer to `q`: one A record per IPv4 address ("127.0.0.1"), NXDOMAIN when there are none.
std::string encode_dns_answer(const DnsQuestion& q, const std::vector<std::string>& ipv4);
// The IPv4 addresses of the A records in the answer to query `id`; nullopt if `msg` is not that.
std::optional<std::vector<std::string>> parse_dns_answer(std::string_view msg, uint16_t id);

}  // namespace airlock::escape
