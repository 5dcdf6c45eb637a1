// Logging to stderr. Level from set_log_level() (CLI -v/-q); SIEVE_LOG=debug for debug output.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace sieve {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3, silent = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_write(LogLevel level, const std::string& text);

template <class... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::debug)
    log_write(LogLevel::debug, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::info)
    log_write(LogLevel::info, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::warn)
    log_write(LogLevel::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void log_error(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() <= LogLevel::error)
    log_write(LogLevel::error, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace sieve
