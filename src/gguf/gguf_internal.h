// Helpers shared by the GGUF parser and gguf_describe(); not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_file.h"

namespace sieve::gguf_detail {

constexpr uint32_t kNumValueTypes = 13;  // GgufValueType ids are 0..12

// Bytes of one fixed-size value; 0 for STRING and ARRAY (variable size).
inline uint64_t fixed_value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
      return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      return 0;
  }
  return 0;
}

inline bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

inline bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
         t == GgufValueType::INT64;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the mapping gives no alignment guarantee
  return v;
}

// Decodes one scalar at p into v.u / v.i / v.f according to v.type (p must hold
// fixed_value_size(v.type) bytes). Integers set both u and i when the value fits the other.
void decode_scalar(const uint8_t* p, GgufValue& v);

// Everything the parser extracts; views point into the caller's buffer.
struct Parsed {
  uint32_t version = 0;
  uint32_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<GgufKv> kvs;
  std::unordered_map<std::string_view, size_t> kv_index;
  std::vector<GgufTensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> tensor_index;
};

// Validates a whole GGUF image [base, base+size); `name` (the path) prefixes every message.
// On error `out` is left partially filled and must be discarded.
Result<void> parse(std::string_view name, const uint8_t* base, uint64_t size, Parsed& out);

// Makes file-supplied bytes safe to print on one line: valid UTF-8 passes through, control
// characters and invalid bytes become escapes (\n, \x1b, ...), quotes and backslashes are
// escaped. Output is cut after max_bytes of input with "..." appended.
std::string escape(std::string_view s, size_t max_bytes = SIZE_MAX);

}  // namespace sieve::gguf_detail
