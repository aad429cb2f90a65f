// Store: machines, slots and runs, with capacity enforced by the database (SQLite or PostgreSQL).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "base/child_process.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/json_util.h"

namespace airlock::store {

// The schema this build writes and reads. A database at a higher version is refused
// (AIRLOCK_STORE_SCHEMA_NEWER): this build cannot know what the newer columns mean.
inline constexpr int kSchemaVersion = 4;
// The slot `airlock run` uses when none is named. It is created on first use with this many
// seats, so concurrent runs in one state directory work with no configuration.
inline constexpr const char* kDefaultSlot = "default";
inline constexpr int kDefaultSlotMaxSessions = 64;

// A machine's row: what `airlock machine probe` measured. The store keeps the facts as the
// caller gives them (JSON); judging them (e.g. a Landlock ABI above what the build knows) is
// the caller's, which knows the planner.
struct MachineRecord {
  std::string id;
  std::string hostname;
  int landlock_abi = 0;
  Json facts = Json::object();  // null: never probed
  int64_t probed_at_ms = 0;
  // How airlock reaches the machine: {} for the one a row was probed on, {"ssh": "user@host:port",
  // "identity": FILE} for one added with `airlock machine add`.
  Json transport = Json::object();
  // The latest `airlock machine attest` of it: {level, suite, airlock_sha256, kernel, uid,
  // attested_at_ms, executors: [{executor, contained, rows, why}]}; null: never attested.
  Json attestation = nullptr;
  // The fleet key's Ed25519 signature over signed_text(), base64; empty: unsigned.
  std::string signature;
  // When it was signed (covered by the signature): a reader that has seen a later signature for
  // the same machine takes an earlier one as replayed.
  int64_t signed_at_ms = 0;
  // What the signature covers: every other field, as canonical JSON.
  std::string signed_text() const;
  // Set by the reader when a column is not exactly what a writer writes (an integer with other
  // text, JSON nested too deep or with a key twice, an id another row has too): such a row is
  // not believed whatever it is signed with, since other readers could see it otherwise.
  std::string malformed;
};

struct SlotRecord {
  std::string machine_id;
  std::string name;
  std::optional<int> max_sessions;  // none declared: exactly one seat
  // How many seats the slot has: max_sessions, or 1 when none is declared.
  int seats() const { return max_sessions.value_or(1); }
};

// Who holds a seat: a process on a machine. start_time is field 22 of /proc/PID/stat (clock
// ticks since boot), so a recycled pid is not mistaken for the holder.
struct Holder {
  std::string machine_id;
  int64_t pid = 0;
  int64_t start_time = 0;
  static Holder self(const std::string& machine_id);
};

struct RunRequest {
  std::string machine_id;  // the machine whose slot the run occupies
  std::string slot;
  std::string policy_digest;
  Holder holder;
};

struct RunRecord {
  std::string id;
  std::string machine_id, slot;
  int ordinal = 0;
  std::string policy_digest;
  std::string executor;  // empty until the session says what enforced
  std::string executor_reason;  // why that executor was chosen (the plan's selection, in words)
  std::optional<int> tier;
  Json kernel_facts = nullptr;  // the facts measured for the run (JSON), null until known
  Holder holder;
  int64_t started_at_ms = 0, heartbeat_at_ms = 0;
  std::optional<int64_t> finished_at_ms;
  std::string outcome;  // "exit 0", "signal 9", a refusal code, "holder_dead", ...
  bool live() const { return !finished_at_ms.has_value(); }
  Json to_json() const;
};

struct StoreOptions {
  // A holder on another machine is dead when its heartbeat is older than this.
  int64_t heartbeat_expiry_ms = 60'000;
  // SQLite: how long one statement may wait for the write lock before it fails (bounded).
  int busy_timeout_ms = 10'000;
};

// Alive means: same machine as `self_machine` and the pid runs with the recorded start time;
// another machine and a heartbeat younger than the expiry.
bool holder_alive(const RunRecord& run, const std::string& self_machine, int64_t now_ms, int64_t expiry_ms);

// One connection to a store. Thread-safe: every operation holds the store's mutex.
// Backends supply statements and transactions; the capacity logic lives here, once.
class Store {
 public:
  virtual ~Store() = default;
  // url: "postgresql://..." (libpq conninfo URI), "sqlite:PATH", or a path (SQLite).
  // Applies pending migrations; refuses a newer schema by name.
  static Result<std::unique_ptr<Store>> open(const std::string& url, const StoreOptions& options = {});

  virtual std::string backend() const = 0;  // "sqlite" or "postgresql"
  const std::string& url() const { return url_; }
  const StoreOptions& options() const { return options_; }
  Result<int> schema_version();

  Result<void> put_machine(const MachineRecord& m);
  // Replaces the row of m.id only if it is still the one signed at `was_signed_at` (compare and
  // swap): false when another writer replaced it meanwhile, and nothing is written.
  Result<bool> replace_machine(const MachineRecord& m, int64_t was_signed_at);
  Result<std::vector<MachineRecord>> machines();
  // Deletes the row of `id`: false when there was none.
  Result<bool> remove_machine(const std::string& id);

  // Declares a slot (max_sessions none: one seat). Existing live runs are left alone.
  Result<void> set_slot(const SlotRecord& s);
  Result<std::vector<SlotRecord>> slots();
  // The slot as declared; the default slot is created with kDefaultSlotMaxSessions on first
  // use; an undeclared slot has one seat.
  Result<SlotRecord> slot(const std::string& machine_id, const std::string& name);

  // Takes the lowest free seat of the slot, or AIRLOCK_CAPACITY_EXHAUSTED naming how many runs
  // the slot carries and how many it may. Bounded: each seat is tried once, and once more only
  // after its blocking run's holder was found dead and finalised. Never waits for a holder.
  Result<RunRecord> reserve(const RunRequest& req);
  // What enforced the run, once the session knows.
  Result<void> record_enforcement(const std::string& run_id, const std::string& executor, int tier,
                                  const std::string& reason, const Json& kernel_facts);
  Result<void> heartbeat(const std::string& run_id);
  // Ends a live run with its outcome; a run already finished is left as it is.
  Result<bool> finish(const std::string& run_id, const std::string& outcome);

  Result<std::vector<RunRecord>> runs(bool live_only);
  Result<std::optional<RunRecord>> run(const std::string& id);

 protected:
  // A statement parameter: NULL, an integer, or text. Statements use `?` placeholders.
  using Param = std::variant<std::nullptr_t, int64_t, std::string>;
  using Row = std::vector<std::optional<std::string>>;
  struct Rows {
    std::vector<Row> rows;
    int64_t affected = 0;
  };
  explicit Store(std::string url, StoreOptions options) : url_(std::move(url)), options_(options) {}
  virtual Result<Rows> exec(const std::string& sql, const std::vector<Param>& params = {}) = 0;
  // Begins a transaction that excludes other writers and other migrators from the start.
  virtual Result<void> begin_exclusive() = 0;
  virtual Result<bool> has_table(const std::string& name) = 0;
  Result<void> migrate();

 private:
  Result<std::optional<RunRecord>> live_run_at(const std::string& machine_id, const std::string& slot,
                                               int ordinal);
  Result<std::vector<RunRecord>> select_runs(const std::string& where, const std::vector<Param>& params);
  Result<Rows> exec_locked(const std::string& sql, const std::vector<Param>& params = {});

  std::string url_;
  StoreOptions options_;
  std::recursive_mutex mu_;
};

// A reserved seat, released when it goes out of scope. While held, a thread refreshes the
// run's heartbeat so holders on other machines can tell it from a dead one.
class Seat {
 public:
  static Result<std::unique_ptr<Seat>> reserve(Store& store, const RunRequest& req);
  ~Seat();
  Seat(const Seat&) = delete;
  Seat& operator=(const Seat&) = delete;
  const RunRecord& run() const { return run_; }
  Result<void> record_enforcement(const std::string& executor, int tier, const std::string& reason,
                                  const Json& kernel_facts);
  // Whether the store still has this seat's run live: another machine may have finalised it (its
  // heartbeat looked expired) or an operator may have. AIRLOCK_SESSION_KILLED when it is dead,
  // so nothing is spawned onto a dead seat.
  Result<void> still_held();
  // Releases the seat with this outcome; later calls and the destructor do nothing.
  void release(const std::string& outcome);

 private:
  Seat(Store& store, RunRecord run);
  void beat();
  Store& store_;
  RunRecord run_;
  bool released_ = false;
  std::mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace airlock::store
