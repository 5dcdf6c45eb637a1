// Shared helpers of the libFuzzer harnesses: a byte reader over the input and a scratch file
// for the loaders that take a path.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace sieve::fuzz {

// Consumes the input front to back; reads past the end give zeros / empty strings.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  // Bytes up to (not including) the next `sep`, or the rest.
  std::string_view until(char sep) {
    const std::string_view rest(reinterpret_cast<const char*>(p_), n_);
    const size_t k = rest.find(sep);
    const std::string_view out = rest.substr(0, k);
    const size_t used = k == std::string_view::npos ? n_ : k + 1;
    p_ += used;
    n_ -= used;
    return out;
  }
  std::string_view rest() {
    const std::string_view out(reinterpret_cast<const char*>(p_), n_);
    p_ += n_;
    n_ = 0;
    return out;
  }
  size_t size() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Writes `text` to a per-process file under /dev/shm (or /tmp) and returns its path, for
// the loaders that read a file by name (policy files, head plans, sketch bases).
inline std::string scratch_file(std::string_view text) {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/sieve_fuzz_" + std::to_string(getpid());
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), f) != text.size()) __builtin_trap();
  std::fclose(f);
  return path;
}

// Inputs naming device or process files would make a loader read /dev/zero or block on a
// FIFO: not what these targets test (the loaders trust the path they are given).
inline bool names_special_file(std::string_view s) {
  for (std::string_view bad : {"dev/", "proc/", "sys/", "/dev", "/proc", "/sys"})
    if (s.find(bad) != std::string_view::npos) return true;
  return false;
}

// A broken invariant: says which (and errno, for the socket calls) before the trap, so a
// crash report names its cause without a debugger.
[[noreturn]] inline void die(const char* why) {
  std::fprintf(stderr, "fuzz invariant broken: %s (errno %d: %s)\n", why, errno,
               std::strerror(errno));
  __builtin_trap();
}

// An error must say something (it reaches a terminal or a JSON error body).
inline void check_message(const std::string& m) {
  if (m.empty()) __builtin_trap();
}

}  // namespace sieve::fuzz
