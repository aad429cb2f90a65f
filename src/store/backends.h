// The two Store backends' constructors: SQLite (embedded default) and PostgreSQL (fleets).
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace airlock::store {

// Opens (creating if missing) the SQLite file at `path`, in WAL mode with a bounded busy timeout.
Result<std::unique_ptr<Store>> open_sqlite(const std::string& path, const StoreOptions& options);
// Connects with libpq (loaded when first needed, see pg_store.cpp); `shown` is the URL with
// any password masked, for messages.
Result<std::unique_ptr<Store>> open_postgresql(const std::string& url, const std::string& shown,
                                               const StoreOptions& options);

}  // namespace airlock::store
