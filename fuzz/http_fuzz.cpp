// libFuzzer target for the HTTP/1.1 request parser (src/server/http.cpp). Each input is sent
// as raw bytes over a loopback connection to a real HttpServer, so the head parser, the body
// framing (Content-Length, chunked, Expect), keep-alive and the error paths run exactly as in
// `sieve serve`; the handler checks what reaches it. The path normaliser is also fed the
// input directly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/log.h"
#include "fuzz_util.h"
#include "server/http.h"

namespace {

using sieve::server::HttpExchange;
using sieve::server::HttpLimits;
using sieve::server::HttpServer;

// Small limits so that the 413 / 431 paths are reachable by inputs of fuzzing size.
HttpLimits limits() {
  HttpLimits l;
  l.max_head_bytes = 1024;
  l.max_headers = 12;
  l.max_body_bytes = 512;
  l.head_timeout_ms = 2000;
  l.body_timeout_ms = 2000;
  l.keep_alive_ms = 2000;
  l.write_timeout_ms = 2000;
  return l;
}

bool is_normalised(const std::string& p) {
  if (p.empty() || p[0] != '/') return false;
  if (p.size() > 1 && p.back() == '/') return false;
  if (p.find("//") != std::string::npos) return false;
  for (std::string_view seg : {"/./", "/../"}) {
    if (p.find(seg) != std::string::npos) return false;
  }
  if (p.ends_with("/.") || p.ends_with("/..")) return false;
  for (char c : p) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') return false;
  }
  return true;
}

void handle(HttpExchange& ex) {
  const auto& req = ex.request();
  // What a handler may rely on: a normalised path (the router and the API key check see the
  // same one), lowercased header names, a body within the limit.
  if (!is_normalised(req.path)) sieve::fuzz::die("handler got a path that is not normalised");
  if (static_cast<int64_t>(req.body.size()) > limits().max_body_bytes)
    sieve::fuzz::die("handler got a body over the limit");
  if (req.headers.size() > limits().max_headers) sieve::fuzz::die("too many headers");
  for (const auto& [k, v] : req.headers) {
    if (k.empty()) sieve::fuzz::die("empty header name");
    for (char c : k)
      if (c >= 'A' && c <= 'Z') sieve::fuzz::die("header name not lowercased");
    for (char c : v)
      if (c == '\r' || c == '\n' || c == '\0') sieve::fuzz::die("CR, LF or NUL in a header value");
  }
  if (req.path == "/stream") {
    if (!ex.begin_stream(200, "text/plain")) return;
    ex.write(req.body.substr(0, req.body.size() / 2));
    ex.write(req.body.substr(req.body.size() / 2));
    ex.end();
    return;
  }
  if (req.path == "/throw") throw std::runtime_error("handler failure");
  ex.respond(200, "text/plain", req.body, {{"X-Echo", req.header("x-echo")}});
}

struct Fixture {
  std::unique_ptr<HttpServer> server;
  Fixture() {
    sieve::set_log_level(sieve::LogLevel::silent);
    server = std::make_unique<HttpServer>(limits(), handle, [](int status, std::string_view msg) {
      return "{\"status\":" + std::to_string(status) + "}";
    });
    if (!server->listen("127.0.0.1", 0)) sieve::fuzz::die("listen failed");
    server->start();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  // The normaliser on its own: an accepted path is normalised and normalising is idempotent.
  if (auto p = sieve::server::normalise_path(text)) {
    if (!is_normalised(*p)) sieve::fuzz::die("normalise_path returned a non-normal path");
    auto again = sieve::server::normalise_path(*p);
    if (!again || *again != *p) sieve::fuzz::die("normalise_path is not idempotent");
  } else {
    sieve::fuzz::check_message(p.message());
  }

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(fx.server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second can run out of local ports (EADDRNOTAVAIL) while
  // earlier ones wait out TIME_WAIT: that is the harness's machine, not the server, so wait
  // for a port (bounded) instead of reporting a crash.
  int fd = -1;
  for (int tries = 0;; ++tries) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) sieve::fuzz::die("socket failed");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    const int err = errno;
    ::close(fd);
    if ((err != EADDRNOTAVAIL && err != EAGAIN && err != EINTR) || tries >= 200) {
      errno = err;
      sieve::fuzz::die("connect failed");
    }
    ::usleep(10000);
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // The server may answer (413, 431) and close before reading everything: a failed send is
  // part of the exchange, not an error.
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string resp;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      sieve::fuzz::die("no response and no close within 5 s (a hang)");
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  // The response was read to its end: close with a reset, so this side keeps no TIME_WAIT
  // port (the source of the EADDRNOTAVAIL above; CI's http_fuzz found connect failing).
  const linger abort_close{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
  ::close(fd);
  // One exchange at a time: wait until the server has closed its side too, so no connection
  // thread of this input is still inside serve_connection when libFuzzer counts this input's
  // allocations (a 30-minute run reported a leak from a string a live connection thread held).
  for (int i = 0; i < 500 && fx.server->open_connections() > 0; ++i) ::usleep(1000);
  // Whatever came back is a sequence of HTTP/1.x responses.
  if (!resp.empty() && !resp.starts_with("HTTP/1."))
    sieve::fuzz::die("the reply is not an HTTP/1.x response");
  return 0;
}
