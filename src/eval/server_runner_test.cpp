// The HTTP runner and client against a small in-test OpenAI-style server on a loopback
// socket: streamed (chunked SSE), plain JSON (Content-Length), unframed, and errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "eval/http_client.h"
#include "eval/runner.h"

namespace sieve::eval {
namespace {

using json = nlohmann::json;

class FakeServer {
 public:
  FakeServer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 8) != 0) {
      throw std::runtime_error("test server: bind/listen failed");
    }
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  int port = 0;
  json last_request;
  std::string last_path;

 private:
  static void send_all(int fd, const std::string& s) {
    for (size_t sent = 0; sent < s.size();) {
      const ssize_t n = ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }
  static std::string chunk(const std::string& s) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", s.size());
    return size + s + "\r\n";
  }

  void serve() {
    while (!stop_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::string req;
      char buf[4096];
      size_t head_end = std::string::npos, need = 0;
      while (true) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        if (head_end == std::string::npos &&
            (head_end = req.find("\r\n\r\n")) != std::string::npos) {
          const size_t cl = req.find("Content-Length: ");
          need = head_end + 4 + std::stoul(req.substr(cl + 16));
        }
        if (head_end != std::string::npos && req.size() >= need) break;
      }
      last_path = req.substr(req.find(' ') + 1, req.find(' ', 5) - req.find(' ') - 1);
      last_request = json::parse(req.substr(head_end + 4), nullptr, false);
      respond(fd, last_request);
      ::close(fd);
    }
  }

  void respond(int fd, const json& r) {
    const std::string prompt = r.value("prompt", "");
    if (prompt == "fail") {
      const std::string b = R"({"error": {"message": "boom"}})";
      send_all(fd,
               "HTTP/1.1 500 Internal Server Error\r\nContent-Type: "
               "application/json\r\nContent-Length: " +
                   std::to_string(b.size()) + "\r\n\r\n" + b);
      return;
    }
    if (prompt == "unframed") {  // no length, no chunks: the body ends with the connection
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
      send_all(fd, R"({"choices": [{"text": " unframed ok"}]})");
      return;
    }
    if (r.value("stream", false)) {
      send_all(fd,
               "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
               "chunked\r\n\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // "prefill"
      const bool lines = prompt == "lines";
      const std::vector<std::string> pieces =
          lines ? std::vector<std::string>{"\n 12", "345.\nThe", " grass", " is"}
                : std::vector<std::string>{" 12", "34", "5."};
      for (const std::string& piece : pieces) {
        send_all(fd, chunk("data: " + json{{"choices", {{{"text", piece}, {"index", 0}}}}}.dump() +
                           "\n\n"));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      // An event split across two chunks must be reassembled.
      const std::string usage =
          "data: " +
          json{{"choices", json::array()},
               {"usage",
                {{"prompt_tokens", 77},
                 {"completion_tokens", 4},
                 {"prompt_tokens_details", {{"cached_tokens", 32}}}}},
               {"sieve", {{"policy", "tokenselect top_k=64"}, {"selected_fraction", 0.375}}}}
              .dump() +
          "\n\n";
      send_all(fd, chunk(usage.substr(0, 20)));
      send_all(fd, chunk(usage.substr(20)));
      if (prompt == "timed") {  // the server's own timings, as Sieve's and llama.cpp's send
        send_all(fd, chunk("data: " +
                           json{{"choices", json::array()},
                                {"timings", {{"prompt_ms", 123.0}, {"predicted_ms", 45.0}}}}
                               .dump() +
                           "\n\n"));
      }
      send_all(fd, chunk("data: [DONE]\n\n") + "0\r\n\r\n");
      return;
    }
    const std::string b = json{{"choices", {{{"text", " 12345."}}}},
                               {"usage", {{"prompt_tokens", 70}, {"completion_tokens", 3}}},
                               {"timings", {{"prompt_ms", 40.0}, {"predicted_ms", 10.0}}}}
                              .dump();
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(b.size()) + "\r\n\r\n" + b);
  }

  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(HttpUrl, ParsesHostPortAndPrefix) {
  auto u = parse_http_url("http://example.org:8081/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "example.org");
  EXPECT_EQ(u->port, 8081);
  EXPECT_EQ(u->prefix, "/api");
  auto d = parse_http_url("http://localhost");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 80);
  EXPECT_FALSE(parse_http_url("http://h:99999").ok());
  EXPECT_FALSE(parse_http_url("ftp://h").ok());
  auto s = parse_http_url("https://h");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("https"), std::string::npos);
}

PolicyPtr policy(const char* name, std::vector<std::string> knobs = {}) {
  auto p = make_policy(name, knobs);
  if (!p) throw std::runtime_error(p.message());
  return std::make_shared<const PolicyConfig>(std::move(*p));
}

TEST(ServerRunner, StreamsACompletionAndReadsUsage) {
  FakeServer fs;
  ServerRunnerOptions o;
  o.url = fs.url() + "/v1";
  o.model = "tiny";
  auto r = make_server_runner(o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::vector<int32_t> ids(50, 3);
  auto c = (*r)->complete({ids, "What is the pass key?", 6, policy("tokenselect", {"top_k=64"})});
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->text, " 12345.");
  EXPECT_EQ(c->prompt_tokens, 77);
  EXPECT_EQ(c->completion_tokens, 4);
  EXPECT_EQ(c->reused_tokens, 32);
  EXPECT_EQ(c->prefill_tokens, 45);
  EXPECT_EQ(c->policy, "tokenselect top_k=64");  // the answer's "sieve" object
  EXPECT_DOUBLE_EQ(c->selected_fraction, 0.375);
  EXPECT_GE(c->prefill_ms, 25.0);  // the first event came after the server's 30 ms pause
  EXPECT_GE(c->decode_ms, 15.0);
  EXPECT_EQ(fs.last_path, "/v1/completions");
  EXPECT_EQ(fs.last_request["prompt"], "What is the pass key?");
  EXPECT_EQ(fs.last_request["max_tokens"], 6);
  EXPECT_EQ(fs.last_request["temperature"], 0.0);
  EXPECT_EQ(fs.last_request["model"], "tiny");
  // The policy travels as the "sieve" extension object, knobs typed.
  EXPECT_EQ(fs.last_request["sieve"], (json{{"policy", "tokenselect"}, {"top_k", 64}}));
  EXPECT_EQ((*r)->backend(), o.url);

  // Dense is sent too (the server's default need not be dense); without the field, nothing.
  ASSERT_TRUE((*r)->complete({ids, "x", 6, nullptr}).ok());
  EXPECT_EQ(fs.last_request["sieve"], (json{{"policy", "dense"}}));
  o.send_policy = false;
  auto plain = make_server_runner(o);
  ASSERT_TRUE((*plain)->complete({ids, "x", 6, nullptr}).ok());
  EXPECT_FALSE(fs.last_request.contains("sieve"));

  // Streamed timings from the server replace the client's time-to-first-token estimate.
  auto timed = (*r)->complete({ids, "timed", 6, nullptr});
  ASSERT_TRUE(timed.ok()) << timed.message();
  EXPECT_DOUBLE_EQ(timed->prefill_ms, 123.0);
  EXPECT_DOUBLE_EQ(timed->decode_ms, 45.0);
}

TEST(ServerRunner, StopAtNewlineKeepsTheAnswerLine) {
  EXPECT_EQ(answer_line_end("\n  42.\nmore"), 6u);
  EXPECT_EQ(answer_line_end(" \n\t "), std::string_view::npos);
  EXPECT_EQ(answer_line_end(": \n 7.\n"), 6u);  // punctuation alone is not an answer yet
  EXPECT_EQ(answer_line_end("no break"), std::string_view::npos);
  FakeServer fs;
  ServerRunnerOptions o;
  o.url = fs.url();
  auto r = make_server_runner(o);
  std::vector<int32_t> ids(5, 3);
  CompletionRequest req{ids, "lines", 20, nullptr};
  req.stop_at_newline = true;
  auto c = (*r)->complete(req);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->text, "\n 12345.");
  req.stop_at_newline = false;
  auto full = (*r)->complete(req);
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_EQ(full->text, "\n 12345.\nThe grass is");
}

TEST(ServerRunner, PlainJsonAnswersUseTheServersTimings) {
  FakeServer fs;
  ServerRunnerOptions o;
  o.url = fs.url() + "/";
  o.stream = false;
  auto r = make_server_runner(o);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> ids(5, 3);
  auto c = (*r)->complete({ids, "x", 6, nullptr});
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->text, " 12345.");
  EXPECT_EQ(c->prompt_tokens, 70);
  EXPECT_EQ(c->reused_tokens, 0);
  EXPECT_DOUBLE_EQ(c->selected_fraction, -1);  // not reported: unknown, not guessed
  EXPECT_EQ(c->policy, "");
  EXPECT_DOUBLE_EQ(c->prefill_ms, 40.0);
  EXPECT_DOUBLE_EQ(c->decode_ms, 10.0);
  EXPECT_FALSE(fs.last_request.contains("model"));
  auto u = (*r)->complete({ids, "unframed", 6, nullptr});
  ASSERT_TRUE(u.ok()) << u.message();
  EXPECT_EQ(u->text, " unframed ok");
}

TEST(ServerRunner, ErrorsNameTheUrlAndTheAnswer) {
  FakeServer fs;
  ServerRunnerOptions o;
  o.url = fs.url();
  auto r = make_server_runner(o);
  std::vector<int32_t> ids(5, 3);
  auto c = (*r)->complete({ids, "fail", 6, nullptr});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("500"), std::string::npos) << c.message();
  EXPECT_NE(c.message().find("boom"), std::string::npos) << c.message();

  o.url = "http://127.0.0.1:1";  // nothing listens on port 1
  auto dead = make_server_runner(o);
  ASSERT_TRUE(dead.ok());
  auto d = (*dead)->complete({ids, "x", 6, nullptr});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("127.0.0.1:1"), std::string::npos) << d.message();
  EXPECT_NE(d.message().find("running"), std::string::npos) << d.message();
}

}  // namespace
}  // namespace sieve::eval
