// GGUF v3 reader: memory-maps a file and validates every field before anything uses it.
// Every error names the field and the byte offset at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"
#include "core/result.h"

namespace sieve {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars are decoded; strings and arrays point into the mapping.
struct GgufValue {
  GgufValueType type;
  GgufValueType elem_type;        // for ARRAY
  uint64_t n_elems = 0;           // for ARRAY
  const uint8_t* data = nullptr;  // ARRAY payload / STRING bytes, inside the mapping
  uint64_t u = 0;                 // unsigned integers and BOOL
  int64_t i = 0;                  // signed integers
  double f = 0;                   // floats
  std::string_view str;           // STRING
  uint64_t offset = 0;            // byte offset of the value in the file (for messages)
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension (row length)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_bytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // The reader accepts every known ggml type so `sieve inspect` can list any file; types Sieve
  // cannot compute with (IQ*, Q2_K, ...) are flagged here for the model loader to reject.
  bool type_supported() const {
    const TypeInfo* ti = type_info(type);
    return ti != nullptr && ti->supported;
  }
};

class GgufFile {
 public:
  // Opens and validates a file (mmap). Missing file, truncation, bad magic/version, bad
  // counts, string lengths, element types, dims, tensor types, offsets, alignment and
  // bounds are all errors naming field and byte offset.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Same validation over a caller-owned buffer (fuzzing, tests). The buffer must outlive it.
  static Result<std::unique_ptr<GgufFile>> from_memory(const uint8_t* data, size_t size);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const;
  uint32_t version() const;
  uint64_t file_size() const;
  uint32_t alignment() const;
  uint64_t data_offset() const;  // start of the tensor data section

  const std::vector<GgufKv>& kvs() const;
  const GgufValue* find(std::string_view key) const;

  // Typed access; nullopt when the key is absent or has an incompatible type.
  // get_uint/get_int accept any integer type whose value fits; get_float accepts F32/F64.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  // Arrays: nullopt unless the key is an ARRAY of the requested element type.
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
  // Any integer element type, converted; nullopt on overflow.
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;

 private:
  GgufFile();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Human-readable dump for `sieve inspect`: header, metadata (long arrays abbreviated),
// tensor table (name, type, dims, offset, bytes) and totals.
std::string gguf_describe(const GgufFile& f, bool show_all_arrays = false);

}  // namespace sieve
