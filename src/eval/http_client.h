// A minimal blocking HTTP/1.1 client for `sieve eval --server` and `sieve bench serve`: one
// request (POST, or GET) per connection,
// the response body streamed to a callback as it arrives (Content-Length, chunked, or until
// close), so server-sent events can be timed token by token. Plain http only.
//
// Why not cpp-httplib: Debian's libcpp-httplib-dev ships a split header whose code lives in a
// shared library found through pkg-config (no CMake package), so it is not linkable from this
// module's build rules; the few things eval needs are written out here instead.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace sieve::eval {

struct HttpUrl {
  std::string host;
  int port = 80;
  std::string prefix;  // path before the endpoint, no trailing '/' ("" or "/api")
};

// "http://host[:port][/prefix]"; https and other schemes are errors naming the URL.
Result<HttpUrl> parse_http_url(std::string_view url);

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string header(std::string_view name) const;           // "" when absent
};

// POSTs `body` to url.host:url.port at `path`. on_head sees the status and headers before
// any body bytes; on_body receives the decoded body in pieces and returns false to stop.
// timeout_s bounds each wait for the connection, a send or a receive.
Status http_post(const HttpUrl& url, const std::string& path,
                 const std::vector<std::pair<std::string, std::string>>& headers,
                 const std::string& body, double timeout_s,
                 const std::function<void(const HttpResponse&)>& on_head,
                 const std::function<bool(std::string_view)>& on_body);

// The same for any method ("GET": `body` empty, no Content-Length sent).
Status http_request(std::string_view method, const HttpUrl& url, const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& headers,
                    const std::string& body, double timeout_s,
                    const std::function<void(const HttpResponse&)>& on_head,
                    const std::function<bool(std::string_view)>& on_body);

}  // namespace sieve::eval
