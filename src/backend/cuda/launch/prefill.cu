// Dispatch of the prefill-chunk attention (dtype x head_dim x rows per CTA) and its merge,
// and the split-K count that fills the device.
#include "backend/cuda/kernels/attn_prefill.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {
namespace {

// 128 rows per CTA unless p.tile_rows = 64 forces one m-tile on 4 warps: two m-tiles on 4
// warps up to D = 128, one m-tile on 8 warps at D = 256.
bool rows128(const prefill_params& p) {
  return p.tile_rows != 64;
}

template <class T, int D, int MT, int W>
cudaError_t run(const prefill_params& p, const launch_cfg& lc) {
  using C = prefill_cfg<D, MT, W>;
  static const cudaError_t attr = raise_smem(prefill_kernel<T, D, MT, W>, C::smem_bytes);
  if (attr != cudaSuccess) return attr;
  const int G = p.n_q_heads / p.kv.n_kv_heads;
  const int rblocks = ceil_div(p.max_q * G, C::rows);
  const dim3 grid(rblocks * p.n_splits, p.kv.n_kv_heads, p.kv.pages.batch);
  cudaError_t e =
      launch_kernel(prefill_kernel<T, D, MT, W>, grid, dim3(C::threads), C::smem_bytes, lc, p);
  if (e != cudaSuccess || p.n_splits == 1) return e;
  return launch_kernel(prefill_merge_kernel<T>, dim3(p.total_q * p.n_q_heads),
                       dim3(D < 128 ? D : 128), 0, lc, p, D);
}

// CTAs of one instance resident per SM (0 when the query fails).
template <class T, int D, int MT, int W>
int resident() {
  using C = prefill_cfg<D, MT, W>;
  static const int n = [] {
    if (raise_smem(prefill_kernel<T, D, MT, W>, C::smem_bytes) != cudaSuccess) return 0;
    int k = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k, prefill_kernel<T, D, MT, W>, C::threads,
                                                      C::smem_bytes) != cudaSuccess)
      return 0;
    return k;
  }();
  return n;
}

// f.template operator()<T, D, MT, W>() for the instance p selects; `fallback` when none does.
template <class T, class R, class F>
R by_shape(const prefill_params& p, R fallback, F&& f) {
  const bool big = rows128(p);
  switch (p.kv.head_dim) {
    case 64:
      return big ? f.template operator()<T, 64, 2, 4>() : f.template operator()<T, 64, 1, 4>();
    case 128:
      return big ? f.template operator()<T, 128, 2, 4>() : f.template operator()<T, 128, 1, 4>();
    case 256:
      return big ? f.template operator()<T, 256, 1, 8>() : f.template operator()<T, 256, 1, 4>();
    default:
      return fallback;
  }
}

template <class R, class F>
R by_type(const prefill_params& p, R fallback, F&& f) {
  if (p.kv.type == dtype::bf16) return by_shape<__nv_bfloat16>(p, fallback, f);
  if (p.kv.type == dtype::f16) return by_shape<__half>(p, fallback, f);
  return fallback;
}

}  // namespace

cudaError_t launch_prefill(const prefill_params& p, const launch_cfg& lc) {
  return by_type(p, cudaErrorInvalidValue,
                 [&]<class T, int D, int MT, int W>() { return run<T, D, MT, W>(p, lc); });
}

int prefill_rows_per_cta(const prefill_params& p) {
  return rows128(p) ? 128 : 64;
}

int prefill_resident_ctas(const prefill_params& p) {
  return by_type(p, 0, [&]<class T, int D, int MT, int W>() { return resident<T, D, MT, W>(); });
}

}  // namespace sieve::cuda
