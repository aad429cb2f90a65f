// GNU libmicrohttpd 0.9.75 (Debian): one epoll thread per core (a pool of 2) or, given argv[2]
// "tpc", a thread per connection; 64 connections (or argv[1]),
// 64 KiB of memory per connection (request line, headers and read buffer all live in it), an
// idle timeout of 5 s. The 8 MiB body bound is the handler's: MHD hands the body over in pieces
// and never buffers it; past the bound on a chunked body the connection is closed without a
// status (see handle). Prints its port on stdout, serves until SIGTERM.
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr uint64_t kMaxBody = 8u << 20;

struct Upload {
  uint64_t bytes = 0;
};

MHD_Result reply(MHD_Connection* c, unsigned status, const std::string& body, bool close) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

MHD_Result handle(void*, MHD_Connection* c, const char* url, const char* method, const char*, const char* data,
                  size_t* size, void** state) {
  bool post = std::strcmp(method, "POST") == 0;
  if (*state == nullptr) {  // the head has arrived; the body (if any) has not
    if (post) {
      const char* cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      if (cl && std::strtoull(cl, nullptr, 10) > kMaxBody) return reply(c, 413, "{\"error\":\"too large\"}", true);
    }
    *state = new Upload;
    return MHD_YES;
  }
  auto* up = static_cast<Upload*>(*state);
  if (*size > 0) {  // a piece of the body, however it was encoded
    up->bytes += *size;
    *size = 0;
    // MHD 0.9.75 refuses a response queued while the body is still arriving (MHD_queue_response
    // answers MHD_NO): past the bound the only choice is to close, without a status.
    if (up->bytes > kMaxBody) return MHD_NO;
    return MHD_YES;
  }
  (void)data;
  if (std::strcmp(url, "/v1/health") == 0 && !post) return reply(c, 200, "{\"status\":\"ok\"}", false);
  if (std::strcmp(url, "/v1/echo") == 0 && post)
    return reply(c, 200, "{\"ok\":true,\"bytes\":" + std::to_string(up->bytes) + "}", false);
  return reply(c, 404, "{\"error\":\"no route\"}", false);
}

void done(void*, MHD_Connection*, void** state, MHD_RequestTerminationCode) {
  delete static_cast<Upload*>(*state);
  *state = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned max_connections = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 64u;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  // "tpc": a thread per connection (poll), the mode whose handlers may block, as airlock's do.
  bool tpc = argc > 2 && std::strcmp(argv[2], "tpc") == 0;
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  size_t memory = 64u << 10;
  MHD_Daemon* d =
      tpc ? MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                                 MHD_USE_ERROR_LOG,
                             0, nullptr, nullptr, &handle, nullptr, MHD_OPTION_SOCK_ADDR, sa,
                             MHD_OPTION_CONNECTION_LIMIT, max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
                             MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_NOTIFY_COMPLETED, &done, nullptr,
                             MHD_OPTION_END)
          : MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
                             &handle, nullptr, MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_THREAD_POOL_SIZE, 2u,
                             MHD_OPTION_CONNECTION_LIMIT, max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
                             MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_NOTIFY_COMPLETED, &done, nullptr,
                             MHD_OPTION_END);
  if (!d) return 1;
  const MHD_DaemonInfo* info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  getsockname(info->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  std::printf("%d\n", ntohs(bound.sin_port));
  std::fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  MHD_stop_daemon(d);
  return 0;
}
