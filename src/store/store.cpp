// Store: the schema, its migrations, and the capacity logic shared by both backends.
#include "store/store.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>

#include "base/encoding.h"
#include "base/hash.h"
#include "store/backends.h"

namespace airlock::store {
namespace {

// Migrations, oldest first. Each runs once, in one exclusive transaction with the version
// bump, so a reader never sees half a schema. The statements are valid in both dialects.
struct Migration {
  int version;
  std::vector<const char*> statements;
};

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> m = {
      {1,
       {
           "CREATE TABLE machines (id TEXT PRIMARY KEY, hostname TEXT NOT NULL, landlock_abi INTEGER NOT "
           "NULL,"
           " facts TEXT NOT NULL, probed_at BIGINT NOT NULL)",
           "CREATE TABLE slots (machine_id TEXT NOT NULL, name TEXT NOT NULL, max_sessions INTEGER,"
           " PRIMARY KEY (machine_id, name))",
           "CREATE TABLE runs (id TEXT PRIMARY KEY, machine_id TEXT NOT NULL, slot TEXT NOT NULL,"
           " ordinal INTEGER NOT NULL, policy_digest TEXT NOT NULL, executor TEXT NOT NULL DEFAULT '',"
           " tier INTEGER, kernel_facts TEXT, holder_machine TEXT NOT NULL, holder_pid BIGINT NOT NULL,"
           " holder_start_time BIGINT NOT NULL, started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL,"
           " finished_at BIGINT, outcome TEXT NOT NULL DEFAULT '')",
           // Capacity itself: one live run per seat. Reservations insert against this index.
           "CREATE UNIQUE INDEX runs_live_seat ON runs (machine_id, slot, ordinal) WHERE finished_at IS NULL",
           "CREATE INDEX runs_started ON runs (started_at)",
       }},
      // Every run record names why its executor was chosen, beside which it was.
      {2, {"ALTER TABLE runs ADD COLUMN executor_reason TEXT NOT NULL DEFAULT ''"}},
      // A machine row names how it is reached and carries the fleet key's signature.
      {3,
       {"ALTER TABLE machines ADD COLUMN transport TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE machines ADD COLUMN signature TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE machines ADD COLUMN signed_at BIGINT NOT NULL DEFAULT 0"}},
      // A machine row carries its latest attestation (the escape suite run there), signed with it.
      {4, {"ALTER TABLE machines ADD COLUMN attestation TEXT NOT NULL DEFAULT 'null'"}},
  };
  return m;
}

constexpr const char* kRunColumns =
    "id, machine_id, slot, ordinal, policy_digest, executor, tier, kernel_facts, holder_machine, holder_pid,"
    " holder_start_time, started_at, heartbeat_at, finished_at, outcome, executor_reason";

int64_t to_i64(const std::optional<std::string>& s) { return s ? std::stoll(*s) : 0; }

std::string redact(const std::string& url) {
  // postgresql://user:secret@host/db → postgresql://user:***@host/db
  auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  auto at = url.find('@', scheme + 3);
  auto slash = url.find('/', scheme + 3);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

}  // namespace


Holder Holder::self(const std::string& machine_id) {
  pid_t pid = ::getpid();
  return {machine_id, pid, process_start_time(pid).value_or(0)};
}

bool holder_alive(const RunRecord& run, const std::string& self_machine, int64_t now, int64_t expiry_ms) {
  if (run.holder.machine_id == self_machine) {
    // A holder whose stat cannot be read while its pid exists keeps its seat: never taken on a guess.
    return same_process(static_cast<pid_t>(run.holder.pid), run.holder.start_time).value_or(true);
  }
  return now - run.heartbeat_at_ms < expiry_ms;
}

Json RunRecord::to_json() const {
  Json j = {
      {"id", id},
      {"machine", machine_id},
      {"slot", slot},
      {"ordinal", ordinal},
      {"policy_digest", policy_digest},
      {"executor", executor.empty() ? Json(nullptr) : Json(executor)},
      {"executor_reason", executor_reason.empty() ? Json(nullptr) : Json(executor_reason)},
      {"tier", tier ? Json(*tier) : Json(nullptr)},
      {"kernel_facts", kernel_facts},
      {"holder", {{"machine", holder.machine_id}, {"pid", holder.pid}, {"start_time", holder.start_time}}},
      {"started_at_ms", started_at_ms},
      {"heartbeat_at_ms", heartbeat_at_ms},
      {"finished_at_ms", finished_at_ms ? Json(*finished_at_ms) : Json(nullptr)},
      {"outcome", outcome},
      {"live", live()}};
  return j;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& url, const StoreOptions& options) {
  std::unique_ptr<Store> s;
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    s = TRY(open_postgresql(url, redact(url), options));
  } else if (url.starts_with("sqlite:")) {
    std::string path = url.substr(7);
    if (path.starts_with("//")) path = path.substr(2);
    if (path.empty())
      return fail(Code::OptionInvalid, fmt::format("store URL \"{}\" names no file", url), {{"store", url}});
    s = TRY(open_sqlite(path, options));
  } else if (url.starts_with("/")) {
    s = TRY(open_sqlite(url, options));
  } else {
    return fail(
        Code::OptionInvalid,
        fmt::format("store URL \"{}\" is neither postgresql://... nor sqlite:PATH nor an absolute path",
                    redact(url)),
        {{"store", redact(url)}});
  }
  if (auto m = s->migrate(); !m) return std::unexpected(std::move(m).error().fact("store", s->url()));
  return s;
}

Result<Store::Rows> Store::exec_locked(const std::string& sql, const std::vector<Param>& params) {
  std::lock_guard lock(mu_);
  return exec(sql, params);
}

Result<int> Store::schema_version() {
  std::lock_guard lock(mu_);
  if (!TRY(has_table("airlock_schema"))) return 0;
  auto r = TRY(exec("SELECT version FROM airlock_schema"));
  return r.rows.empty() ? 0 : static_cast<int>(to_i64(r.rows[0][0]));
}

Result<void> Store::migrate() {
  std::lock_guard lock(mu_);
  // The common case takes no lock: the schema is already current.
  if (TRY(schema_version()) == kSchemaVersion) return {};
  TRY(begin_exclusive());
  auto body = [&]() -> Result<void> {
    if (!TRY(has_table("airlock_schema"))) {
      TRY(exec("CREATE TABLE airlock_schema (version INTEGER NOT NULL)"));
      TRY(exec("INSERT INTO airlock_schema (version) VALUES (0)"));
    }
    auto r = TRY(exec("SELECT version FROM airlock_schema"));
    int have = r.rows.empty() ? 0 : static_cast<int>(to_i64(r.rows[0][0]));
    if (have > kSchemaVersion)
      return fail(
          Code::StoreSchemaNewer,
          fmt::format(
              "the store's schema is version {}; this build knows versions up to {}: use a newer airlock",
              have, kSchemaVersion),
          {{"schema_version", have}, {"known", kSchemaVersion}});
    for (const auto& m : migrations()) {
      if (m.version <= have) continue;
      for (const char* sql : m.statements)
        if (auto e = exec(sql); !e)
          return std::unexpected(std::move(e).error().context(fmt::format("migration {}", m.version)));
      TRY(exec("UPDATE airlock_schema SET version = ?", {int64_t{m.version}}));
    }
    return {};
  };
  if (auto b = body(); !b) {
    (void)exec("ROLLBACK");
    return b;
  }
  TRY(exec("COMMIT"));
  return {};
}

std::string MachineRecord::signed_text() const {
  Json j{{"schema", "airlock.machine_row.v1"},
         {"id", id},
         {"hostname", hostname},
         {"landlock_abi", landlock_abi},
         {"facts", facts},
         {"probed_at_ms", probed_at_ms},
         {"transport", transport},
         {"signed_at_ms", signed_at_ms}};
  // Covered when present; a row never attested signs as it did before attestations existed.
  if (!attestation.is_null()) j["attestation"] = attestation;
  return lossless_canonical_json(j);
}

Result<void> Store::put_machine(const MachineRecord& m) {
  TRY(exec_locked(
      "INSERT INTO machines (id, hostname, landlock_abi, facts, probed_at, transport, signature, signed_at,"
      " attestation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
      " ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, landlock_abi = excluded.landlock_abi,"
      " facts = excluded.facts, probed_at = excluded.probed_at, transport = excluded.transport,"
      " signature = excluded.signature, signed_at = excluded.signed_at, attestation = excluded.attestation",
      {m.id, m.hostname, int64_t{m.landlock_abi}, m.facts.dump(), m.probed_at_ms, m.transport.dump(), m.signature,
       m.signed_at_ms, m.attestation.dump()}));
  return {};
}

Result<bool> Store::replace_machine(const MachineRecord& m, int64_t was_signed_at) {
  TRY(exec_locked(
      "UPDATE machines SET hostname = ?, landlock_abi = ?, facts = ?, probed_at = ?, transport = ?, signature = ?,"
      " signed_at = ?, attestation = ? WHERE id = ? AND signed_at = ?",
      {m.hostname, int64_t{m.landlock_abi}, m.facts.dump(), m.probed_at_ms, m.transport.dump(), m.signature,
       m.signed_at_ms, m.attestation.dump(), m.id, was_signed_at}));
  // The row now holds this signature only if the update found the row it expected (a signature is
  // made once: another writer's row cannot carry it).
  auto r = TRY(exec_locked("SELECT signature FROM machines WHERE id = ?", {m.id}));
  return !r.rows.empty() && r.rows[0][0].value_or("") == m.signature;
}

Result<bool> Store::remove_machine(const std::string& id) {
  auto r = TRY(exec_locked("DELETE FROM machines WHERE id = ? RETURNING id", {id}));
  return !r.rows.empty();
}

Result<std::vector<MachineRecord>> Store::machines() {
  auto r = TRY(exec_locked(
      "SELECT id, hostname, landlock_abi, facts, probed_at, transport, signature, signed_at, attestation FROM machines"
      " ORDER BY id"));
  std::vector<MachineRecord> out;
  std::map<std::string, size_t> seen;
  for (const auto& row : r.rows) {
    MachineRecord m;
    auto why = [&m](std::string what) {
      if (m.malformed.empty()) m.malformed = std::move(what);
    };
    // Each column exactly as a writer writes it, or the row is marked (never a throw: one bad
    // row must not stop the others being judged).
    auto integer = [&](const std::optional<std::string>& text, const char* column) -> int64_t {
      int64_t v = 0;
      std::string_view t = text ? std::string_view(*text) : std::string_view();
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || end != t.data() + t.size()) why(fmt::format("{} is not an integer", column));
      return v;
    };
    auto json = [&](const std::optional<std::string>& text, const char* column) -> Json {
      auto j = parse_json(text.value_or(""), Code::ProtocolError, column);  // depth and duplicate keys bounded
      if (j) return std::move(*j);
      why(fmt::format("{} is not JSON a writer writes: {}", column, j.error().message));
      return Json(nullptr);
    };
    m.id = row[0].value_or("");
    m.hostname = row[1].value_or("");
    int64_t abi = integer(row[2], "landlock_abi");
    if (abi < 0 || abi > 1'000'000) why("landlock_abi is out of range");
    m.landlock_abi = static_cast<int>(std::clamp<int64_t>(abi, 0, 1'000'000));
    m.probed_at_ms = integer(row[4], "probed_at");
    m.facts = json(row[3], "facts");
    m.transport = json(row[5], "transport");
    m.signature = row[6].value_or("");
    m.signed_at_ms = integer(row[7], "signed_at");
    m.attestation = json(row[8], "attestation");
    if (auto [it, fresh] = seen.emplace(m.id, out.size()); !fresh) {
      why("another row has this id");
      if (out[it->second].malformed.empty()) out[it->second].malformed = "another row has this id";
    }
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

// A slot name is shown in tables and JSON and compared byte for byte: printable UTF-8 only, so
// one bad name cannot break `slot list --json` for everyone.
Result<void> check_slot_name(const std::string& name) {
  bool printable = std::none_of(name.begin(), name.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (name.empty() || name.size() > 128 || !printable || !is_valid_utf8(name))
    return fail(Code::OptionInvalid, "a slot name is 1 to 128 bytes of printable UTF-8",
                {{"slot_base64", base64_encode(name)}});
  return {};
}

}  // namespace

Result<void> Store::set_slot(const SlotRecord& s) {
  TRY(check_slot_name(s.name));
  if (s.max_sessions && *s.max_sessions < 1)
    return fail(Code::OptionInvalid, fmt::format("max_sessions must be at least 1, not {}", *s.max_sessions),
                {{"slot", s.name}, {"max_sessions", *s.max_sessions}});
  TRY(exec_locked("INSERT INTO slots (machine_id, name, max_sessions) VALUES (?, ?, ?)"
                  " ON CONFLICT (machine_id, name) DO UPDATE SET max_sessions = excluded.max_sessions",
                  {s.machine_id, s.name, s.max_sessions ? Param{int64_t{*s.max_sessions}} : Param{nullptr}}));
  return {};
}

Result<std::vector<SlotRecord>> Store::slots() {
  auto r = TRY(exec_locked("SELECT machine_id, name, max_sessions FROM slots ORDER BY machine_id, name"));
  std::vector<SlotRecord> out;
  for (const auto& row : r.rows) {
    SlotRecord s{row[0].value_or(""), row[1].value_or(""), std::nullopt};
    if (row[2]) s.max_sessions = static_cast<int>(to_i64(row[2]));
    out.push_back(std::move(s));
  }
  return out;
}

Result<SlotRecord> Store::slot(const std::string& machine_id, const std::string& name) {
  std::lock_guard lock(mu_);
  const std::string select = "SELECT max_sessions FROM slots WHERE machine_id = ? AND name = ?";
  auto r = TRY(exec(select, {machine_id, name}));
  if (r.rows.empty() && name == kDefaultSlot) {
    TRY(
        exec("INSERT INTO slots (machine_id, name, max_sessions) VALUES (?, ?, ?) ON CONFLICT (machine_id, "
             "name) DO NOTHING",
             {machine_id, name, int64_t{kDefaultSlotMaxSessions}}));
    r = TRY(exec(select, {machine_id, name}));
  }
  SlotRecord s{machine_id, name, std::nullopt};
  if (!r.rows.empty() && r.rows[0][0]) s.max_sessions = static_cast<int>(to_i64(r.rows[0][0]));
  return s;
}

Result<std::vector<RunRecord>> Store::select_runs(const std::string& where,
                                                  const std::vector<Param>& params) {
  auto r = TRY(exec(fmt::format("SELECT {} FROM runs {}", kRunColumns, where), params));
  std::vector<RunRecord> out;
  for (const auto& row : r.rows) {
    RunRecord run;
    run.id = row[0].value_or("");
    run.machine_id = row[1].value_or("");
    run.slot = row[2].value_or("");
    run.ordinal = static_cast<int>(to_i64(row[3]));
    run.policy_digest = row[4].value_or("");
    run.executor = row[5].value_or("");
    if (row[6]) run.tier = static_cast<int>(to_i64(row[6]));
    if (row[7]) {
      run.kernel_facts = Json::parse(*row[7], nullptr, false);
      if (run.kernel_facts.is_discarded()) run.kernel_facts = *row[7];
    }
    run.holder = {row[8].value_or(""), to_i64(row[9]), to_i64(row[10])};
    run.started_at_ms = to_i64(row[11]);
    run.heartbeat_at_ms = to_i64(row[12]);
    if (row[13]) run.finished_at_ms = to_i64(row[13]);
    run.outcome = row[14].value_or("");
    run.executor_reason = row[15].value_or("");
    out.push_back(std::move(run));
  }
  return out;
}

Result<std::optional<RunRecord>> Store::live_run_at(const std::string& machine_id, const std::string& slot,
                                                    int ordinal) {
  auto runs = TRY(select_runs("WHERE machine_id = ? AND slot = ? AND ordinal = ? AND finished_at IS NULL",
                              {machine_id, slot, int64_t{ordinal}}));
  if (runs.empty()) return std::nullopt;
  return runs.front();
}

Result<RunRecord> Store::reserve(const RunRequest& req) {
  if (req.slot.empty() || req.machine_id.empty())
    return fail(Code::InternalError, "a reservation needs a machine and a slot name");
  TRY(check_slot_name(req.slot));
  SlotRecord slot = TRY(this->slot(req.machine_id, req.slot));
  int seats = slot.seats();
  std::lock_guard lock(mu_);
  std::vector<RunRecord> holders;
  for (int ordinal = 0; ordinal < seats; ++ordinal) {
    std::optional<RunRecord> blocker;
    // At most two inserts per seat: the second only after the blocking run was finalised
    // (its holder dead) or had finished on its own between the insert and the read.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string id = random_id();
      int64_t now = now_ms();
      auto ins = TRY(
          exec("INSERT INTO runs (id, machine_id, slot, ordinal, policy_digest, holder_machine, holder_pid,"
               " holder_start_time, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
               " ON CONFLICT (machine_id, slot, ordinal) WHERE finished_at IS NULL DO NOTHING",
               {id, req.machine_id, req.slot, int64_t{ordinal}, req.policy_digest, req.holder.machine_id,
                req.holder.pid, req.holder.start_time, now, now}));
      if (ins.affected == 1) {
        auto runs = TRY(select_runs("WHERE id = ?", {id}));
        if (runs.empty()) return fail(Code::InternalError, fmt::format("run {} vanished after its insert", id));
        return runs.front();
      }
      blocker = TRY(live_run_at(req.machine_id, req.slot, ordinal));
      if (!blocker || attempt == 1) break;
      if (holder_alive(*blocker, req.holder.machine_id, now_ms(), options_.heartbeat_expiry_ms)) break;
      // The holder is gone (a crash releases nothing): finalise its run by id, then retry once.
      // Only as it was judged: a heartbeat that landed since means it lives after all.
      TRY(exec("UPDATE runs SET finished_at = ?, outcome = ? WHERE id = ? AND finished_at IS NULL AND heartbeat_at = ?",
               {now_ms(), std::string("holder_dead"), blocker->id, blocker->heartbeat_at_ms}));
      blocker.reset();
    }
    if (blocker) holders.push_back(std::move(*blocker));
  }
  Json hj = Json::array();
  std::string names;
  for (const auto& h : holders) {
    hj.push_back(
        {{"run", h.id}, {"ordinal", h.ordinal}, {"machine", h.holder.machine_id}, {"pid", h.holder.pid}});
    names += fmt::format("{}run {} (pid {} on {})", names.empty() ? "" : ", ", h.id, h.holder.pid,
                         h.holder.machine_id);
  }
  return fail(Code::CapacityExhausted,
              fmt::format("slot \"{}\" on machine {} carries {} of {} runs{}{}", req.slot, req.machine_id,
                          holders.size(), seats, names.empty() ? "" : "; held by ", names),
              {{"slot", req.slot},
               {"machine", req.machine_id},
               {"carries", holders.size()},
               {"may", seats},
               {"holders", hj}});
}

Result<void> Store::record_enforcement(const std::string& run_id, const std::string& executor, int tier,
                                       const std::string& reason, const Json& kernel_facts) {
  TRY(exec_locked("UPDATE runs SET executor = ?, tier = ?, executor_reason = ?, kernel_facts = ? WHERE id = ?",
                  {executor, int64_t{tier}, reason, kernel_facts.dump(), run_id}));
  return {};
}

Result<void> Store::heartbeat(const std::string& run_id) {
  TRY(exec_locked("UPDATE runs SET heartbeat_at = ? WHERE id = ? AND finished_at IS NULL",
                  {now_ms(), run_id}));
  return {};
}

Result<bool> Store::finish(const std::string& run_id, const std::string& outcome) {
  auto r =
      TRY(exec_locked("UPDATE runs SET finished_at = ?, outcome = ? WHERE id = ? AND finished_at IS NULL",
                      {now_ms(), outcome, run_id}));
  return r.affected == 1;
}

Result<std::vector<RunRecord>> Store::runs(bool live_only) {
  std::lock_guard lock(mu_);
  return select_runs(
      live_only ? "WHERE finished_at IS NULL ORDER BY started_at, id" : "ORDER BY started_at, id", {});
}

Result<std::optional<RunRecord>> Store::run(const std::string& id) {
  std::lock_guard lock(mu_);
  auto runs = TRY(select_runs("WHERE id = ?", {id}));
  if (runs.empty()) return std::nullopt;
  return runs.front();
}

// ---------------------------------------------------------------- Seat

Result<std::unique_ptr<Seat>> Seat::reserve(Store& store, const RunRequest& req) {
  auto run = TRY(store.reserve(req));
  return std::unique_ptr<Seat>(new Seat(store, std::move(run)));
}

Seat::Seat(Store& store, RunRecord run) : store_(store), run_(std::move(run)) {
  heartbeat_ = std::thread([this] { beat(); });
}

void Seat::beat() {
  auto interval = std::chrono::milliseconds(std::max<int64_t>(store_.options().heartbeat_expiry_ms / 4, 10));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    // A failed beat is not fatal here: the seat stays held; another machine may finalise it
    // once the heartbeat expires, which is the rule for a holder it cannot see.
    (void)store_.heartbeat(run_.id);
    lock.lock();
  }
}

Result<void> Seat::record_enforcement(const std::string& executor, int tier, const std::string& reason,
                                      const Json& kernel_facts) {
  run_.executor = executor;
  run_.tier = tier;
  run_.executor_reason = reason;
  run_.kernel_facts = kernel_facts;
  return store_.record_enforcement(run_.id, executor, tier, reason, kernel_facts);
}

Result<void> Seat::still_held() {
  auto now = TRY(store_.run(run_.id));
  if (now && now->live()) return {};
  std::string outcome = now ? now->outcome : std::string("gone");
  return fail(Code::SessionKilled,
              fmt::format("the seat's run {} was finalised ({}) before the command started; nothing is spawned "
                          "onto a dead seat",
                          run_.id, outcome),
              {{"run", run_.id}, {"outcome", outcome}, {"slot", run_.slot}});
}

void Seat::release(const std::string& outcome) {
  {
    std::lock_guard lock(mu_);
    if (released_) return;
    released_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  run_.outcome = outcome;
  (void)store_.finish(run_.id, outcome);
}

Seat::~Seat() { release("released"); }

}  // namespace airlock::store
