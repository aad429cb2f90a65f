// session_keyring: the kernel keyrings, which no mount or network namespace separates: join a fresh
// session keyring, add a key to it, and look up the user's keyring (shared by every process of the
// uid).
#include <fmt/format.h>

#include <cerrno>

#include "escape/scenario.h"

#if AIRLOCK_PROBE_SIDE
#include "linux/raw_syscalls.h"
#endif

namespace airlock::escape::scenarios::session_keyring {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput&) {
  long s = linux::join_session_keyring();
  int e1 = s < 0 ? errno : 0;
  long k = linux::add_user_key_to_session_keyring("airlock-escape-probe", "airlock-escape");
  int e2 = k < 0 ? errno : 0;
  long u = linux::user_keyring_id();
  int e3 = u < 0 ? errno : 0;
  auto said = [](int e, long v) { return e ? err_name(e) : fmt::format("OK (serial {})", v); };
  return {{},
          e1 == 0 || e2 == 0 || e3 == 0,
          fmt::format("keyctl(JOIN_SESSION_KEYRING): {}; add_key(user, session keyring): {}; "
                      "keyctl(GET_KEYRING_ID, user keyring): {}",
                      said(e1, s), said(e2, k), said(e3, u)),
          e1   ? e1
          : e2 ? e2
               : e3,
          Json::object()};
}

#else

class SessionKeyring final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  Judged judge(Run&, const Observed& o) override { return judged_by_probe(o); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<SessionKeyring>(); }

#endif

}  // namespace airlock::escape::scenarios::session_keyring
