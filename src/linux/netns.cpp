// netns: loopback up, and the door's listening socket passed out of the namespace.
#include "linux/netns.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace airlock::linux {

int apply_loopback_up() noexcept {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = 0;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    rc = errno;
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) rc = errno;
  }
  ::close(fd);
  return rc;
}

namespace {

// One byte of data carrying room for one descriptor: what the door channel sends and receives.
struct FdMessage {
  char byte = 'd';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
};

}  // namespace

Result<DoorChannel> prepare_door_channel() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return fail_errno(Code::ExecutorUnavailable, "socketpair for the network door", errno);
  return DoorChannel{UniqueFd(sv[0]), UniqueFd(sv[1])};
}

int apply_door_listener(int channel, const char* address, uint16_t port) noexcept {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  int rc = 0;
  if (::inet_pton(AF_INET, address, &sin.sin_addr) != 1) rc = EINVAL;
  if (rc == 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) rc = errno;
  if (rc == 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0) rc = errno;
  if (rc == 0 && ::listen(fd, 128) < 0) rc = errno;
  if (rc == 0) {
    FdMessage m;
    cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (::sendmsg(channel, &m.msg, MSG_NOSIGNAL) < 0) rc = errno;
  }
  ::close(fd);
  ::close(channel);
  return rc;
}

Result<UniqueFd> receive_door_listener(int channel) {
  FdMessage m;
  ssize_t n;
  do {
    n = ::recvmsg(channel, &m.msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_errno(Code::ExecutorUnavailable, "receiving the network door's socket", errno);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (n == 0 || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
    return fail(Code::ExecutorUnavailable, "the sandbox's init sent no listening socket for the network door");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return UniqueFd(fd);
}

}  // namespace airlock::linux
