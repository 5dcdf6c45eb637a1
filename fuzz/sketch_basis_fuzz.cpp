// libFuzzer target for sketch-basis files (src/sparse/sketch_basis.cpp): a basis that loads
// has arrays of exactly the sizes its shape implies, so matrix() stays inside them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "sparse/sketch_basis.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = sieve::load_sketch_basis(sieve::fuzz::scratch_file(text));
  if (!r) {
    sieve::fuzz::check_message(r.message());
    return 0;
  }
  const sieve::SketchBasis& b = *r;
  if (b.n_layer <= 0 || b.n_kv_head <= 0 || b.head_dim <= 0 || b.dim <= 0 || b.dim > b.head_dim)
    __builtin_trap();
  if (b.fitted.size() != static_cast<size_t>(b.n_layer)) __builtin_trap();
  volatile float sink = 0;
  for (int32_t l = 0; l < b.n_layer; ++l) {
    if (!b.fitted[l]) continue;
    for (int32_t h = 0; h < b.n_kv_head; ++h) {
      const float* m = b.matrix(l, h);
      sink = sink + m[0] + m[static_cast<size_t>(b.head_dim) * b.dim - 1];
    }
  }
  (void)sink;
  // Saving and loading again gives the same basis.
  const std::string path = sieve::fuzz::scratch_file("");
  if (!sieve::save_sketch_basis(b, path)) __builtin_trap();
  auto again = sieve::load_sketch_basis(path);
  if (!again || again->p != b.p || again->fitted != b.fitted) __builtin_trap();
  return 0;
}
