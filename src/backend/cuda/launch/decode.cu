// Dispatch of decode attention / exact scoring: dtype x head_dim x mode (12 instances).
#include "backend/cuda/kernels/attn_decode.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {
namespace {

template <class T, int D, bool SCORE>
cudaError_t run(const decode_params& p, const launch_cfg& lc) {
  using C = decode_cfg<D, SCORE>;
  static const cudaError_t attr = raise_smem(decode_kernel<T, D, SCORE>, C::smem_bytes);
  if (attr != cudaSuccess) return attr;
  const int n_kv = p.kv.n_kv_heads;
  const dim3 grid(p.n_splits, n_kv, p.kv.pages.batch);
  return launch_kernel(decode_kernel<T, D, SCORE>, grid, dim3(C::threads), C::smem_bytes, lc, p);
}

template <class T, bool SCORE>
cudaError_t by_dim(const decode_params& p, const launch_cfg& lc) {
  switch (p.kv.head_dim) {
    case 64:
      return run<T, 64, SCORE>(p, lc);
    case 128:
      return run<T, 128, SCORE>(p, lc);
    case 256:
      return run<T, 256, SCORE>(p, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_decode(const decode_params& p, bool score_mode, const launch_cfg& lc) {
  if (p.kv.type == dtype::bf16)
    return score_mode ? by_dim<__nv_bfloat16, true>(p, lc) : by_dim<__nv_bfloat16, false>(p, lc);
  if (p.kv.type == dtype::f16)
    return score_mode ? by_dim<__half, true>(p, lc) : by_dim<__half, false>(p, lc);
  return cudaErrorInvalidValue;
}

}  // namespace sieve::cuda
