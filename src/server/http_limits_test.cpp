// The HTTP layer's defences of issue 44: the head is admitted (API key) before the body is
// read, one client's stalled connections make room for others instead of locking them out,
// and request bodies in flight share one byte budget.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http.h"

namespace sieve::server {
namespace {

std::unique_ptr<HttpServer> start(HttpLimits lim, HttpServer::Admit admit = {}) {
  auto srv = std::make_unique<HttpServer>(
      lim,
      [](HttpExchange& ex) {
        ex.respond(200, "text/plain", "ok " + std::to_string(ex.request().body.size()));
      },
      [](int status, std::string_view) { return "{\"status\":" + std::to_string(status) + "}"; },
      std::move(admit));
  EXPECT_TRUE(srv->listen("127.0.0.1", 0));
  srv->start();
  return srv;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Sends bytes, then reads until the server closes, `until` appears, or the time is up.
std::string exchange(int fd, const std::string& out, const std::string& until,
                     int timeout_ms = 3000) {
  if (!out.empty()) (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  std::string in;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (!until.empty() && in.find(until) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  return in;
}

TEST(HttpDefences, HeadIsAdmittedBeforeTheBodyIsRead) {
  HttpLimits lim;
  lim.max_body_bytes = 1000;
  auto srv = start(lim, [](const HttpRequest& head) -> std::optional<HttpServer::Refusal> {
    if (head.header("x-api-key") == "k") return std::nullopt;
    return HttpServer::Refusal{401, "{\"no\":1}", {{"WWW-Authenticate", "Bearer"}}};
  });
  // 401, not 413: the announced body is never looked at; no 100 Continue either
  int fd = connect_to(srv->port());
  std::string r = exchange(
      fd, "POST /x HTTP/1.1\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\n\r\n", "no");
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 401", 0), 0u) << r;
  EXPECT_EQ(r.find("100 Continue"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  fd = connect_to(srv->port());
  r = exchange(fd, "POST /x HTTP/1.1\r\nX-Api-Key: k\r\nContent-Length: 3\r\n\r\nabc", "ok 3");
  ::close(fd);
  EXPECT_NE(r.find("ok 3"), std::string::npos) << r;
  srv->stop();
}

TEST(HttpDefences, StalledConnectionsOfOneClientMakeRoom) {
  HttpLimits lim;
  lim.max_connections = 8;
  lim.max_connections_per_client = 3;
  lim.head_timeout_ms = 20000;
  auto srv = start(lim);
  std::vector<int> stalled;
  for (int i = 0; i < 20; ++i) {  // more than both caps, all half-sent
    stalled.push_back(connect_to(srv->port()));
    (void)::send(stalled.back(), "GET /x HT", 9, MSG_NOSIGNAL);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(srv->open_connections(), 3);
  // the same address still gets an answer: its oldest stalled connection gives way
  const int fd = connect_to(srv->port());
  const std::string r = exchange(fd, "GET /y HTTP/1.1\r\n\r\n", "ok 0");
  ::close(fd);
  EXPECT_NE(r.find("ok 0"), std::string::npos) << r;
  EXPECT_LE(srv->open_connections(), 3);
  // the first stalled connections were closed by the server
  EXPECT_EQ(exchange(stalled.front(), "", "", 500), "");
  for (int s : stalled) ::close(s);
  srv->stop();
}

TEST(HttpDefences, BodiesInFlightShareOneBudget) {
  HttpLimits lim;
  lim.max_body_bytes = 1000;
  lim.max_inflight_bytes = 1500;
  auto srv = start(lim);
  // one upload announces 1000 bytes and stalls: 500 remain
  const int hold = connect_to(srv->port());
  const std::string part = "POST /a HTTP/1.1\r\nContent-Length: 1000\r\n\r\nxx";
  (void)::send(hold, part.data(), part.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(srv->inflight_bytes(), 1000);
  int fd = connect_to(srv->port());
  std::string r = exchange(
      fd, "POST /b HTTP/1.1\r\nContent-Length: 800\r\n\r\n" + std::string(800, 'y'), "503");
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  // chunked bodies are charged as they grow
  fd = connect_to(srv->port());
  r = exchange(fd,
               "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" +
                   std::string(600, 'z') + "\r\n0\r\n\r\n",
               "503");
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  fd = connect_to(srv->port());
  r = exchange(fd, "POST /d HTTP/1.1\r\nContent-Length: 400\r\n\r\n" + std::string(400, 'w'),
               "ok 400");
  ::close(fd);
  EXPECT_NE(r.find("ok 400"), std::string::npos) << r;
  ::close(hold);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(srv->inflight_bytes(), 0);
  srv->stop();
}

}  // namespace
}  // namespace sieve::server
