#include "core/log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace sieve {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("SIEVE_LOG");
  if (env && std::strcmp(env, "debug") == 0) return LogLevel::debug;
  return LogLevel::info;
}

std::atomic<LogLevel> g_level{initial_level()};
std::mutex g_mutex;

}  // namespace

LogLevel log_level() {
  return g_level.load(std::memory_order_relaxed);
}
void set_log_level(LogLevel level) {
  g_level.store(level, std::memory_order_relaxed);
}

void log_write(LogLevel level, const std::string& text) {
  static const char* const kPrefix[] = {"debug: ", "", "warning: ", "error: ", ""};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s%s\n", kPrefix[static_cast<int>(level)], text.c_str());
}

}  // namespace sieve
