// OwnedExecutor: plan, directories and a prepared executor, torn down together.
#include "exec/owned_executor.h"

#include "base/fs.h"
#include "base/hash.h"
#include "exec/planner.h"

namespace airlock::exec {

OwnedExecutor::OwnedExecutor(OwnedExecutor&& o) noexcept
    : id(std::move(o.id)), plan(std::move(o.plan)), dirs(std::exchange(o.dirs, {})), executor(std::move(o.executor)) {}

OwnedExecutor::~OwnedExecutor() {
  if (executor) executor->stop();
  executor.reset();
  if (!dirs.root.empty()) (void)remove_session_dirs(dirs);
}

Result<OwnedExecutor> open_owned_executor(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                          plan::Profile profile, const std::string& state_dir,
                                          const std::optional<std::string>& workspace, size_t vm_pool) {
  OwnedExecutor o;
  std::string ws = workspace ? absolute_path(*workspace) : std::string();
  o.plan = TRY(plan_session(policy, facts, {profile, ws, vm_pool}));
  TRY(make_dirs(state_dir, 0700));
  (void)sweep_abandoned_sessions(state_dir);
  o.id = random_id();
  o.dirs = TRY(make_session_dirs(state_dir, o.id));
  auto copy = TRY(create_view(ws, o.dirs.view, view_rules(o.plan)));
  if (o.plan.protected_first_wall) o.dirs.view_read_only = std::move(copy.protected_present);
  o.executor = TRY(make_executor(o.plan, o.dirs, o.id, ws));
  return o;
}

}  // namespace airlock::exec
