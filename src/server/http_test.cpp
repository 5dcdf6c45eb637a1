#include "server/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace sieve::server {
namespace {

TEST(NormalisePath, ResolvesTheFormsThatMustRouteAlike) {
  for (const char* t :
       {"/v1/completions", "//v1/completions", "/v1/./completions", "/v1/../v1/completions",
        "/%76%31/completions", "/v1/completions/", "/v1//completions", "/a/../../v1/completions",
        "http://host:8080/v1/completions", "/v1%2Fcompletions"}) {
    auto p = normalise_path(t);
    ASSERT_TRUE(p) << t << ": " << p.message();
    EXPECT_EQ(*p, "/v1/completions") << t;
  }
  EXPECT_EQ(*normalise_path("/"), "/");
  EXPECT_EQ(*normalise_path("/.."), "/");
  EXPECT_EQ(*normalise_path("/V1/completions"), "/V1/completions");  // case is kept: /V1 is not /v1
}

TEST(NormalisePath, RejectsBadTargets) {
  for (const char* t :
       {"", "v1/completions", "/v1/%zz", "/v1/%4", "/v1/%00", "/a%0d%0aX-Injected: 1", "*"}) {
    EXPECT_FALSE(normalise_path(t)) << t;
  }
}

TEST(NormalisePath, DecodesToAPathThatDecodesToItself) {
  // http_fuzz: "/.0mod%2e%25.0mW" decoded to "/.0mod.%.0mW", which a second pass rejects; a
  // double-encoded "%252e%252e" would decode to "%2e%2e" and then to "..".
  for (const char* t : {"/.0mod%2e%25.0mW", "/v1/%252e%252e/x", "/%25"}) {
    auto p = normalise_path(t);
    ASSERT_FALSE(p) << t << " -> " << *p;
    EXPECT_NE(p.message().find("%25"), std::string::npos) << p.message();
  }
  for (const char* t : {"/v1/%2e%2e/v1/models", "/a/%41b", "/x.y/z%20w"}) {
    auto p = normalise_path(t);
    ASSERT_TRUE(p) << t;
    auto again = normalise_path(*p);
    ASSERT_TRUE(again) << *p;
    EXPECT_EQ(*again, *p);
  }
}

// A live server on a free port with a handler that echoes what it saw.
class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lim_.max_head_bytes = 2048;
    lim_.max_body_bytes = 1000;
    lim_.head_timeout_ms = 500;
    lim_.body_timeout_ms = 500;
    lim_.keep_alive_ms = 2000;
    srv_ = std::make_unique<HttpServer>(
        lim_,
        [this](HttpExchange& ex) {
          const HttpRequest& r = ex.request();
          if (r.path == "/stream") {
            ex.begin_stream(200, "text/plain");
            ex.write("one");
            ex.write("two");
            ex.end();
            return;
          }
          if (r.path == "/wait") {  // until the client goes away
            for (int i = 0; i < 100 && !ex.peer_closed(); ++i)
              std::this_thread::sleep_for(std::chrono::milliseconds(20));
            saw_close_ = ex.peer_closed();
            ex.respond(200, "text/plain", "late");
            return;
          }
          ex.respond(200, "text/plain",
                     r.method + " " + r.path + " " + std::to_string(r.body.size()) + " " + r.body);
        },
        [](int status, std::string_view msg) {
          return "{\"status\":" + std::to_string(status) + "}";
        });
    ASSERT_TRUE(srv_->listen("127.0.0.1", 0));
    srv_->start();
  }
  void TearDown() override { srv_->stop(); }

  int connect_() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(srv_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }
  // Sends raw bytes and reads until the server closes or `until` appears.
  std::string exchange(int fd, const std::string& out, const std::string& until = "",
                       int timeout_ms = 3000) {
    if (!out.empty()) {
      EXPECT_EQ(::send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    }
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
  std::string once(const std::string& raw, const std::string& until = "") {
    const int fd = connect_();
    std::string r = exchange(fd, raw, until);
    ::close(fd);
    return r;
  }

  HttpLimits lim_;
  std::unique_ptr<HttpServer> srv_;
  std::atomic<bool> saw_close_{false};
};

TEST_F(HttpServerTest, ContentLengthBodyAndKeepAlive) {
  const int fd = connect_();
  std::string r =
      exchange(fd, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "hello");
  EXPECT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("POST /x 5 hello"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: keep-alive"), std::string::npos) << r;
  // the same connection serves a second request
  r = exchange(fd, "GET /y/../z HTTP/1.1\r\nHost: a\r\n\r\n", "GET /z 0");
  EXPECT_NE(r.find("GET /z 0"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const std::string r = once("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n");
  const size_t a = r.find("GET /a 0"), b = r.find("GET /b 0");
  ASSERT_NE(a, std::string::npos) << r;
  ASSERT_NE(b, std::string::npos) << r;
  EXPECT_LT(a, b);
}

TEST_F(HttpServerTest, ChunkedRequestBody) {
  const std::string r = once(
      "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: "
      "close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
  EXPECT_NE(r.find("POST /c 5 abcde"), std::string::npos) << r;
}

TEST_F(HttpServerTest, ExpectContinue) {
  const int fd = connect_();
  std::string r = exchange(
      fd, "POST /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n", "100 Continue");
  EXPECT_NE(r.find("HTTP/1.1 100 Continue"), std::string::npos) << r;
  r = exchange(fd, "ok", "POST /e 2 ok");
  EXPECT_NE(r.find("POST /e 2 ok"), std::string::npos) << r;
  ::close(fd);
}

TEST_F(HttpServerTest, LimitsAnswerWithStatusCodes) {
  EXPECT_NE(once("POST /x HTTP/1.1\r\nContent-Length: 1001\r\n\r\n").find("HTTP/1.1 413"),
            std::string::npos);
  EXPECT_NE(once("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" +
                 std::string(2000, 'a') + "\r\n0\r\n\r\n")
                .find("HTTP/1.1 413"),
            std::string::npos);
  // A chunk-size line longer than 15 digits is refused before it is read as a number (the
  // parser went on multiplying and overflowed int64: UBSan, found by http_fuzz).
  for (const char* size_line : {"5Transfer-Encoding: chunked", "fffffffffffffffffffff"}) {
    EXPECT_NE(once(std::string("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") +
                   size_line + "\r\nab\r\n0\r\n\r\n")
                  .find("HTTP/1.1 400"),
              std::string::npos)
        << size_line;
  }
  EXPECT_NE(
      once("GET /x HTTP/1.1\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n").find("HTTP/1.1 431"),
      std::string::npos);
  EXPECT_NE(once("GET /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
                .find("HTTP/1.1 400"),
            std::string::npos);
  EXPECT_NE(once("GET /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
                .find("HTTP/1.1 400"),
            std::string::npos);
  EXPECT_NE(once("GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n").find("HTTP/1.1 400"),
            std::string::npos);
  EXPECT_NE(once("GET /x HTTP/2.0\r\n\r\n").find("HTTP/1.1 505"), std::string::npos);
  EXPECT_NE(once("GARBAGE\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);
  EXPECT_NE(once("GET /%zz HTTP/1.1\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);
  EXPECT_NE(once("GET /x HTTP/1.1\r\n bad-fold\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);
  // a body shorter than its Content-Length times out with 400 instead of hanging
  EXPECT_NE(once("POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nab").find("HTTP/1.1 400"),
            std::string::npos);
  // the server still answers afterwards
  EXPECT_NE(once("GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n").find("GET /ok 0"),
            std::string::npos);
}

TEST_F(HttpServerTest, ChunkedStreamResponse) {
  const std::string r = once("GET /stream HTTP/1.1\r\n\r\n", "0\r\n\r\n");
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"), std::string::npos) << r;
  // HTTP/1.0: no chunking; the body ends with the connection
  const std::string r10 = once("GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_NE(r10.find("Connection: close"), std::string::npos) << r10;
  EXPECT_NE(r10.find("\r\n\r\nonetwo"), std::string::npos) << r10;
}

TEST_F(HttpServerTest, PeerClosedIsSeenWhileTheHandlerRuns) {
  const int fd = connect_();
  const std::string req = "GET /wait HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(fd);
  for (int i = 0; i < 100 && !saw_close_; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(saw_close_);
}

TEST_F(HttpServerTest, IdleConnectionsCloseOnStop) {
  const int fd = connect_();
  std::string r = exchange(fd, "GET /a HTTP/1.1\r\n\r\n", "GET /a 0");
  ASSERT_NE(r.find("GET /a 0"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  srv_->stop();  // must not wait for the 2 s keep-alive
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(exchange(fd, "", "", 500), "");
  ::close(fd);
}

}  // namespace
}  // namespace sieve::server
