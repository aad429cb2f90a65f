// Test support: fresh stores per backend, and SQL run beside the Store.
#include "store_backend.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace airlock::testing {
namespace {

std::string slurp_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

void pg_exec(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string e = PQerrorMessage(c);
    PQfinish(c);
    throw std::runtime_error("connect " + url + ": " + e);
  }
  PGresult* r = PQexec(c, sql.c_str());
  auto st = PQresultStatus(r);
  std::string e = PQresultErrorMessage(r);
  PQclear(r);
  PQfinish(c);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) throw std::runtime_error(sql + ": " + e);
}

}  // namespace

std::string pg_admin_url(std::string* why) {
  const char* dir = std::getenv("AIRLOCK_TEST_PG_DIR");
  if (!dir || !*dir) {
    *why = "AIRLOCK_TEST_PG_DIR is not set: run the PostgreSQL tests through CTest (fixture pg)";
    return "";
  }
  std::string url = slurp_line(std::string(dir) + "/conninfo");
  if (url.empty()) {
    std::string missing = slurp_line(std::string(dir) + "/missing");
    *why = missing.empty() ? std::string("no test cluster: ") + dir + "/conninfo is missing" : missing;
  }
  return url;
}

std::unique_ptr<BackendDb> BackendDb::make(const std::string& backend, std::string* why) {
  std::unique_ptr<BackendDb> db(new BackendDb);
  db->backend_ = backend;
  if (backend == "sqlite") {
    char tmpl[] = "/tmp/airlock-store-test.XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    db->dir_ = tmpl;
    db->url_ = "sqlite:" + db->dir_ + "/airlock.db";
    return db;
  }
  std::string admin = pg_admin_url(why);
  if (admin.empty()) return nullptr;
  static std::atomic<int> n{0};
  db->db_name_ = "airlock_t" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  pg_exec(admin, "CREATE DATABASE " + db->db_name_);
  db->admin_url_ = admin;
  // postgresql:///postgres?host=... → postgresql:///<db>?host=...
  auto at = admin.find("/postgres?");
  if (at == std::string::npos) throw std::runtime_error("unexpected conninfo " + admin);
  db->url_ = admin.substr(0, at) + "/" + db->db_name_ + admin.substr(at + 9);
  return db;
}

void BackendDb::raw(const std::string& sql) {
  if (backend_ == "postgresql") return pg_exec(url_, sql);
  sqlite_exec(url_.substr(7), sql);
}

void sqlite_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string e = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error(sql + ": " + e);
}

BackendDb::~BackendDb() {
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  if (!db_name_.empty()) {
    try {
      pg_exec(admin_url_, "DROP DATABASE IF EXISTS " + db_name_ + " WITH (FORCE)");
    } catch (...) {
    }
  }
}

}  // namespace airlock::testing
