#include "server/api_error.h"

namespace sieve::server {

const char* error_type_for(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 501:
      return "not_supported_error";
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json error_json(const ApiError& e) {
  nlohmann::json err = {
      {"message", e.message},
      {"type", e.type.empty() ? error_type_for(e.status) : e.type},
      {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
      {"code", e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code)},
  };
  if (e.extra.is_object()) {
    for (auto it = e.extra.begin(); it != e.extra.end(); ++it) err[it.key()] = it.value();
  }
  return {{"error", err}};
}

std::string error_body(const ApiError& e) {
  return error_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sieve::server
