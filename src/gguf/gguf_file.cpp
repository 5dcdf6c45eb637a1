// GgufFile: owns the mapping (or borrows a caller's buffer) and answers typed queries over
// metadata that gguf_parser.cpp has already validated, so accessors here need no bounds
// checks of their own beyond type checks.
#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "core/assert.h"
#include "gguf/gguf_internal.h"

namespace sieve {

using gguf_detail::load;

struct GgufFile::Impl {
  std::string path;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  void* map = nullptr;  // owned by open(); null when from_memory() borrows the caller's buffer
  size_t map_size = 0;
  gguf_detail::Parsed p;

  ~Impl() {
    if (map != nullptr) munmap(map, map_size);
  }
};

GgufFile::GgufFile() : impl_(std::make_unique<Impl>()) {}
GgufFile::~GgufFile() = default;

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return make_error("gguf: {}: cannot open the file: {}{}", path, std::strerror(e),
                      e == ENOENT ? "; check the path" : "");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("gguf: {}: cannot stat the file: {}", path, std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return make_error("gguf: {}: is a directory, not a GGUF file; pass the path of a .gguf file",
                      path);
  }
  if (!S_ISREG(st.st_mode)) {
    // Devices and FIFOs have no size to validate against (/dev/zero would map forever).
    ::close(fd);
    return make_error(
        "gguf: {}: is not a regular file (a device, FIFO or socket); pass the path of a .gguf file",
        path);
  }
  if (st.st_size <= 0) {
    ::close(fd);
    return make_error("gguf: {}: the file is empty (0 bytes); it is truncated - re-download it",
                      path);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    return make_error("gguf: {}: the file ({} bytes) is too large to map on this host", path, size);
  }
  // MAP_PRIVATE + PROT_READ: the file is never written through the mapping, and pages stay
  // shared with the page cache until (never) touched.
  void* m = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) {
    return make_error("gguf: {}: cannot map {} bytes: {}", path, size, std::strerror(e));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  Impl& im = *f->impl_;
  im.path = path;
  im.map = m;
  im.map_size = static_cast<size_t>(size);
  im.base = static_cast<const uint8_t*>(m);
  im.size = size;
  SIEVE_TRY(gguf_detail::parse(im.path, im.base, im.size, im.p));
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_memory(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  Impl& im = *f->impl_;
  im.path = "<memory>";
  if (data == nullptr && size != 0)
    return make_error("gguf: <memory>: null buffer of {} bytes", size);
  im.base = data;
  im.size = size;
  SIEVE_TRY(gguf_detail::parse(im.path, im.base, im.size, im.p));
  return f;
}

const std::string& GgufFile::path() const {
  return impl_->path;
}
uint32_t GgufFile::version() const {
  return impl_->p.version;
}
uint64_t GgufFile::file_size() const {
  return impl_->size;
}
uint32_t GgufFile::alignment() const {
  return impl_->p.alignment;
}
uint64_t GgufFile::data_offset() const {
  return impl_->p.data_offset;
}
const std::vector<GgufKv>& GgufFile::kvs() const {
  return impl_->p.kvs;
}
const std::vector<GgufTensorInfo>& GgufFile::tensors() const {
  return impl_->p.tensors;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = impl_->p.kv_index.find(key);
  return it == impl_->p.kv_index.end() ? nullptr : &impl_->p.kvs[it->second].value;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->p.tensor_index.find(name);
  return it == impl_->p.tensor_index.end() ? nullptr : &impl_->p.tensors[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  // Infos from this file were bounds-checked when it was opened; anything else is a caller bug.
  const uint64_t data_size = impl_->size - impl_->p.data_offset;
  SIEVE_ASSERT(t.offset <= data_size && t.n_bytes <= data_size - t.offset);
  return impl_->base + impl_->p.data_offset + t.offset;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || !gguf_detail::is_integer_type(v->type)) return std::nullopt;
  if (gguf_detail::is_signed_type(v->type) && v->i < 0) return std::nullopt;
  return v->u;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || !gguf_detail::is_integer_type(v->type)) return std::nullopt;
  if (!gguf_detail::is_signed_type(v->type) &&
      v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufValueType::FLOAT32 && v->type != GgufValueType::FLOAT64) return std::nullopt;
  return v->f;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufValueType::BOOL) return std::nullopt;
  return v->u != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufValueType::STRING) return std::nullopt;
  return v->str;
}

std::optional<std::vector<std::string_view>> GgufFile::get_string_array(
    std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING) {
    return std::nullopt;
  }
  std::vector<std::string_view> out;
  out.reserve(v->n_elems);  // validated: every element occupies at least 8 bytes of the file
  const uint8_t* p = v->data;
  for (uint64_t i = 0; i < v->n_elems; ++i) {
    const uint64_t len = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), len);
    p += 8 + len;
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::FLOAT32) {
    return std::nullopt;
  }
  std::vector<float> out(v->n_elems);
  if (!out.empty()) std::memcpy(out.data(), v->data, out.size() * sizeof(float));
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type != GgufValueType::ARRAY ||
      !gguf_detail::is_integer_type(v->elem_type)) {
    return std::nullopt;
  }
  const uint64_t es = gguf_detail::fixed_value_size(v->elem_type);
  std::vector<int64_t> out;
  out.reserve(v->n_elems);
  GgufValue e{};
  e.type = v->elem_type;
  for (uint64_t i = 0; i < v->n_elems; ++i) {
    gguf_detail::decode_scalar(v->data + i * es, e);
    if (e.type == GgufValueType::UINT64 &&
        e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    out.push_back(e.i);
  }
  return out;
}

}  // namespace sieve
