// Runtime CPU feature detection for kernel dispatch (one binary runs on any x86-64).
#pragma once

#include <string>

namespace sieve {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vnni = false;
  bool avxvnni = false;
};

const CpuFeatures& cpu_features();
// Which SIMD path the kernels use ("avx2", "scalar"); SIEVE_SIMD=scalar forces the reference.
bool use_avx2();
std::string cpu_features_string();

}  // namespace sieve
