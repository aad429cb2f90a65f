// loadgen: N keep-alive clients over loopback, each sending small requests back to back for S
// seconds (after 0.5 s of warm-up); prints one JSON object with requests/s and p50/p99 latency.
// Usage: loadgen PORT CLIENTS SECONDS [TOKEN]   (GET /v1/health; TOKEN goes in Authorization)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

int dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads one response; false if the connection failed. Sets `close` if the server will close.
bool read_response(int fd, std::string& buf, bool& close) {
  size_t head_end;
  while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
    char tmp[8192];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
  }
  std::string head = buf.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  if (head.compare(0, 12, "http/1.1 200") != 0) return false;
  size_t len = 0;
  if (auto p = head.find("content-length:"); p != std::string::npos) len = std::strtoul(head.c_str() + p + 15, nullptr, 10);
  close = head.find("connection: close") != std::string::npos;
  while (buf.size() < head_end + 4 + len) {
    char tmp[8192];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
  }
  buf.erase(0, head_end + 4 + len);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: loadgen PORT CLIENTS SECONDS [TOKEN]\n");
    return 2;
  }
  int port = std::atoi(argv[1]), clients = std::atoi(argv[2]);
  double seconds = std::atof(argv[3]);
  std::string req = "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (argc > 4) req += std::string("Authorization: Bearer ") + argv[4] + "\r\n";
  req += "\r\n";
  auto start = Clock::now() + std::chrono::milliseconds(500);
  auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<long> errors{0}, reconnects{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < clients; ++i)
    ts.emplace_back([&, i] {
      int fd = -1;
      std::string buf;
      auto& mine = lat[static_cast<size_t>(i)];
      while (Clock::now() < end) {
        if (fd < 0) {
          fd = dial(port);
          buf.clear();
          if (fd < 0) {
            ++errors;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
          }
          ++reconnects;
        }
        auto t0 = Clock::now();
        bool close = false;
        bool ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()) &&
                  read_response(fd, buf, close);
        auto t1 = Clock::now();
        if (!ok) ++errors;
        else if (t0 >= start && t1 <= end) mine.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (!ok || close) {
          ::close(fd);
          fd = -1;
        }
      }
      if (fd >= 0) ::close(fd);
    });
  for (auto& t : ts) t.join();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  std::printf("{\"requests\":%zu,\"rps\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%ld,\"connections\":%ld}\n",
              all.size(), all.size() / seconds, pct(0.5), pct(0.99), errors.load(), reconnects.load());
  return 0;
}
