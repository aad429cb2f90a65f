// linux::launch, the supervisor and command it starts, on the host with no confinement: what a
// supervisor holds of the process that started it.
#include "linux/apply.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <string>

#include "base/unique_fd.h"

namespace airlock::linux {
namespace {

UniqueFd take(int fd) { return UniqueFd(fd); }

// A daemon starts supervisors for many runs at once. A supervisor holding another run's pipe (an
// output pipe of a neighbouring run, here `other`) would keep that run's reader from ever seeing
// the end of its output while this run goes on.
TEST(Launch, ASupervisorHoldsNothingOfTheProcessThatStartedIt) {
  int other[2], in[2], out[2];
  ASSERT_EQ(::pipe2(other, O_CLOEXEC), 0);  // close-on-exec: a supervisor does not exec
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  UniqueFd other_rd = take(other[0]), other_wr = take(other[1]);
  UniqueFd in_rd = take(in[0]), in_wr = take(in[1]), out_rd = take(out[0]), out_wr = take(out[1]);

  LaunchSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"/bin/sh", "-c", "echo started; read line"};  // runs until stdin ends
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.cwd = "/";
  spec.no_new_privs = false;
  spec.stdin_fd = in_rd.get();
  spec.stdout_fd = out_wr.get();
  auto launched = launch(spec);
  ASSERT_TRUE(launched.has_value()) << launched.error().message;
  in_rd.reset();
  out_wr.reset();

  // The command runs: the supervisor is past its set-up.
  char buf[16] = {};
  ASSERT_EQ(::read(out_rd.get(), buf, 8), 8);
  ASSERT_EQ(std::string(buf, 8), "started\n");

  other_wr.reset();  // the neighbour's writer ends: its reader must see end of file now
  pollfd p{other_rd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  EXPECT_TRUE(p.revents & POLLHUP) << "a supervisor still holds the neighbour's pipe";
  EXPECT_EQ(::read(other_rd.get(), buf, 1), 0);

  in_wr.reset();
  auto rep = wait_report(*launched);
  ASSERT_TRUE(rep.has_value()) << rep.error().message;
  EXPECT_EQ(rep->setup_failed, 0);
  EXPECT_EQ(rep->exited, 1);
}

}  // namespace
}  // namespace airlock::linux
