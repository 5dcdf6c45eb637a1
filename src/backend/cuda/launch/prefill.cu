// Dispatch of the prefill-chunk attention (dtype x head_dim: 6 instances) and its merge.
#include "backend/cuda/kernels/attn_prefill.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {
namespace {

template <class T, int D>
cudaError_t run(const prefill_params& p, const launch_cfg& lc) {
  using C = prefill_cfg<D>;
  static const cudaError_t attr = raise_smem(prefill_kernel<T, D>, C::smem_bytes);
  if (attr != cudaSuccess) return attr;
  const int G = p.n_q_heads / p.kv.n_kv_heads;
  const int rblocks = ceil_div(p.max_q * G, C::rows);
  const dim3 grid(rblocks * p.n_splits, p.kv.n_kv_heads, p.kv.pages.batch);
  cudaError_t e = launch_kernel(prefill_kernel<T, D>, grid, dim3(C::threads), C::smem_bytes, lc, p);
  if (e != cudaSuccess || p.n_splits == 1) return e;
  return launch_kernel(prefill_merge_kernel<T>, dim3(p.total_q * p.n_q_heads),
                       dim3(D < 128 ? D : 128), 0, lc, p, D);
}

template <class T>
cudaError_t by_dim(const prefill_params& p, const launch_cfg& lc) {
  switch (p.kv.head_dim) {
    case 64:
      return run<T, 64>(p, lc);
    case 128:
      return run<T, 128>(p, lc);
    case 256:
      return run<T, 256>(p, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_prefill(const prefill_params& p, const launch_cfg& lc) {
  if (p.kv.type == dtype::bf16) return by_dim<__nv_bfloat16>(p, lc);
  if (p.kv.type == dtype::f16) return by_dim<__half>(p, lc);
  return cudaErrorInvalidValue;
}

}  // namespace sieve::cuda
