// Tensor element types as numbered in GGUF (ggml_type ids) and their block geometry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sieve {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Ids a GGUF file may carry at all (ggml's GGML_TYPE_COUNT at the time of writing).
constexpr uint32_t kGgmlTypeCount = 43;

struct TypeInfo {
  std::string_view name;
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
  bool supported;      // Sieve can compute with it (dequantize + dot)
};

// Geometry of a type id; nullptr for ids that are unknown or removed (4, 5, 31-33, 36-38).
// Known-but-unsupported types (IQ*, Q2_K, ...) have supported == false.
const TypeInfo* type_info(uint32_t id);
inline const TypeInfo* type_info(GgmlType t) {
  return type_info(static_cast<uint32_t>(t));
}

// Bytes of a row of n elements (n must be a multiple of the block size).
inline int64_t row_bytes(GgmlType t, int64_t n) {
  const TypeInfo* ti = type_info(t);
  return n / ti->block_size * ti->type_size;
}

std::string_view type_name(GgmlType t);

}  // namespace sieve
