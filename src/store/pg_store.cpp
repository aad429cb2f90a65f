// The PostgreSQL backend through libpq, which is loaded (dlopen) only when a postgresql:// store
// is opened.
//
// Why dlopen: libpq drags in about twenty shared libraries (OpenSSL, Kerberos, LDAP, ...) and
// Debian ships no static libpgcommon/libpgport/gssapi, so it cannot be linked statically; linked
// dynamically, the loader would map all of them at every `airlock run` start (measured: +5 ms on
// a 0.6 ms start). Loaded on demand, only a PostgreSQL store pays for it.
#include <dlfcn.h>
#include <libpq-fe.h>

#include <mutex>

#include "store/backends.h"

namespace airlock::store {
namespace {

// The libpq functions used here, resolved once.
// clang-format off
#define AIRLOCK_PQ_FUNCTIONS(X)                                                                  \
  X(PQconnectdbParams) X(PQstatus) X(PQerrorMessage) X(PQfinish) X(PQexecParams)                 \
  X(PQresultStatus) X(PQresultErrorMessage) X(PQclear) X(PQntuples) X(PQnfields) X(PQgetvalue) \
  X(PQgetisnull) X(PQgetlength) X(PQcmdTuples) X(PQsetNoticeProcessor)
// clang-format on

struct Libpq {
#define AIRLOCK_PQ_MEMBER(f) decltype(&::f) f = nullptr;
  AIRLOCK_PQ_FUNCTIONS(AIRLOCK_PQ_MEMBER)
#undef AIRLOCK_PQ_MEMBER
};

Result<const Libpq*> load_libpq() {
  static Libpq pq;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      error = e ? e : "dlopen failed";
      return;
    }
#define AIRLOCK_PQ_RESOLVE(f)                              \
  pq.f = reinterpret_cast<decltype(&::f)>(::dlsym(h, #f)); \
  if (!pq.f) {                                             \
    error = "libpq.so.5 has no " #f;                       \
    return;                                                \
  }
    AIRLOCK_PQ_FUNCTIONS(AIRLOCK_PQ_RESOLVE)
#undef AIRLOCK_PQ_RESOLVE
  });
  if (!error.empty())
    return fail(Code::ConfigError,
                fmt::format("a PostgreSQL store needs libpq (Debian package libpq5): {}", error),
                {{"library", "libpq.so.5"}});
  return &pq;
}

std::string trimmed(const char* s) {
  std::string t = s ? s : "";
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// "? ... ?" → "$1 ... $n". The statements here hold no literal question marks.
std::string numbered(const std::string& sql) {
  std::string out;
  int n = 0;
  for (char c : sql) {
    if (c == '?')
      out += "$" + std::to_string(++n);
    else
      out += c;
  }
  return out;
}

class PgStore final : public Store {
 public:
  PgStore(std::string shown, const Libpq* pq, PGconn* conn, StoreOptions options)
      : Store(std::move(shown), options), pq_(pq), conn_(conn) {}
  ~PgStore() override { pq_->PQfinish(conn_); }

  std::string backend() const override { return "postgresql"; }

  Result<Rows> exec(const std::string& sql, const std::vector<Param>& params) override {
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      if (auto* n = std::get_if<int64_t>(&params[i]))
        text[i] = std::to_string(*n);
      else if (auto* s = std::get_if<std::string>(&params[i]))
        text[i] = *s;
      else
        continue;  // NULL
      values[i] = text[i].c_str();
    }
    std::string q = numbered(sql);
    PGresult* res = pq_->PQexecParams(conn_, q.c_str(), static_cast<int>(params.size()), nullptr,
                                      values.data(), nullptr, nullptr, 0);
    std::unique_ptr<PGresult, void (*)(PGresult*)> guard(res, pq_->PQclear);
    auto st = res ? pq_->PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      std::string msg = res ? trimmed(pq_->PQresultErrorMessage(res)) : trimmed(pq_->PQerrorMessage(conn_));
      return fail(Code::IoError, fmt::format("PostgreSQL store {}: {}", url(), msg), {{"store", url()}});
    }
    Rows out;
    for (int r = 0, nr = pq_->PQntuples(res); r < nr; ++r) {
      Row row;
      for (int c = 0, nc = pq_->PQnfields(res); c < nc; ++c) {
        if (pq_->PQgetisnull(res, r, c))
          row.emplace_back(std::nullopt);
        else
          row.emplace_back(
              std::string(pq_->PQgetvalue(res, r, c), static_cast<size_t>(pq_->PQgetlength(res, r, c))));
      }
      out.rows.push_back(std::move(row));
    }
    const char* affected = pq_->PQcmdTuples(res);
    out.affected = affected && *affected ? std::stoll(affected) : 0;
    return out;
  }

  // A transaction-scoped advisory lock serialises migrators: concurrent CREATE TABLE IF NOT
  // EXISTS can otherwise collide in the catalog.
  Result<void> begin_exclusive() override {
    TRY(exec("BEGIN", {}));
    TRY(exec("SELECT pg_advisory_xact_lock(7346723)", {}));  // any fixed key; airlock's own
    return {};
  }

  Result<bool> has_table(const std::string& name) override {
    auto r =
        TRY(exec("SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", {name}));
    return !r.rows.empty();
  }

 private:
  const Libpq* pq_;
  PGconn* conn_;
};

void quiet_notice(void*, const char*) {}

}  // namespace

Result<std::unique_ptr<Store>> open_postgresql(const std::string& url, const std::string& shown,
                                               const StoreOptions& options) {
  const Libpq* pq = TRY(load_libpq());
  // connect_timeout first so that one in the URL wins; no connection attempt waits for ever.
  const char* keys[] = {"connect_timeout", "dbname", nullptr};
  const char* values[] = {"10", url.c_str(), nullptr};
  PGconn* conn = pq->PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (!conn || pq->PQstatus(conn) != CONNECTION_OK) {
    std::string msg = conn ? trimmed(pq->PQerrorMessage(conn)) : "out of memory";
    if (conn) pq->PQfinish(conn);
    return fail(Code::ServerUnreachable, fmt::format("cannot connect to the PostgreSQL store {}: {}", shown, msg),
                {{"store", shown}});
  }
  // "relation already exists, skipping" and the like are for a DBA's log, not airlock's stderr.
  pq->PQsetNoticeProcessor(conn, quiet_notice, nullptr);
  auto s = std::make_unique<PgStore>(shown, pq, conn, options);
  // Bounded waits: a lock or a statement that takes this long is an error, not a hang.
  TRY(s->exec(fmt::format("SET lock_timeout = {}", options.busy_timeout_ms), {}));
  TRY(s->exec(fmt::format("SET statement_timeout = {}", options.busy_timeout_ms * 3), {}));
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace airlock::store
