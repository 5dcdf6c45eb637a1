// Dispatch of KV append (kv dtype x sketch dtype) and the query sketch.
#include "backend/cuda/kernels/kv_append.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {
namespace {

template <class T, class KT>
cudaError_t run(const kv_append_params& p, const launch_cfg& lc) {
  const size_t smem = static_cast<size_t>(p.n_kv_heads) * p.head_dim * 4;
  static const cudaError_t attr = raise_smem(kv_append_kernel<T, KT>, 64 * 1024);
  if (attr != cudaSuccess) return attr;
  return launch_kernel(kv_append_kernel<T, KT>, dim3(p.n_new), dim3(append_threads), smem, lc, p);
}

template <class T>
cudaError_t by_sketch(const kv_append_params& p, const launch_cfg& lc) {
  switch (p.sk_type) {
    case dtype::bf16:
      return run<T, __nv_bfloat16>(p, lc);
    case dtype::fp8_e4m3:
      return run<T, __nv_fp8_e4m3>(p, lc);
    case dtype::int8:
      return run<T, int8_t>(p, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_kv_append(const kv_append_params& p, const launch_cfg& lc) {
  if (p.n_new == 0) return cudaSuccess;
  if (p.type == dtype::bf16) return by_sketch<__nv_bfloat16>(p, lc);
  if (p.type == dtype::f16) return by_sketch<__half>(p, lc);
  return cudaErrorInvalidValue;
}

cudaError_t launch_sketch_query(const sketch_query_params& p, const launch_cfg& lc) {
  const size_t smem = static_cast<size_t>(p.head_dim) * 4;
  return launch_kernel(sketch_query_kernel, dim3(p.n_q_heads, p.batch), dim3(128), smem, lc, p);
}

}  // namespace sieve::cuda
