// libFuzzer target for head-plan files (src/sparse/head_plan.cpp): a plan that parses must
// pass validation, answer every accessor inside its arrays, and survive a JSON round trip.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "sparse/head_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = sieve::head_plan_from_json(text);
  if (!r) {
    sieve::fuzz::check_message(r.message());
    return 0;
  }
  const sieve::HeadPlan& p = *r;
  if (!sieve::validate_head_plan(p)) __builtin_trap();
  volatile double sink = p.retrieval_share() + p.n_kv_full() + p.n_retrieval();
  for (int32_t l = 0; l < p.shape.n_layer; ++l) {
    sink = sink + p.n_retrieval(l);
    for (int32_t h = 0; h < p.shape.n_head; ++h) {
      sink = sink + p.is_retrieval(l, h) + p.score(l, h);
      if (const float* q = p.indexer_q(l, h))
        sink = sink + q[0] + q[p.shape.head_dim * p.d_idx - 1];
    }
    for (int32_t g = 0; g < p.shape.n_head_kv; ++g) {
      sink = sink + p.kv_group_full(l, g);
      if (const float* k = p.indexer_k(l, g))
        sink = sink + k[0] + k[p.shape.head_dim * p.d_idx - 1];
    }
  }
  (void)sink;
  auto again = sieve::head_plan_from_json(sieve::head_plan_to_json(p));
  if (!again) {
    std::fprintf(stderr, "round trip: %s\n", again.message().c_str());
    __builtin_trap();
  }
  if (!(again->shape == p.shape) || again->retrieval != p.retrieval) __builtin_trap();
  // The loader path the CLI takes (the file read, then the shape check).
  auto loaded = sieve::load_head_plan(sieve::fuzz::scratch_file(text), &p.shape);
  if (!loaded) __builtin_trap();
  return 0;
}
