// Byte layouts of the ggml block formats (shared reference §2). The structs mirror the file
// bytes exactly (static_asserts below), so a tensor's data can be viewed as an array of them.
// Every block size is even and GGUF aligns tensor data, so the u16 fields are always aligned.
#pragma once

#include <cstdint>

namespace sieve::qblock {

constexpr int kQK = 32;    // elements of a legacy block (Q4_0 .. Q8_1)
constexpr int kQKK = 256;  // elements of a K-quant super-block

// x = (nib - 8) * d; byte j holds element j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// x = nib * d + m
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
// x = ((nib | bit4) - 16) * d; bit4 of element i is bit i of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// x = (nib | bit4) * d + m
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// x = qs[i] * d
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
// Activation side only: s = fp16(d_f32 * sum(qs)) makes the Q4_1/Q5_1 min term one multiply.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};
// 8 sub-blocks of 32 with 6-bit scales/mins packed in scales[12] (§2.4).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// d is LAST; scales are signed, one per 16 elements.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// Activation side of the K-quant dot products: d is f32 (not fp16), bsums are sums of 16 qs.
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block (§2.4).
inline void scale_min_k4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace sieve::qblock
