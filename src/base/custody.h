// Custody: whether a file airlock trusts (its own executable, its state directory, a key file)
// could be replaced or read by an identity other than its custodian (root or the running user).
// Every refusal is AIRLOCK_CUSTODY_UNSAFE naming what was found, with the commands that fix it
// in facts.fix (one shell command a line).
#pragma once

#include <sys/types.h>

#include <string>

#include "base/error.h"

namespace airlock {

// The executable at `path` (a symlink is followed to the file that runs): owned by root or
// `uid`, no write for group or others on the file or on its directory, and a `uid` that does not
// own it may execute it only through the others' execute bit.
Result<void> check_executable_custody(const std::string& path, uid_t uid);

// A directory airlock keeps its state in: not a symlink, owned by root or `uid`, no write for
// group or others.
Result<void> check_directory_custody(const std::string& path, uid_t uid);

// Reads a key file: opened without following a symlink, a regular file owned by `uid` with no
// access for group or others, exactly `length` bytes (a trailing newline is not part of a key).
Result<std::string> read_key_file(const std::string& path, uid_t uid, size_t length);

}  // namespace airlock
