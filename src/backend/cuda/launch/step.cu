// Dispatch of the fused sparse decode step: kv dtype x head_dim, fp8 e4m3 sketch keys with
// d_s 16 (6 instances; other sketch formats run the separate kernels). A cooperative launch
// of as many CTAs as fit on the device at once, split evenly over the sequences.
#include "backend/cuda/kernels/sparse_step.cuh"
#include "backend/cuda/launch/launch_util.cuh"

#include <algorithm>

namespace sieve::cuda {
namespace {

template <class T, int D>
cudaError_t run(step_params p, const launch_cfg& lc) {
  using C = decode_cfg<D, false>;
  auto* kern = sparse_step_kernel<T, D, __nv_fp8_e4m3, 16>;
  static const cudaError_t attr = raise_smem(kern, C::smem_bytes);
  if (attr != cudaSuccess) return attr;
  static int per_sm = -1, n_sm = 0;
  if (per_sm < 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, step_threads, C::smem_bytes);
    if (e != cudaSuccess) return e;
    per_sm = std::min(per_sm, step_max_ctas_per_sm);
  }
  const int max_ctas = per_sm * n_sm;
  if (p.batch <= 0 || max_ctas < p.batch) return cudaErrorInvalidConfiguration;
  p.ctas_per_seq = max_ctas / p.batch;
  p.smem_scores = C::smem_bytes / 4;
  p.slot_words = step_slot_words(n_sm);
  // per-CTA buffers: uncached scores need 3 words of shared memory per 32 scores
  const int64_t chunk =
      (static_cast<int64_t>(std::max(p.max_len, 1)) + p.ctas_per_seq - 1) / p.ctas_per_seq + 16;
  if (chunk > static_cast<int64_t>(p.smem_scores) * 32 / 3) return cudaErrorLaunchOutOfResources;
  return launch_cooperative(kern, dim3(p.ctas_per_seq * p.batch), dim3(step_threads), C::smem_bytes,
                            lc.stream, p);
}

template <class T>
cudaError_t by_dim(const step_params& p, const launch_cfg& lc) {
  switch (p.attend.kv.head_dim) {
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

cudaError_t launch_sparse_step(const step_params& p, const launch_cfg& lc) {
  if (p.sk.type != dtype::fp8_e4m3 || p.sk.dim != 16) return cudaErrorInvalidValue;
  if (p.attend.kv.type == dtype::bf16) return by_dim<__nv_bfloat16>(p, lc);
  if (p.attend.kv.type == dtype::f16) return by_dim<__half>(p, lc);
  return cudaErrorInvalidValue;
}

cudaError_t launch_barrier_probe(uint32_t* ws, int n_barriers, int ctas_per_sm,
                                 cudaStream_t stream) {
  int dev = 0, n_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  return launch_cooperative(barrier_probe_kernel, dim3(ctas_per_sm * n_sm), dim3(step_threads), 0,
                            stream, ws, n_barriers);
}

int64_t step_workspace_bytes(int batch, int n_sm) {
  return step_ws_words(batch, n_sm) * 4;
}

int64_t step_workspace_hist_word(int b, int n_sm) {
  return step_ws_words(b, n_sm);  // sequence b's block follows the b blocks before it
}

}  // namespace sieve::cuda
