// CLI plumbing for the run store: which store, which machine this is, and a seat for `airlock run`.
#pragma once

#include <memory>
#include <string>

#include "cli/common.h"
#include "store/store.h"

namespace airlock::cli {

// This machine's identity in the store: --machine-id, else $AIRLOCK_MACHINE_ID, else
// /etc/machine-id, else the host name. The override exists so that several airlocks on one
// host can act as separate machines of a fleet (the tests do), never to borrow another
// machine's seats: a holder's liveness is judged by the machine id it recorded.
std::string machine_identity(const Globals& g);

// --store URL, else the SQLite file airlock.db in the state directory.
Result<std::unique_ptr<store::Store>> open_store(const Globals& g, const std::string& state_dir);
// The same, resolving (and creating) the state directory first.
Result<std::unique_ptr<store::Store>> open_store(const Globals& g);

// "NAME" is this machine's slot NAME; "MACHINE:NAME" is another machine's.
struct SlotRef {
  std::string machine_id, name;
};
Result<SlotRef> parse_slot_ref(const Globals& g, const std::string& spec);

// A seat held for one `airlock run`: the store outlives the seat, which is released first.
struct HeldSeat {
  std::unique_ptr<store::Store> store;
  std::unique_ptr<store::Seat> seat;
};
Result<HeldSeat> reserve_seat(const Globals& g, const std::string& state_dir, const std::string& slot_spec,
                              const std::string& policy_digest);

}  // namespace airlock::cli
