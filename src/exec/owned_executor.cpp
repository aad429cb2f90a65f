// OwnedExecutor: plan, directories and a prepared executor, torn down together.
#include "exec/owned_executor.h"

#include "base/fs.h"
#include "base/hash.h"
#include "exec/planner.h"

namespace airlock::exec {

OwnedExecutor::OwnedExecutor(OwnedExecutor&& o) noexcept
    : id(std::move(o.id)),
      plan(std::move(o.plan)),
      dirs(std::exchange(o.dirs, {})),
      view(std::move(o.view)),
      executor(std::move(o.executor)) {}

OwnedExecutor::~OwnedExecutor() {
  if (executor) executor->stop();
  executor.reset();
  if (!dirs.root.empty()) (void)remove_session_dirs(dirs);
}

Result<OwnedExecutor> build_owned_executor(plan::ExecutionPlan plan, const std::string& state_dir, std::string id,
                                           const std::string& workspace, DoorStarter door) {
  OwnedExecutor o;
  o.id = std::move(id);
  o.plan = std::move(plan);
  TRY(make_dirs(state_dir, 0700));
  o.dirs = TRY(make_session_dirs(state_dir, o.id));
  o.view = TRY(create_view(workspace, o.dirs.view, view_rules(o.plan)));
  if (o.plan.protected_first_wall) o.dirs.view_read_only = o.view.protected_present;
  o.executor = TRY(make_executor(o.plan, o.dirs, o.id, workspace, std::move(door)));
  return o;
}

Result<OwnedExecutor> open_owned_executor(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                          plan::Profile profile, const std::string& state_dir,
                                          const std::optional<std::string>& workspace, size_t vm_pool) {
  std::string ws = workspace ? absolute_path(*workspace) : std::string();
  auto plan = TRY(plan_session(policy, facts, {profile, ws, vm_pool}));
  return build_owned_executor(std::move(plan), state_dir, random_id(), ws);
}

}  // namespace airlock::exec
