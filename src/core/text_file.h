// Whole-file reads for the small JSON / text inputs (head plans, sketch bases, policy files).
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "core/result.h"

namespace sieve {

// The file's bytes; the error says "cannot read the <what> <path>".
inline Result<std::string> read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read the {} {}", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error("cannot read the {} {}", what, path);
  return ss.str();
}

}  // namespace sieve
