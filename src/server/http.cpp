#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "core/log.h"

namespace sieve::server {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto d =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d <= 0 ? 0 : static_cast<int>(std::min<int64_t>(d, 1 << 30));
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string to_lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = lower(c);
  return r;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads more bytes into buf before the deadline. >0: bytes read; 0: the peer closed;
// -1: timeout or error.
ssize_t read_more(int fd, std::string& buf, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return -1;
    char tmp[16384];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return n < 0 ? -1 : 0;
    buf.append(tmp, static_cast<size_t>(n));
    return n;
  }
}

struct ParseError {
  int status;
  std::string message;
};

}  // namespace

std::string HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

const char* http_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

Result<std::string> normalise_path(std::string_view t) {
  // absolute-form (http://host/path) -> its path
  if (t.size() > 7 && (iequals(t.substr(0, 7), "http://") || iequals(t.substr(0, 8), "https://"))) {
    const size_t start = t.find("//") + 2;
    const size_t slash = t.find('/', start);
    t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
  }
  if (t.empty() || t.front() != '/') return make_error("the request target must start with '/'");
  std::string decoded;
  decoded.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c == '%') {
      if (i + 2 >= t.size()) return make_error("bad percent escape in the path");
      const int hi = hex_value(t[i + 1]), lo = hex_value(t[i + 2]);
      if (hi < 0 || lo < 0) return make_error("bad percent escape in the path");
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
      // %25 would leave a '%' that a second decoding reads as another escape (double
      // encoding): no route has one, so the decoded path stays one that decodes to itself.
      if (c == '%') return make_error("an encoded '%' (%25) in the path");
    }
    if (c == '\0') return make_error("NUL in the path");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return make_error("control character in the path");
    decoded.push_back(c == '\\' ? '/' : c);
  }
  std::vector<std::string_view> segs;
  std::string_view rest(decoded);
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
      continue;
    }
    segs.push_back(seg);
  }
  std::string out;
  for (const auto& s : segs) {
    out.push_back('/');
    out.insert(out.end(), s.begin(), s.end());
  }
  if (out.empty()) return std::string(1, '/');
  return out;
}

// ---------------------------------------------------------------------------------------
// HttpExchange

std::string HttpExchange::head(int status, std::string_view content_type, const HttpHeaders& extra,
                               std::string_view framing) {
  std::string h =
      fmt::format("HTTP/1.{} {} {}\r\n", req_.minor_version, status, http_reason(status));
  if (!content_type.empty()) h += fmt::format("Content-Type: {}\r\n", content_type);
  h += framing;
  h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [k, v] : extra) {
    // header values come from the server itself; strip CR/LF anyway so none can split a line
    std::string val;
    for (char c : v)
      if (c != '\r' && c != '\n') val.push_back(c);
    h += k + ": " + val + "\r\n";
  }
  h += "\r\n";
  return h;
}

bool HttpExchange::send_all(std::string_view data) {
  if (failed_) return false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(lim_.write_timeout_ms);
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int rc = ::poll(&p, 1, ms_left(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
    }
    failed_ = true;
    keep_alive_ = false;
    return false;
  }
  return true;
}

void HttpExchange::respond(int status, std::string_view content_type, std::string_view body,
                           const HttpHeaders& extra) {
  if (responded_) return;
  responded_ = true;
  status_ = status;
  if (req_.minor_version == 0 && iequals(req_.header("connection"), "keep-alive") == false)
    keep_alive_ = false;
  std::string out =
      head(status, content_type, extra, fmt::format("Content-Length: {}\r\n", body.size()));
  if (req_.method != "HEAD") out += body;
  send_all(out);
}

bool HttpExchange::begin_stream(int status, std::string_view content_type,
                                const HttpHeaders& extra) {
  if (responded_) return false;
  responded_ = true;
  streaming_ = true;
  status_ = status;
  chunked_ = req_.minor_version >= 1;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection closes
  return send_all(
      head(status, content_type, extra, chunked_ ? "Transfer-Encoding: chunked\r\n" : ""));
}

bool HttpExchange::write(std::string_view data) {
  if (!streaming_ || failed_) return false;
  if (data.empty()) return true;
  if (!chunked_) return send_all(data);
  std::string framed = fmt::format("{:x}\r\n", data.size());
  framed.append(data);
  framed += "\r\n";
  return send_all(framed);
}

void HttpExchange::end() {
  if (!streaming_) return;
  streaming_ = false;
  if (chunked_ && !failed_) send_all("0\r\n\r\n");
}

bool HttpExchange::peer_closed() const {
  if (failed_) return true;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  const int rc = ::poll(&p, 1, 0);
  if (rc <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(HttpLimits limits, Handler handler, ErrorBody error_body, Admit admit)
    : lim_(limits),
      handler_(std::move(handler)),
      error_body_(std::move(error_body)),
      admit_(std::move(admit)),
      budget_(limits.max_inflight_bytes) {}

HttpServer::~HttpServer() {
  stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_fd_)
    if (fd >= 0) ::close(fd);
}

Status HttpServer::listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return make_error("cannot resolve --host {}: {}", host, gai_strerror(rc));
  }
  std::string last_err = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 256) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_err = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return make_error("cannot listen on {}:{}: {}", host, port, last_err);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_fd_, O_CLOEXEC) != 0) return make_error("pipe: {}", std::strerror(errno));
  return {};
}

void HttpServer::start() {
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void HttpServer::reap(bool all) {
  std::vector<std::unique_ptr<Conn>> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || it->second->done.load()) {
        dead.push_back(std::move(it->second));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : dead)
    if (c->thread.joinable()) c->thread.join();
}

void HttpServer::evict(Conn& c) {
  int expected = kReading;
  if (!c.state.compare_exchange_strong(expected, kEvicted)) return;
  // The connection's thread wakes from its read, sees kEvicted and closes; the slot is
  // free from now on.
  ::shutdown(c.fd, SHUT_RDWR);
  n_open_--;
  if (--per_peer_[c.peer] <= 0) per_peer_.erase(c.peer);
}

bool HttpServer::make_room(const std::string& peer) {
  // The oldest connection of `who` that is not inside a handler (idle keep-alive, or a
  // request that is still arriving: a stalled client's).
  auto oldest_idle = [&](const std::string& who) -> Conn* {
    for (auto& [id, c] : conns_)
      if (c->peer == who && !c->done.load() && c->state.load() == kReading) return c.get();
    return nullptr;
  };
  const int mine = per_peer_.count(peer) ? per_peer_[peer] : 0;
  if (lim_.max_connections_per_client > 0 && mine >= lim_.max_connections_per_client) {
    // A client at its cap makes room among its own connections only.
    Conn* c = oldest_idle(peer);
    if (!c) return false;
    evict(*c);
    return true;
  }
  if (n_open_.load() < lim_.max_connections) return true;
  // The table is full: the client holding the most connections gives one up, so one client
  // cannot keep every other out.
  std::vector<std::pair<int, std::string>> holders;
  for (const auto& [who, n] : per_peer_) holders.emplace_back(n, who);
  std::sort(holders.rbegin(), holders.rend());
  for (const auto& [n, who] : holders) {
    if (Conn* c = oldest_idle(who)) {
      evict(*c);
      return true;
    }
  }
  return false;
}

void HttpServer::accept_loop() {
  while (!stopping_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    const int rc = ::poll(p, 2, 1000);
    reap(false);
    if (stopping_.load()) break;
    if (rc <= 0 || !(p[0].revents & POLLIN)) continue;
    sockaddr_storage ss{};
    socklen_t ss_len = sizeof(ss);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &ss_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
    else if (ss.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
    const std::string peer = host;
    bool room;
    {
      std::lock_guard<std::mutex> lock(mu_);
      room = make_room(peer);
    }
    if (!room) {
      const std::string body = error_body_(503, "too many open connections; retry later");
      const std::string resp = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
          "{}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
          body.size(), body);
      (void)::send(fd, resp.data(), resp.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    n_open_++;
    std::lock_guard<std::mutex> lock(mu_);
    per_peer_[peer]++;
    const uint64_t id = next_conn_++;
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = peer;
    Conn* raw = c.get();
    conns_[id] = std::move(c);
    raw->thread = std::thread([this, fd, id] { serve_connection(fd, id); });
  }
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) {
    reap(true);
    return;
  }
  if (wake_fd_[1] >= 0) (void)!::write(wake_fd_[1], "x", 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    // Idle connections sit in poll() waiting for their next request: end their reading side
    // so they wake up and close. Busy ones close after their response.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, c] : conns_)
      if (c->state.load() == kReading && !c->done.load()) ::shutdown(c->fd, SHUT_RD);
  }
  reap(true);
}

void HttpServer::serve_connection(int fd, uint64_t id) {
  Conn* self = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    self = conns_.at(id).get();
  }
  std::string buf;
  bool first = true;
  bool linger = false;  // unread request bytes may be in flight: close gently (no RST)
  auto fail = [&](int status, const std::string& msg) {
    linger = true;
    HttpRequest dummy;
    dummy.method = "GET";
    HttpExchange ex(fd, dummy, lim_);
    ex.close_after();
    ex.respond(status, "application/json", error_body_(status, msg));
  };
  while (!stopping_.load()) {
    // ---- head
    const auto idle_deadline =
        Clock::now() + std::chrono::milliseconds(first ? lim_.head_timeout_ms : lim_.keep_alive_ms);
    first = false;
    Clock::time_point head_deadline = idle_deadline;
    bool started = !buf.empty();
    if (started) head_deadline = Clock::now() + std::chrono::milliseconds(lim_.head_timeout_ms);
    size_t head_end = std::string::npos;
    bool closed = false, timed_out = false;
    for (;;) {
      head_end = buf.find("\r\n\r\n");
      if (head_end != std::string::npos) break;
      if (buf.size() > lim_.max_head_bytes) break;
      const ssize_t n = read_more(fd, buf, started ? head_deadline : idle_deadline);
      if (n == 0) {
        closed = true;
        break;
      }
      if (n < 0) {
        timed_out = true;
        break;
      }
      if (!started) {
        started = true;
        head_deadline = Clock::now() + std::chrono::milliseconds(lim_.head_timeout_ms);
      }
    }
    if (closed || stopping_.load()) break;
    if (timed_out) {
      if (started && !buf.empty()) fail(408, "the request head did not arrive in time");
      break;
    }
    if (head_end == std::string::npos || head_end + 4 > lim_.max_head_bytes) {
      fail(431, fmt::format("the request head is larger than {} bytes", lim_.max_head_bytes));
      break;
    }
    // ---- parse the head
    HttpRequest req;
    std::string_view headv(buf.data(), head_end);
    auto parse = [&]() -> std::optional<ParseError> {
      size_t eol = headv.find("\r\n");
      std::string_view line = headv.substr(0, eol);
      headv = eol == std::string_view::npos ? std::string_view() : headv.substr(eol + 2);
      const size_t sp1 = line.find(' ');
      const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return ParseError{400, "malformed request line"};
      req.method = std::string(line.substr(0, sp1));
      req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
      const std::string_view version = line.substr(sp2 + 1);
      if (req.method.empty() || !std::all_of(req.method.begin(), req.method.end(), is_tchar))
        return ParseError{400, "malformed request method"};
      if (version == "HTTP/1.1")
        req.minor_version = 1;
      else if (version == "HTTP/1.0")
        req.minor_version = 0;
      else
        return ParseError{505, "only HTTP/1.0 and HTTP/1.1 are supported"};
      if (req.target.size() > 8192) return ParseError{414, "the request target is too long"};
      const size_t q = req.target.find('?');
      auto path = normalise_path(std::string_view(req.target).substr(0, q));
      if (!path) return ParseError{400, path.message()};
      req.path = *path;
      if (q != std::string::npos) req.query = req.target.substr(q + 1);
      while (!headv.empty()) {
        eol = headv.find("\r\n");
        line = headv.substr(0, eol);
        headv = eol == std::string_view::npos ? std::string_view() : headv.substr(eol + 2);
        if (line.empty()) continue;
        if (line.front() == ' ' || line.front() == '\t')
          return ParseError{400, "folded header lines are not accepted"};
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
          return ParseError{400, "malformed header line"};
        const std::string_view name = line.substr(0, colon);
        if (!std::all_of(name.begin(), name.end(), is_tchar))
          return ParseError{400, "malformed header name"};
        const std::string_view value = trim_ows(line.substr(colon + 1));
        for (char c : value)
          if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
            return ParseError{400, "control character in a header value"};
        if (req.headers.size() >= lim_.max_headers)
          return ParseError{431, fmt::format("more than {} header fields", lim_.max_headers)};
        req.headers.emplace_back(to_lower(name), std::string(value));
      }
      return std::nullopt;
    };
    if (auto err = parse()) {
      fail(err->status, err->message);
      break;
    }
    buf.erase(0, head_end + 4);
    // ---- admission (the API key) before a byte of the body is read or buffered
    if (admit_) {
      if (std::optional<Refusal> no = admit_(req)) {
        linger = true;
        HttpExchange ex(fd, req, lim_);
        ex.close_after();
        ex.respond(no->status, "application/json", no->body, no->headers);
        break;
      }
    }
    BudgetLease lease(&budget_);
    auto over_budget = [&] {
      fail(503, "the server is holding too many request bytes in flight; retry shortly");
    };
    // ---- body framing
    bool keep_alive = req.minor_version >= 1;
    const std::string conn_hdr = to_lower(req.header("connection"));
    if (conn_hdr.find("close") != std::string::npos) keep_alive = false;
    if (req.minor_version == 0 && conn_hdr.find("keep-alive") != std::string::npos)
      keep_alive = true;
    std::string te, cl;
    int n_cl = 0, n_te = 0;
    for (const auto& [k, v] : req.headers) {
      if (k == "content-length") {
        if (n_cl++ && v != cl)
          cl = "conflict";
        else
          cl = v;
      } else if (k == "transfer-encoding") {
        n_te++;
        te = to_lower(v);
      }
    }
    const bool continue_expected = iequals(req.header("expect"), "100-continue");
    auto send_continue = [&] {
      if (continue_expected && req.minor_version >= 1) {
        static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)::send(fd, k100.data(), k100.size(), MSG_NOSIGNAL);
      }
    };
    if (n_te && n_cl) {
      fail(400, "a request may not carry both Content-Length and Transfer-Encoding");
      break;
    }
    bool body_ok = true;
    if (n_te) {
      if (te != "chunked" || n_te > 1) {
        fail(501, "only the chunked transfer coding is supported");
        break;
      }
      send_continue();
      // chunk-size [; ext] CRLF data CRLF ... 0 CRLF trailers CRLF
      const auto deadline = Clock::now() + std::chrono::milliseconds(lim_.body_timeout_ms);
      for (;;) {
        size_t eol;
        while ((eol = buf.find("\r\n")) == std::string::npos) {
          if (buf.size() > 1024 || read_more(fd, buf, deadline) <= 0) {
            body_ok = false;
            break;
          }
        }
        if (!body_ok) break;
        std::string_view size_line(buf.data(), eol);
        if (size_t semi = size_line.find(';'); semi != std::string_view::npos)
          size_line = size_line.substr(0, semi);
        size_line = trim_ows(size_line);
        int64_t size = 0;
        // At most 15 hex digits (< 2^60, no overflow); a longer or bad line stops the parse.
        if (size_line.empty() || size_line.size() > 15) body_ok = false;
        for (size_t i = 0; body_ok && i < size_line.size(); ++i) {
          const int h = hex_value(size_line[i]);
          if (h < 0) body_ok = false;
          size = size * 16 + std::max(h, 0);
        }
        if (!body_ok) break;
        buf.erase(0, eol + 2);
        if (size == 0) {  // trailers until an empty line
          for (;;) {
            while ((eol = buf.find("\r\n")) == std::string::npos) {
              if (buf.size() > lim_.max_head_bytes || read_more(fd, buf, deadline) <= 0) {
                body_ok = false;
                break;
              }
            }
            if (!body_ok) break;
            const bool empty = eol == 0;
            buf.erase(0, eol + 2);
            if (empty) break;
          }
          break;
        }
        if (static_cast<int64_t>(req.body.size()) + size > lim_.max_body_bytes) {
          fail(413, fmt::format("the request body is larger than {} bytes", lim_.max_body_bytes));
          body_ok = false;
          cl = "413";
          break;
        }
        if (!lease.grow(size)) {
          over_budget();
          body_ok = false;
          cl = "413";
          break;
        }
        while (static_cast<int64_t>(buf.size()) < size + 2) {
          if (read_more(fd, buf, deadline) <= 0) {
            body_ok = false;
            break;
          }
        }
        if (!body_ok) break;
        if (buf.compare(static_cast<size_t>(size), 2, "\r\n") != 0) {
          body_ok = false;
          break;
        }
        req.body.append(buf, 0, static_cast<size_t>(size));
        buf.erase(0, static_cast<size_t>(size) + 2);
      }
      if (!body_ok) {
        if (cl != "413") fail(400, "malformed chunked request body");
        break;
      }
    } else if (n_cl) {
      if (cl.empty() || cl.size() > 18 ||
          !std::all_of(cl.begin(), cl.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail(400, "malformed Content-Length");
        break;
      }
      const int64_t len = std::stoll(cl);
      if (len > lim_.max_body_bytes) {
        fail(413, fmt::format("the request body ({} bytes) is larger than the limit of {} bytes",
                              len, lim_.max_body_bytes));
        break;
      }
      if (!lease.grow(len)) {
        over_budget();
        break;
      }
      send_continue();
      const auto deadline = Clock::now() + std::chrono::milliseconds(lim_.body_timeout_ms);
      while (static_cast<int64_t>(buf.size()) < len) {
        if (read_more(fd, buf, deadline) <= 0) {
          body_ok = false;
          break;
        }
      }
      if (!body_ok) {
        fail(400, "the request body is shorter than its Content-Length (or arrived too slowly)");
        break;
      }
      req.body.assign(buf, 0, static_cast<size_t>(len));
      buf.erase(0, static_cast<size_t>(len));
    }
    // ---- handle
    HttpExchange ex(fd, req, lim_, &lease);
    if (!keep_alive || stopping_.load()) ex.close_after();
    int reading = kReading;
    if (!self->state.compare_exchange_strong(reading, kBusy)) break;  // closed to make room
    try {
      handler_(ex);
    } catch (const std::exception& e) {
      log_error("server: handler for {} {} failed: {}", req.method, req.path, e.what());
      if (!ex.responded()) {
        ex.close_after();
        ex.respond(500, "application/json", error_body_(500, "internal error"));
      }
    }
    if (!ex.responded()) ex.respond(500, "application/json", error_body_(500, "no response"));
    ex.end();
    self->state = kReading;  // answered: idle again, so it may be closed to make room
    if (!ex.keep_alive()) break;
  }
  if (linger) {
    // Closing with unread bytes in the socket sends a reset, which can destroy the error
    // response before the client reads it: end our side, then read and drop what still
    // arrives (bounded in time and bytes).
    ::shutdown(fd, SHUT_WR);
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    std::string sink;
    size_t dropped = 0;
    ssize_t n;
    while (dropped < (size_t{1} << 24) && (n = read_more(fd, sink, until)) > 0) {
      dropped += static_cast<size_t>(n);
      sink.clear();
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  {
    // An evicted connection's slot was given back when it was evicted.
    std::lock_guard<std::mutex> lock(mu_);
    int st = self->state.load();
    if (st != kEvicted && self->state.compare_exchange_strong(st, kEvicted)) {
      n_open_--;
      if (--per_peer_[self->peer] <= 0) per_peer_.erase(self->peer);
    }
  }
  ::close(fd);
  self->done = true;
}

}  // namespace sieve::server
