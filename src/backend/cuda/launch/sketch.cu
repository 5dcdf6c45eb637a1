// Dispatch of sketch scoring (key dtype x d_s: 9 instances) and the soft vote.
#include "backend/cuda/kernels/score_sketch.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {
namespace {

template <class KT, int DS>
cudaError_t run(const sketch_score_params& p, const launch_cfg& lc) {
  const dim3 grid(p.n_chunks, p.sk.n_sk_heads, p.sk.pages.batch);
  return launch_kernel(sketch_score_kernel<KT, DS>, grid, dim3(sk_threads), 0, lc, p);
}

template <class KT>
cudaError_t by_dim(const sketch_score_params& p, const launch_cfg& lc) {
  switch (p.sk.dim) {
    case 8:
      return run<KT, 8>(p, lc);
    case 16:
      return run<KT, 16>(p, lc);
    case 32:
      return run<KT, 32>(p, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_sketch_score(const sketch_score_params& p, const launch_cfg& lc) {
  if (p.mode == sketch_mode::raw && p.zero_ws != nullptr) {
    const size_t rows = static_cast<size_t>(p.sk.pages.batch) * p.sk.n_sk_heads;
    const cudaError_t e = cudaMemsetAsync(p.zero_ws, 0, rows * p.zero_bytes, lc.stream);
    if (e != cudaSuccess) return e;
  }
  switch (p.sk.type) {
    case dtype::bf16:
      return by_dim<__nv_bfloat16>(p, lc);
    case dtype::fp8_e4m3:
      return by_dim<__nv_fp8_e4m3>(p, lc);
    case dtype::int8:
      return by_dim<int8_t>(p, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_soft_vote(const soft_vote_params& p, int grid_x, const launch_cfg& lc) {
  return launch_kernel(soft_vote_kernel, dim3(grid_x, p.n_rows / p.fold), dim3(sel_threads), 0, lc,
                       p);
}

}  // namespace sieve::cuda
