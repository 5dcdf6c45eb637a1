// Whole-file reads for the small JSON / text inputs (head plans, sketch bases, policy files,
// documents). Every read is bounded and takes regular files only: /dev/zero, a FIFO or a
// directory is refused before a byte is read (a FIFO would block forever, /dev/zero never
// ends). Errors name the path and the reason, never the file's contents.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/result.h"

namespace sieve {

inline constexpr int64_t kMaxTextFileBytes = int64_t{256} << 20;

// The file's bytes; errors say "cannot read the <what> <path>: <reason>".
inline Result<std::string> read_text_file(const std::string& path, std::string_view what,
                                          int64_t max_bytes = kMaxTextFileBytes) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once instead of hanging.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return make_error("cannot read the {} {}: {}", what, path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return make_error("cannot read the {} {}: {}", what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return make_error("cannot read the {} {}: not a regular file{}", what, path,
                      S_ISDIR(st.st_mode) ? " (a directory)" : "");
  }
  if (st.st_size > max_bytes) {
    return make_error("cannot read the {} {}: {} bytes is more than the {} accepted", what, path,
                      static_cast<int64_t>(st.st_size), max_bytes);
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("cannot read the {} {}: {}", what, path, std::strerror(errno));
    if (n == 0) break;
    // a file that grows while it is read is still bounded
    if (static_cast<int64_t>(out.size()) + n > max_bytes) {
      return make_error("cannot read the {} {}: more than the {} bytes accepted", what, path,
                        max_bytes);
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace sieve
