// libFuzzer target for the GGUF reader: any input must either fail with a message or yield a
// file whose every accessor, description and tensor byte range is safe to use.
#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = sieve::GgufFile::from_memory(data, size);
  if (!r.ok()) {
    // Messages go to a terminal as one line.
    if (r.message().empty() || r.message().find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  const sieve::GgufFile& f = **r;
  volatile uint64_t sink = 0;
  sink = sink + gguf_describe(f, false).size();
  if (size < 4096) sink = sink + gguf_describe(f, true).size();
  for (const sieve::GgufKv& kv : f.kvs()) {
    // Every typed getter on every key: type checks must hold for whatever the file declares.
    if (auto v = f.get_uint(kv.key)) sink = sink + *v;
    if (auto v = f.get_int(kv.key)) sink = sink + static_cast<uint64_t>(*v);
    if (auto v = f.get_float(kv.key)) sink = sink + static_cast<uint64_t>(*v != 0);
    if (auto v = f.get_bool(kv.key)) sink = sink + *v;
    if (auto v = f.get_string(kv.key)) sink = sink + v->size();
    if (auto v = f.get_string_array(kv.key)) {
      for (std::string_view s : *v) sink = sink + s.size() + (s.empty() ? 0 : s.back());
    }
    if (auto v = f.get_f32_array(kv.key)) sink = sink + v->size();
    if (auto v = f.get_int_array(kv.key)) sink = sink + v->size();
    if (f.find(kv.key) != &kv.value) __builtin_trap();
  }
  for (const sieve::GgufTensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    // The first and last byte of every tensor must lie inside the input (ASan checks this).
    const uint8_t* p = f.tensor_data(t);
    if (p < data || p + t.n_bytes > data + size || t.n_bytes == 0) __builtin_trap();
    sink = sink + p[0] + p[t.n_bytes - 1];
    sink = sink + static_cast<uint64_t>(t.n_elements()) + t.type_supported();
  }
  (void)sink;
  return 0;
}
