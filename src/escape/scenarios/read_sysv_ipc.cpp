// read_sysv_ipc: read a host SysV shared memory segment and receive from a host message queue (the
// suite's own, 0600), by id: ids are global to an IPC namespace.
#include <fmt/format.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::read_sysv_ipc {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int shm = std::atoi(in.arg(0).c_str()), msg = std::atoi(in.arg(1).c_str());
  std::string seen;
  void* at = ::shmat(shm, nullptr, SHM_RDONLY);
  int e_shm = at == reinterpret_cast<void*>(-1) ? errno : 0;
  if (!e_shm) {
    seen +=
        printable(std::string_view(static_cast<const char*>(at), strnlen(static_cast<const char*>(at), 200)));
    ::shmdt(at);
  }
  struct {
    long mtype;
    char mtext[256];
  } m{};
  ssize_t n = ::msgrcv(msg, &m, sizeof m.mtext, 0, IPC_NOWAIT | MSG_NOERROR);
  int e_msg = n < 0 ? errno : 0;
  if (n > 0) seen += " " + printable(std::string_view(m.mtext, static_cast<size_t>(n)));
  return {{},
          !e_shm || !e_msg,
          fmt::format("shmat({}): {}; msgrcv({}): {}; read: \"{}\"", shm,
                      e_shm ? err_name(e_shm) : std::string("ATTACHED"), msg,
                      e_msg ? err_name(e_msg) : std::string("RECEIVED"), seen),
          e_shm ? e_shm : e_msg,
          Json::object()};
}

#else

class ReadSysvIpc final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{std::to_string(run.bait.shm_id), std::to_string(run.bait.msg_id)};
  }
  // The token in the output, or the queue emptied (a message received leaves it).
  Judged judge(Run& run, const Observed& o) override {
    bool seen = has(o.output, run.bait.ipc_token);
    long left = run.canaries.ipc_messages_left();
    Judged j;
    j.host = {{"ipc_token_in_output", seen}, {"messages_left", left}};
    j.breached = seen || left == 0;
    j.evidence = fmt::format("{}; host: the IPC canary token {} the output, the queue holds {} message(s)",
                             o.probe_said(), seen ? "IS IN" : "is not in", left);
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ReadSysvIpc>(); }

#endif

}  // namespace airlock::escape::scenarios::read_sysv_ipc
