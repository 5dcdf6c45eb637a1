// OpenAI-style error objects: {"error": {"message", "type", "param", "code", ...extra}}.
// Thrown inside request handling (the server edge) and turned into the HTTP answer there.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace sieve::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;                                // the request field at fault ("" -> null)
  std::string code;                                 // machine-readable ("" -> null)
  std::string type;                                 // "" -> from the status
  nlohmann::json extra = nlohmann::json::object();  // merged into the error object

  static ApiError bad(std::string param, std::string message, std::string code = "invalid_value") {
    return ApiError{400, std::move(message),      std::move(param), std::move(code),
                    "",  nlohmann::json::object()};
  }
};

// invalid_request_error (4xx), authentication_error (401), not_found_error (404),
// rate_limit_error (429), not_supported_error (501), unavailable_error (503), server_error.
const char* error_type_for(int status);
nlohmann::json error_json(const ApiError& e);
std::string error_body(const ApiError& e);

}  // namespace sieve::server
