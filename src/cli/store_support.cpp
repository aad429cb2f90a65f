// CLI plumbing for the run store: store URL, machine identity, slot references, seats.
#include "cli/store_support.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace airlock::cli {

std::string machine_identity(const Globals& g) {
  if (!g.machine_id.empty()) return g.machine_id;
  if (const char* e = std::getenv("AIRLOCK_MACHINE_ID"); e && *e) return e;
  std::ifstream in("/etc/machine-id");
  std::string id;
  if (std::getline(in, id) && !id.empty()) return id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

Result<std::unique_ptr<store::Store>> open_store(const Globals& g, const std::string& state_dir) {
  std::string url = g.store_url.empty() ? "sqlite:" + state_dir + "/airlock.db" : g.store_url;
  return store::Store::open(url);
}

Result<std::unique_ptr<store::Store>> open_store(const Globals& g) {
  auto state = TRY(resolve_state_dir(g.state_dir));
  return open_store(g, state);
}

Result<SlotRef> parse_slot_ref(const Globals& g, const std::string& spec) {
  auto colon = spec.find(':');
  SlotRef ref = colon == std::string::npos ? SlotRef{machine_identity(g), spec}
                                           : SlotRef{spec.substr(0, colon), spec.substr(colon + 1)};
  if (ref.machine_id.empty() || ref.name.empty() || ref.name.find(':') != std::string::npos)
    return fail(Code::OptionInvalid, fmt::format("slot \"{}\" is not NAME or MACHINE:NAME", spec),
                {{"slot", spec}});
  return ref;
}

Result<HeldSeat> reserve_seat(const Globals& g, const std::string& state_dir, const std::string& slot_spec,
                              const std::string& policy_digest) {
  auto ref = TRY(parse_slot_ref(g, slot_spec));
  HeldSeat held;
  held.store = TRY(open_store(g, state_dir));
  store::RunRequest req{ref.machine_id, ref.name, policy_digest, store::Holder::self(machine_identity(g))};
  held.seat = TRY(store::Seat::reserve(*held.store, req));
  return held;
}

}  // namespace airlock::cli
