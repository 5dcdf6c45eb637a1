// Result<T>: a value or an error message that names the input at fault and a hint.
// Used at module boundaries; exceptions are reserved for the CLI/server edge.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace sieve {

struct Error {
  std::string message;
};

template <class... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(v_); }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error)
      : err_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }
  const std::string& message() const { return err_.message; }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace sieve

// Propagate an error from an expression returning Result<...>.
#define SIEVE_TRY(expr)                                  \
  do {                                                   \
    auto&& sieve_try_r_ = (expr);                        \
    if (!sieve_try_r_.ok()) return sieve_try_r_.error(); \
  } while (0)
