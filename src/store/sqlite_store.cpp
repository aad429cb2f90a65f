// The SQLite backend: one file in the state directory, WAL mode, bounded waits for the lock.
#include <sqlite3.h>
#include <unistd.h>

#include "store/backends.h"

namespace airlock::store {
namespace {

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, sqlite3* db, StoreOptions options)
      : Store("sqlite:" + path, options), path_(std::move(path)), db_(db) {}
  ~SqliteStore() override { sqlite3_close_v2(db_); }

  std::string backend() const override { return "sqlite"; }

  Result<Rows> exec(const std::string& sql, const std::vector<Param>& params) override {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &raw, nullptr) != SQLITE_OK)
      return error("prepare");
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
    for (size_t i = 0; i < params.size(); ++i) {
      int at = static_cast<int>(i + 1), rc = SQLITE_OK;
      if (auto* n = std::get_if<int64_t>(&params[i]))
        rc = sqlite3_bind_int64(raw, at, *n);
      else if (auto* s = std::get_if<std::string>(&params[i]))
        rc = sqlite3_bind_text(raw, at, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
      else
        rc = sqlite3_bind_null(raw, at);
      if (rc != SQLITE_OK) return error("bind");
    }
    Rows out;
    for (;;) {
      int rc = sqlite3_step(raw);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return error(sql.substr(0, sql.find(' ')));
      Row row;
      for (int c = 0, n = sqlite3_column_count(raw); c < n; ++c) {
        if (sqlite3_column_type(raw, c) == SQLITE_NULL) {
          row.emplace_back(std::nullopt);
        } else {
          auto* t = reinterpret_cast<const char*>(sqlite3_column_text(raw, c));
          row.emplace_back(std::string(t, static_cast<size_t>(sqlite3_column_bytes(raw, c))));
        }
      }
      out.rows.push_back(std::move(row));
    }
    out.affected = sqlite3_changes(db_);
    return out;
  }

  // IMMEDIATE takes the write lock at BEGIN, waiting at most busy_timeout for it, so two
  // migrators never both read version 0 and then collide.
  Result<void> begin_exclusive() override {
    TRY(exec("BEGIN IMMEDIATE", {}));
    return {};
  }

  Result<bool> has_table(const std::string& name) override {
    auto r = TRY(exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", {name}));
    return !r.rows.empty();
  }

 private:
  std::unexpected<Error> error(const std::string& what) {
    int code = sqlite3_extended_errcode(db_);
    return fail(Code::IoError, fmt::format("SQLite store {}: {}: {}", path_, what, sqlite3_errmsg(db_)),
                {{"store", url()}, {"sqlite_code", code}});
  }
  std::string path_;
  sqlite3* db_;
};

}  // namespace

constexpr int kWalCheckpointPages = 64;

Result<std::unique_ptr<Store>> open_sqlite(const std::string& path, const StoreOptions& options) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return fail(Code::IoError, fmt::format("cannot open the SQLite store {}: {}", path, msg),
                {{"store", path}});
  }
  // Every wait for the lock is bounded: past the timeout a statement fails, it never hangs.
  sqlite3_busy_timeout(db, options.busy_timeout_ms);
  auto s = std::make_unique<SqliteStore>(path, db, options);
  // WAL: readers never block the writer. synchronous=NORMAL is durable across a process crash
  // (the case capacity cares about); a power loss may lose the last commits, not corrupt.
  // Switching a fresh file to WAL needs its exclusive lock; a racing opener can get SQLITE_BUSY at
  // once (SQLite's deadlock avoidance skips the busy handler there), so retry, bounded.
  auto wal = s->exec("PRAGMA journal_mode=WAL", {});
  for (int waited = 0;
       !wal && (sqlite3_errcode(db) & 0xff) == SQLITE_BUSY && waited < options.busy_timeout_ms;
       waited += 10) {
    ::usleep(10'000);
    wal = s->exec("PRAGMA journal_mode=WAL", {});
  }
  if (!wal) return std::unexpected(std::move(wal).error());
  if (wal->rows.empty() || wal->rows[0][0].value_or("") != "wal")
    return fail(Code::ConfigError, fmt::format("the SQLite store {} cannot use WAL mode", path),
                {{"store", path}});
  TRY(s->exec("PRAGMA synchronous=NORMAL", {}));
  // A run is one short process: closing the last connection would checkpoint the WAL into the
  // database and delete it (two fdatasyncs), and the next run would create the WAL again (a
  // directory sync). The WAL stays instead and is checkpointed as it grows, so a run's seat costs
  // no fsync on the hot path; a crash still loses nothing a crash may not. But the first
  // connection to open the store rebuilds its index by reading every valid frame of the WAL: at
  // SQLite's default of 1000 pages that is up to 4 MB read by every run. A run writes about ten
  // pages, so checkpointing at 64 costs two fdatasyncs every six or so runs and caps that read at
  // 256 KiB (bench/README.md, "Spawn cost").
  TRY(s->exec(fmt::format("PRAGMA wal_autocheckpoint={}", kWalCheckpointPages), {}));
  if (sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr) != SQLITE_OK)
    return fail(Code::ConfigError, fmt::format("the SQLite store {} cannot keep its WAL across closes", path),
                {{"store", path}});
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace airlock::store
