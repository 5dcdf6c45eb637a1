// A small HTTP/1.1 server for the OpenAI-compatible API: one thread per connection (a capped
// number of them), keep-alive, Content-Length and chunked request bodies, chunked streaming
// responses, and the limits a public endpoint needs (head size -> 431, body size -> 413,
// header/body/idle timeouts). Written here rather than taken from cpp-httplib because the
// server must see its sockets: a client that disconnects while its request is being
// generated (no bytes written for minutes during a long prefill) is noticed by polling the
// socket, and the request is cancelled at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/result.h"

namespace sieve::server {

struct HttpLimits {
  size_t max_head_bytes = 16 * 1024;       // request line + headers (-> 431)
  size_t max_headers = 100;                // (-> 431)
  int64_t max_body_bytes = 32ll << 20;     // (-> 413)
  int head_timeout_ms = 10000;             // the whole head must arrive within this
  int body_timeout_ms = 30000;             // longest wait for more body bytes
  int keep_alive_ms = 5000;                // idle time before a kept-alive connection closes
  int write_timeout_ms = 30000;            // longest wait for the client to accept more bytes
  int max_connections = 256;               // beyond: the biggest holder's oldest idle one closes
  int max_connections_per_client = 64;     // per peer address (0: no cap); beyond: its oldest idle
  int64_t max_inflight_bytes = 1ll << 30;  // request bodies + what handlers charge (-> 503)
};

// A budget of bytes shared by every request in flight: bodies are charged before they are
// read, handlers charge what they build from them (parsed JSON, token arrays). A request
// that would overdraw it is refused with 503 instead of taking the memory.
class ByteBudget {
 public:
  explicit ByteBudget(int64_t cap) : cap_(cap) {}
  bool try_take(int64_t n) {
    int64_t cur = used_.load();
    do {
      if (n > cap_ - cur) return false;
    } while (!used_.compare_exchange_weak(cur, cur + n));
    return true;
  }
  void give(int64_t n) { used_ -= n; }
  int64_t used() const { return used_.load(); }
  int64_t cap() const { return cap_; }

 private:
  const int64_t cap_;
  std::atomic<int64_t> used_{0};
};

// One request's share of the budget, given back when the request ends.
class BudgetLease {
 public:
  explicit BudgetLease(ByteBudget* b) : b_(b) {}
  ~BudgetLease() {
    if (b_) b_->give(held_);
  }
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;
  // false: the budget cannot give n more bytes now (nothing is taken).
  bool grow(int64_t n) {
    if (!b_ || n <= 0) return true;
    if (!b_->try_take(n)) return false;
    held_ += n;
    return true;
  }
  int64_t held() const { return held_; }

 private:
  ByteBudget* b_;
  int64_t held_ = 0;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;     // as sent
  std::string path;       // normalised: percent-decoded, dot segments resolved, no empty segments
  std::string query;      // after '?', raw
  int minor_version = 1;  // HTTP/1.x
  HttpHeaders headers;    // names lowercased, in order
  std::string body;
  std::string header(std::string_view lower_name) const;  // "" when absent
};

// Percent-decodes a target's path and resolves it the way the router must see it, so that
// authorisation and routing agree (//v1/x, /v1/./x, /v1/../v1/x, /%76%31/x and /v1/x/ are
// all /v1/x). Errors: bad escapes, NUL, not an origin or absolute form.
Result<std::string> normalise_path(std::string_view target_path);

// One request on one connection, as a handler sees it.
class HttpExchange {
 public:
  HttpExchange(int fd, const HttpRequest& req, const HttpLimits& lim, BudgetLease* lease = nullptr)
      : fd_(fd), req_(req), lim_(lim), lease_(lease) {}
  const HttpRequest& request() const { return req_; }
  // Charges n more bytes of this request to the server's budget; false: over it.
  bool charge(int64_t n) { return !lease_ || lease_->grow(n); }

  // A complete response (Content-Length).
  void respond(int status, std::string_view content_type, std::string_view body,
               const HttpHeaders& extra = {});
  // A streamed response: the head now, then write() pieces (chunked on HTTP/1.1, delimited
  // by closing the connection on HTTP/1.0), then end(). false: the client is gone.
  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& extra = {});
  bool write(std::string_view data);
  void end();
  // The client closed (or reset) its side; checked without blocking or consuming bytes.
  bool peer_closed() const;
  // Ask the connection to close after this response (drain, errors).
  void close_after() { keep_alive_ = false; }

  bool responded() const { return responded_; }
  bool keep_alive() const { return keep_alive_; }
  int status() const { return status_; }

 private:
  bool send_all(std::string_view data);
  std::string head(int status, std::string_view content_type, const HttpHeaders& extra,
                   std::string_view framing);

  int fd_;
  const HttpRequest& req_;
  const HttpLimits& lim_;
  BudgetLease* lease_;
  bool responded_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool failed_ = false;
  bool keep_alive_ = true;
  int status_ = 0;
};

const char* http_reason(int status);

class HttpServer {
 public:
  using Handler = std::function<void(HttpExchange&)>;
  // Errors the HTTP layer answers itself (malformed request, 413, 431, ...): status, message.
  using ErrorBody = std::function<std::string(int status, std::string_view message)>;
  // Looks at a request's head before its body is read (authentication): a response refuses
  // it, and the body is never read.
  struct Refusal {
    int status = 401;
    std::string body;
    HttpHeaders headers;
  };
  using Admit = std::function<std::optional<Refusal>(const HttpRequest& head)>;

  HttpServer(HttpLimits limits, Handler handler, ErrorBody error_body, Admit admit = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (port 0: any free port; see port()).
  Status listen(const std::string& host, int port);
  int port() const { return port_; }
  // Accepts connections on a background thread until stop().
  void start();
  // Stops accepting, wakes idle keep-alive connections and closes them, and joins every
  // connection thread (handlers must be finishing on their own: the caller cancels them).
  void stop();
  int open_connections() const { return n_open_.load(); }
  int64_t inflight_bytes() const { return budget_.used(); }

 private:
  // A connection's phase: waiting for or reading a request (it may be closed to make room),
  // inside a handler (never closed from outside), or closed to make room.
  enum ConnState : int { kReading = 0, kBusy = 1, kEvicted = 2 };
  struct Conn;
  void accept_loop();
  void serve_connection(int fd, uint64_t id);
  void reap(bool all);
  // With mu_ held: makes room for a connection from `peer`; false when none can be closed.
  bool make_room(const std::string& peer);
  void evict(Conn& c);

  HttpLimits lim_;
  Handler handler_;
  ErrorBody error_body_;
  Admit admit_;
  ByteBudget budget_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // self-pipe that interrupts accept()
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> n_open_{0};
  std::thread accept_thread_;
  struct Conn {
    std::thread thread;
    int fd = -1;
    std::string peer;  // the client's address
    std::atomic<bool> done{false};
    std::atomic<int> state{kReading};
  };
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;  // by id: oldest first
  std::map<std::string, int> per_peer_;              // open (not evicted) connections
  uint64_t next_conn_ = 1;
};

}  // namespace sieve::server
