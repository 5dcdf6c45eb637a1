// IEEE binary16 and bfloat16 conversions (portable, exact; subnormals included), and the
// checked double -> float narrowing the file loaders use.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace sieve {

// `d` as a float, false when it is not finite or past float's range (there a cast is
// undefined behaviour): numbers read from JSON files arrive as doubles.
inline bool narrow_to_float(double d, float& out) {
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) return false;
  out = static_cast<float>(d);
  return true;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest even; overflow to inf; NaN stays NaN.
inline uint16_t f32_to_fp16(float f) {
  uint32_t x = f32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (x < 0x38800000u) {                                               // subnormal or zero
    const float v = f32_from_bits(x) * 16777216.0f;                    // * 2^24
    uint32_t m = static_cast<uint32_t>(v);
    const float rem = v - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant_odd = (x >> 13) & 1u;
  x += 0xfffu + mant_odd;
  return static_cast<uint16_t>(sign | ((x - 0x38000000u) >> 13));
}

inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // quiet NaN
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

}  // namespace sieve
