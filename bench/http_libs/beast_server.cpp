// Boost.Beast (Boost 1.74, Debian, header-only): an asynchronous server on 2 threads. Each request
// is read by an http::request_parser with header_limit 64 KiB and body_limit 8 MiB (for every
// transfer encoding), within a 5 s deadline for the whole request (beast::tcp_stream). Beast has
// no connection limit of its own: the 64 here (or argv[1]) is a counter of ours. Prints its port on stdout,
// serves until SIGTERM.
#include <utility>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

int g_max_connections = 64;
std::atomic<int> g_connections{0};

class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(tcp::socket s) : stream_(std::move(s)) {}
  ~Session() { --g_connections; }
  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(64u << 10);
    parser_->body_limit(8u << 20);
    stream_.expires_after(std::chrono::seconds(5));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) return refuse(http::status::request_header_fields_too_large);
    if (ec == http::error::body_limit) return refuse(http::status::payload_too_large);
    if (ec) return close();
    const auto& req = parser_->get();
    res_.emplace(http::status::ok, req.version());
    res_->set(http::field::content_type, "application/json");
    if (req.method() == http::verb::get && req.target() == "/v1/health") {
      res_->body() = "{\"status\":\"ok\"}";
    } else if (req.method() == http::verb::post && req.target() == "/v1/echo") {
      res_->body() = "{\"ok\":true,\"bytes\":" + std::to_string(req.body().size()) + "}";
    } else {
      res_->result(http::status::not_found);
      res_->body() = "{\"error\":\"no route\"}";
    }
    res_->keep_alive(req.keep_alive());
    res_->prepare_payload();
    write();
  }

  void refuse(http::status status) {
    res_.emplace(status, 11);
    res_->set(http::field::content_type, "application/json");
    res_->body() = "{\"error\":\"too large\"}";
    res_->keep_alive(false);
    res_->prepare_payload();
    write();
  }

  void write() {
    stream_.expires_after(std::chrono::seconds(5));
    http::async_write(stream_, *res_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || !self->res_->keep_alive()) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{1u << 17};  // at most 128 KiB of unparsed bytes
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
};

void accept(tcp::acceptor& acc) {
  acc.async_accept([&acc](beast::error_code ec, tcp::socket s) {
    if (!ec) {
      if (++g_connections > g_max_connections) {
        --g_connections;
        s.close(ec);
      } else {
        s.set_option(tcp::no_delay(true), ec);
        std::make_shared<Session>(std::move(s))->start();
      }
    }
    if (acc.is_open()) accept(acc);
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_max_connections = std::atoi(argv[1]);
  net::io_context ioc{2};
  tcp::acceptor acc(ioc, {net::ip::make_address("127.0.0.1"), 0});
  std::printf("%d\n", acc.local_endpoint().port());
  std::fflush(stdout);
  net::signal_set signals(ioc, SIGTERM, SIGINT);
  signals.async_wait([&](beast::error_code, int) { ioc.stop(); });
  accept(acc);
  std::thread other([&] { ioc.run(); });
  ioc.run();
  other.join();
  return 0;
}
