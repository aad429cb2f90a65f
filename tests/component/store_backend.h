// Test support: a fresh, real store per test for each backend (a SQLite file, a PostgreSQL database).
#pragma once

#include <memory>
#include <string>

namespace airlock::testing {

// One empty store: a SQLite file in a temp dir, or a new database in the test cluster that
// scripts/pg-test-cluster started (its URL in $AIRLOCK_TEST_PG_DIR/conninfo). Removed on
// destruction.
class BackendDb {
 public:
  // Null with `why` set when the backend is not available here (PostgreSQL not installed).
  static std::unique_ptr<BackendDb> make(const std::string& backend, std::string* why);
  ~BackendDb();
  BackendDb(const BackendDb&) = delete;
  const std::string& url() const { return url_; }
  const std::string& backend() const { return backend_; }
  // Runs SQL beside the Store (to forge what another build or a tamperer would write).
  void raw(const std::string& sql);

 private:
  BackendDb() = default;
  std::string backend_, url_, dir_, admin_url_, db_name_;
};

// Runs SQL on a SQLite file directly (throws on failure).
void sqlite_exec(const std::string& path, const std::string& sql);

// The URL of the test cluster's admin database, or empty with `why` set.
std::string pg_admin_url(std::string* why);

}  // namespace airlock::testing
