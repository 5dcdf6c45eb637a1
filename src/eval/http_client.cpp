#include "eval/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace sieve::eval {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return std::string(s);
}

// Closes the socket on every path.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

Status wait_fd(int fd, short events, double timeout_s, const char* what, const std::string& where) {
  pollfd p{fd, events, 0};
  const int ms = static_cast<int>(std::min(timeout_s * 1000.0, 2.0e9));
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return {};
    if (r == 0) return make_error("{}: timed out after {:g} s while {}", where, timeout_s, what);
    if (errno != EINTR)
      return make_error("{}: poll failed while {}: {}", where, what, std::strerror(errno));
  }
}

// Reads the response incrementally: head, then body by its framing.
class Reader {
 public:
  Reader(int fd, double timeout_s, std::string where)
      : fd_(fd), timeout_s_(timeout_s), where_(std::move(where)) {}

  // More bytes into buf_; false at EOF.
  Result<bool> fill() {
    SIEVE_TRY(wait_fd(fd_, POLLIN, timeout_s_, "waiting for the response", where_));
    char tmp[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno != EINTR) return make_error("{}: receive failed: {}", where_, std::strerror(errno));
    }
  }
  // The next CRLF-terminated line (without CRLF).
  Result<std::string> line() {
    for (;;) {
      const size_t p = buf_.find("\r\n");
      if (p != std::string::npos) {
        std::string l = buf_.substr(0, p);
        buf_.erase(0, p + 2);
        return l;
      }
      auto more = fill();
      if (!more) return more.error();
      if (!*more) return make_error("{}: connection closed in the middle of the response", where_);
    }
  }
  std::string& buf() { return buf_; }

 private:
  int fd_;
  double timeout_s_;
  std::string where_;
  std::string buf_;
};

}  // namespace

std::string HttpResponse::header(std::string_view name) const {
  const std::string n = lower(std::string(name));
  for (const auto& [k, v] : headers) {
    if (k == n) return v;
  }
  return "";
}

Result<HttpUrl> parse_http_url(std::string_view url) {
  const std::string_view scheme = "http://";
  if (url.substr(0, 8) == "https://") {
    return make_error("{}: https is not supported; use http:// (e.g. through a local proxy)", url);
  }
  if (url.substr(0, scheme.size()) != scheme) {
    return make_error("{}: expected a URL like http://127.0.0.1:8080", url);
  }
  std::string_view rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  HttpUrl u;
  if (slash != std::string_view::npos) u.prefix = std::string(rest.substr(slash));
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  const size_t colon = hostport.rfind(':');
  if (colon != std::string_view::npos && hostport.find(']') == std::string_view::npos) {
    const std::string port(hostport.substr(colon + 1));
    hostport = hostport.substr(0, colon);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p <= 0 || p > 65535)
      return make_error("{}: bad port '{}'", url, port);
    u.port = static_cast<int>(p);
  }
  if (hostport.empty()) return make_error("{}: the URL has no host", url);
  u.host = std::string(hostport);
  return u;
}

Status http_post(const HttpUrl& url, const std::string& path,
                 const std::vector<std::pair<std::string, std::string>>& headers,
                 const std::string& body, double timeout_s,
                 const std::function<void(const HttpResponse&)>& on_head,
                 const std::function<bool(std::string_view)>& on_body) {
  return http_request("POST", url, path, headers, body, timeout_s, on_head, on_body);
}

Status http_request(std::string_view method, const HttpUrl& url, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& headers,
                    const std::string& body, double timeout_s,
                    const std::function<void(const HttpResponse&)>& on_head,
                    const std::function<bool(std::string_view)>& on_body) {
  const std::string where = fmt::format("http://{}:{}", url.host, url.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (const int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return make_error("{}: cannot resolve {}: {}", where, url.host, gai_strerror(rc));
  }
  Socket sock;
  std::string last_error = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sock.fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (sock.fd < 0)
    return make_error("{}: cannot connect ({}); is the server running?", where, last_error);

  std::string req =
      std::string(method) + " " + path + " HTTP/1.1\r\nHost: " + url.host + ":" + port + "\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (method != "GET" || !body.empty())
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "Connection: close\r\n\r\n";
  req += body;
  for (size_t sent = 0; sent < req.size();) {
    SIEVE_TRY(wait_fd(sock.fd, POLLOUT, timeout_s, "sending the request", where));
    const ssize_t n = ::send(sock.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("{}: send failed: {}", where, std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }

  Reader rd(sock.fd, timeout_s, where);
  HttpResponse head;
  for (;;) {  // skip interim 1xx responses
    auto status_line = rd.line();
    if (!status_line) return status_line.error();
    // "HTTP/1.1 200 OK"
    const size_t sp = status_line->find(' ');
    if (status_line->rfind("HTTP/", 0) != 0 || sp == std::string::npos) {
      return make_error("{}: not an HTTP response: '{}'", where, status_line->substr(0, 80));
    }
    head.status = std::atoi(status_line->c_str() + sp + 1);
    head.headers.clear();
    for (;;) {
      auto l = rd.line();
      if (!l) return l.error();
      if (l->empty()) break;
      const size_t c = l->find(':');
      if (c == std::string::npos) continue;
      head.headers.emplace_back(lower(trim(l->substr(0, c))), trim(l->substr(c + 1)));
    }
    if (head.status >= 200) break;
  }
  if (on_head) on_head(head);

  const bool chunked = lower(head.header("transfer-encoding")).find("chunked") != std::string::npos;
  const std::string cl = head.header("content-length");
  if (chunked) {
    for (;;) {
      auto size_line = rd.line();
      if (!size_line) return size_line.error();
      const unsigned long size = std::strtoul(size_line->c_str(), nullptr, 16);
      if (size == 0) break;  // trailers are ignored
      while (rd.buf().size() < size + 2) {
        auto more = rd.fill();
        if (!more) return more.error();
        if (!*more) return make_error("{}: connection closed inside a chunk", where);
      }
      const bool go_on = on_body(std::string_view(rd.buf()).substr(0, size));
      rd.buf().erase(0, size + 2);
      if (!go_on) return {};
    }
    return {};
  }
  if (!cl.empty()) {
    size_t left = std::strtoull(cl.c_str(), nullptr, 10);
    for (;;) {
      const size_t take = std::min(left, rd.buf().size());
      if (take > 0) {
        if (!on_body(std::string_view(rd.buf()).substr(0, take))) return {};
        rd.buf().erase(0, take);
        left -= take;
      }
      if (left == 0) return {};
      auto more = rd.fill();
      if (!more) return more.error();
      if (!*more)
        return make_error("{}: connection closed {} bytes before the end of the body", where, left);
    }
  }
  for (;;) {  // no framing: the body runs to the end of the connection
    if (!rd.buf().empty()) {
      if (!on_body(rd.buf())) return {};
      rd.buf().clear();
    }
    auto more = rd.fill();
    if (!more) return more.error();
    if (!*more) return {};
  }
}

}  // namespace sieve::eval
