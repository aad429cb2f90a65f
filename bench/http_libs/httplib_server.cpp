// cpp-httplib 0.11.4 (Debian), plain: the library's own knobs only, set to airlock's limits where
// it has one. Prints its port on stdout, serves until SIGTERM.
// Limits it cannot take: a bound on header count or total header bytes (only 8192 per line,
// compiled into Debian's libcpp-httplib), a bound on a chunked body (see README).
#include <httplib.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

int main() {
  httplib::Server s;
  s.set_payload_max_length(8u << 20);
  s.set_keep_alive_max_count(1000);
  s.set_tcp_nodelay(true);
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };
  s.Get("/v1/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  s.Post("/v1/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("{\"ok\":true,\"bytes\":" + std::to_string(req.body.size()) + "}", "application/json");
  });
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int port = s.bind_to_any_port("127.0.0.1");
  if (port <= 0) return 1;
  std::printf("%d\n", port);
  std::fflush(stdout);
  std::thread stopper([&] {
    int sig;
    sigwait(&set, &sig);
    s.stop();
  });
  s.listen_after_bind();
  stopper.join();
  return 0;
}
