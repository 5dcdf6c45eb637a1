// A small GGUF writer for tests: builds valid files and records where every field landed so a
// test can corrupt exactly one of them. Test-only (header-only, never linked into the library).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"
#include "gguf/gguf_file.h"

namespace sieve::testing {

inline void put_u32(std::vector<uint8_t>& b, uint64_t at, uint32_t v) {
  std::memcpy(b.data() + at, &v, 4);
}
inline void put_u64(std::vector<uint8_t>& b, uint64_t at, uint64_t v) {
  std::memcpy(b.data() + at, &v, 8);
}

class GgufWriter {
 public:
  struct KvLayout {
    uint64_t start = 0;     // the key's length field
    uint64_t type_at = 0;   // the value type
    uint64_t value_at = 0;  // the value (for arrays: the element type)
  };
  struct TensorLayout {
    uint64_t start = 0;  // the name's length field
    uint64_t n_dims_at = 0;
    uint64_t dims_at = 0;  // ne[0]; ne[d] is at dims_at + 8 * d
    uint64_t type_at = 0;
    uint64_t offset_at = 0;
  };
  struct Layout {
    std::vector<KvLayout> kvs;
    std::vector<TensorLayout> tensors;
    uint64_t data_offset = 0;
  };

  uint32_t version = 3;
  uint32_t magic = 0x46554747;  // "GGUF"
  // Where tensor data is placed. Set general.alignment yourself (kv_u32) when it is not 32.
  uint32_t alignment = 32;

  // Raw value: `payload` is everything after the value type field.
  void kv_raw(std::string key, uint32_t type, std::vector<uint8_t> payload) {
    kvs_.push_back({std::move(key), type, std::move(payload)});
  }
  template <class T>
  void kv_scalar(std::string key, GgufValueType type, T v) {
    std::vector<uint8_t> p(sizeof(T));
    std::memcpy(p.data(), &v, sizeof(T));
    kv_raw(std::move(key), static_cast<uint32_t>(type), std::move(p));
  }
  void kv_u8(std::string k, uint8_t v) { kv_scalar(std::move(k), GgufValueType::UINT8, v); }
  void kv_i8(std::string k, int8_t v) { kv_scalar(std::move(k), GgufValueType::INT8, v); }
  void kv_u16(std::string k, uint16_t v) { kv_scalar(std::move(k), GgufValueType::UINT16, v); }
  void kv_i16(std::string k, int16_t v) { kv_scalar(std::move(k), GgufValueType::INT16, v); }
  void kv_u32(std::string k, uint32_t v) { kv_scalar(std::move(k), GgufValueType::UINT32, v); }
  void kv_i32(std::string k, int32_t v) { kv_scalar(std::move(k), GgufValueType::INT32, v); }
  void kv_f32(std::string k, float v) { kv_scalar(std::move(k), GgufValueType::FLOAT32, v); }
  void kv_bool(std::string k, bool v) {
    kv_scalar(std::move(k), GgufValueType::BOOL, static_cast<uint8_t>(v));
  }
  void kv_u64(std::string k, uint64_t v) { kv_scalar(std::move(k), GgufValueType::UINT64, v); }
  void kv_i64(std::string k, int64_t v) { kv_scalar(std::move(k), GgufValueType::INT64, v); }
  void kv_f64(std::string k, double v) { kv_scalar(std::move(k), GgufValueType::FLOAT64, v); }
  void kv_string(std::string k, std::string_view v) {
    std::vector<uint8_t> p;
    append_string(p, v);
    kv_raw(std::move(k), static_cast<uint32_t>(GgufValueType::STRING), std::move(p));
  }
  template <class T>
  void kv_array(std::string k, GgufValueType elem, const std::vector<T>& vals) {
    std::vector<uint8_t> p;
    append_pod(p, static_cast<uint32_t>(elem));
    append_pod(p, static_cast<uint64_t>(vals.size()));
    for (const T& v : vals) append_pod(p, v);
    kv_raw(std::move(k), static_cast<uint32_t>(GgufValueType::ARRAY), std::move(p));
  }
  void kv_string_array(std::string k, const std::vector<std::string>& vals) {
    std::vector<uint8_t> p;
    append_pod(p, static_cast<uint32_t>(GgufValueType::STRING));
    append_pod(p, static_cast<uint64_t>(vals.size()));
    for (const auto& v : vals) append_string(p, v);
    kv_raw(std::move(k), static_cast<uint32_t>(GgufValueType::ARRAY), std::move(p));
  }

  // dims in GGUF order (dims[0] = row length). Data is filled with a pattern that
  // expected_byte() reproduces. Without `offset` tensors are packed in order, aligned.
  void tensor(std::string name, GgmlType type, std::vector<int64_t> dims,
              std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({std::move(name), type, std::move(dims), offset});
  }

  static uint8_t expected_byte(size_t tensor_index, uint64_t i) {
    return static_cast<uint8_t>((i * 31 + tensor_index * 7 + 1) & 0xff);
  }

  // Bytes the tensor's data takes, or 0 when that is absurd (tests of bogus shapes): such
  // tensors get no data in the file.
  static uint64_t n_bytes(GgmlType type, const std::vector<int64_t>& dims) {
    const TypeInfo* ti = type_info(type);
    if (ti == nullptr || dims.empty()) return 0;
    uint64_t n = 0;
    if (dims[0] <= 0 || __builtin_mul_overflow(static_cast<uint64_t>(dims[0] / ti->block_size),
                                               static_cast<uint64_t>(ti->type_size), &n)) {
      return 0;
    }
    for (size_t d = 1; d < dims.size(); ++d) {
      if (dims[d] <= 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(dims[d]), &n)) return 0;
    }
    return n > (uint64_t{1} << 24) ? 0 : n;
  }

  // The file ends exactly where the last tensor's data ends (no trailing padding), so cutting
  // any byte off makes it invalid.
  std::vector<uint8_t> build(Layout* layout = nullptr) const {
    Layout lay;
    std::vector<uint8_t> b;
    append_pod(b, magic);
    append_pod(b, version);
    append_pod(b, static_cast<uint64_t>(tensors_.size()));
    append_pod(b, static_cast<uint64_t>(kvs_.size()));
    for (const Kv& kv : kvs_) {
      KvLayout kl;
      kl.start = b.size();
      append_string(b, kv.key);
      kl.type_at = b.size();
      append_pod(b, kv.type);
      kl.value_at = b.size();
      b.insert(b.end(), kv.payload.begin(), kv.payload.end());
      lay.kvs.push_back(kl);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    uint64_t data_end = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t off = t.offset ? *t.offset : next;
      const uint64_t nb = n_bytes(t.type, t.dims);
      offsets.push_back(off);
      next = pad(off + nb);
      data_end = std::max(data_end, off + nb);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      TensorLayout tl;
      tl.start = b.size();
      append_string(b, t.name);
      tl.n_dims_at = b.size();
      append_pod(b, static_cast<uint32_t>(t.dims.size()));
      tl.dims_at = b.size();
      for (int64_t d : t.dims) append_pod(b, d);
      tl.type_at = b.size();
      append_pod(b, static_cast<uint32_t>(t.type));
      tl.offset_at = b.size();
      append_pod(b, offsets[i]);
      lay.tensors.push_back(tl);
    }
    if (!tensors_.empty()) b.resize(pad(b.size()), 0);
    lay.data_offset = b.size();
    b.resize(b.size() + data_end, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const uint64_t nb = n_bytes(tensors_[i].type, tensors_[i].dims);
      for (uint64_t j = 0; j < nb; ++j) b[lay.data_offset + offsets[i] + j] = expected_byte(i, j);
    }
    if (layout) *layout = std::move(lay);
    return b;
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::optional<uint64_t> offset;
  };

  uint64_t pad(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  template <class T>
  static void append_pod(std::vector<uint8_t>& b, const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  static void append_string(std::vector<uint8_t>& b, std::string_view s) {
    append_pod(b, static_cast<uint64_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }

  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace sieve::testing
