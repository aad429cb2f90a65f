// Reaching another machine of the fleet over OpenSSH, as its row's transport records it: a
// script run by the far machine's /bin/sh, its stdin a file of ours, its output bounded.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::cli {

struct SshTarget {
  std::string user, host;  // host without IPv6 brackets
  int port = 22;
  std::string identity;     // private key file, "" for ssh's own choice
  std::string known_hosts;  // the host keys believed, "" for ssh's own files
  std::string dir;          // airlock's installation directory on the far machine (relative: to its home)
};

// The transport a row records: {"ssh": "user@host:port", "identity"?, "known_hosts"?, "dir"?}.
Result<SshTarget> ssh_target(const Json& transport, std::string_view machine);

// `s` as one word of a POSIX shell: single-quoted, each ' written as '\''.
std::string shell_quote(std::string_view s);

// The most an encoded script may be: the far kernel takes one argument of at most 128 KiB.
inline constexpr size_t kMaxRemoteScript = 100 * 1024;

// ssh's argv for running `script` through /bin/sh on the far machine: host keys checked strictly
// (only the row's file when it names one), nothing asked of a person (BatchMode), and the script
// carried as base64, so that no far login shell parses a byte of it. AIRLOCK_OPTION_INVALID when
// it is too long for one command.
Result<std::vector<std::string>> ssh_command(const SshTarget& t, const std::string& script);

struct RemoteRun {
  int status = 0;  // the far script's exit status (ssh gives 255 for its own failures)
  std::string out, err;
};

// Runs `script` through /bin/sh on the far machine (`ssh … -- exec /bin/sh -c SCRIPT`) with
// `stdin_fd` as its stdin (-1: none). Host keys are checked strictly and nothing is asked of a
// person (BatchMode). stdout is kept up to max_out bytes (more is an error), stderr's last 4 KiB.
// An error: ssh could not be started, the time ran out (ssh killed), or the output was too large.
// A connection ssh could not make is status 255, AIRLOCK_SERVER_UNREACHABLE through
// unreachable_error().
Result<RemoteRun> ssh_run(const SshTarget& t, const std::string& script, int stdin_fd,
                          std::chrono::seconds timeout, size_t max_out);

// ssh's own failure (status 255) as a refusal naming the machine and what ssh said.
Error unreachable_error(const SshTarget& t, std::string_view machine, const RemoteRun& r);

}  // namespace airlock::cli
