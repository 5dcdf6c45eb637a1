#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>

namespace sieve {

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    // clang 14 has no __builtin_cpu_supports("f16c"): read CPUID leaf 1, ECX bit 29.
    unsigned a = 0, b = 0, cx = 0, d = 0;
    c.f16c = __get_cpuid(1, &a, &b, &cx, &d) && (cx & bit_F16C);
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
    return c;
  }();
  return f;
}

bool use_avx2() {
  static const bool v = [] {
    const char* env = std::getenv("SIEVE_SIMD");
    if (env && std::strcmp(env, "scalar") == 0) return false;
    const CpuFeatures& c = cpu_features();
    return c.avx2 && c.fma && c.f16c;
  }();
  return v;
}

std::string cpu_features_string() {
  const CpuFeatures& c = cpu_features();
  std::string s;
  auto add = [&s](bool on, const char* n) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += n;
  };
  add(c.avx2, "avx2");
  add(c.fma, "fma");
  add(c.f16c, "f16c");
  add(c.avx512f, "avx512f");
  add(c.avx512bw, "avx512bw");
  add(c.avx512vnni, "avx512vnni");
  return s.empty() ? "none" : s;
}

}  // namespace sieve
