// Dispatch of the fused sparse decode step, fp8 e4m3 sketch keys with d_s 16 (other sketch
// formats run the separate kernels):
// - cluster (step_cluster.cuh): one thread-block cluster of 16 CTAs (8 where 16 cannot be
//   placed) per sequence, when the rows fit the cluster's shared memory (sm_90);
// - grid (sparse_step.cuh): kv dtype x head_dim instances, a cooperative launch of as many
//   CTAs as fit on the device at once, split evenly over the sequences; the only mode that
//   can run the attention inside the launch (attend_chained = false).
#include "backend/cuda/kernels/step_cluster.cuh"
#include "backend/cuda/launch/launch_util.cuh"

#include <algorithm>

namespace sieve::cuda {
namespace {

// Per cluster-kernel instance (C CTAs per cluster; TP: top-p budgets): the shared memory a CTA
// may take, set once.
template <int C, bool TP>
struct cluster_kernel {
  static constexpr auto kern = step_cluster_kernel<__nv_fp8_e4m3, 16, C, TP>;
  int dyn_max = -1;     // dynamic shared memory limit per CTA (bytes); 0: cannot launch
  int placed_dyn = -1;  // the dynamic size last checked for placement, and the answer:
  int active = 0;       //   clusters resident at once (0: none can be placed)
  cudaError_t init() {
    if (dyn_max >= 0) return cudaSuccess;
    int dev = 0, cluster_ok = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cluster_ok, cudaDevAttrClusterLaunch, dev);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaFuncAttributes fa{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, kern);
    if (e != cudaSuccess) return e;
    dyn_max = cluster_ok ? optin - static_cast<int>(fa.sharedSizeBytes) : 0;
    if (dyn_max > 0)
      e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max);
    if (e == cudaSuccess && C > 8)
      e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) dyn_max = 0;
    cudaGetLastError();  // an unsupported attribute only rules the instance out
    return cudaSuccess;
  }
};

// Sizes the cluster step for C CTAs per sequence; false when the rows do not fit.
template <int C>
bool cluster_fits(step_params& p, int dyn_max, int& dyn) {
  const int cap = ceil_div(ceil_div(std::max(p.max_len, 1), C), 16) * 16;
  const int64_t slab_bytes = 3 * static_cast<int64_t>(ceil_div(cap, 32)) * 4;
  int64_t extra = slab_bytes;
  p.cl_keys = 0;
  if (p.score) {  // the largest key stage (x cl_ring in flight) that fits
    const int64_t pages = static_cast<int64_t>(cl_page_words(cap, p.sk.pages.page_shift)) * 4;
    for (int keys = 4 * cl_threads; keys >= cl_threads; keys /= 2) {
      const int64_t need = pages + static_cast<int64_t>(cl_ring) * keys * 16;
      if (static_cast<int64_t>(cap) * 4 + std::max(need, slab_bytes) <= dyn_max &&
          (keys == cl_threads || cap > (cl_ring - 1) * keys)) {
        p.cl_keys = keys;
        extra = std::max(need, slab_bytes);
        break;
      }
    }
    if (p.cl_keys == 0) return false;
  }
  const int64_t total = static_cast<int64_t>(cap) * 4 + extra;
  if (total > dyn_max) return false;
  p.smem_scores = cap;
  dyn = static_cast<int>(total);
  return true;
}

cudaLaunchConfig_t cluster_cfg(int C, int batch, int dyn, const launch_cfg& lc,
                               cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(C * batch);
  cfg.blockDim = dim3(cl_threads);
  cfg.dynamicSmemBytes = dyn;
  cfg.stream = lc.stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = C;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = lc.pdl ? 2 : 1;
  return cfg;
}

// How many clusters of C CTAs can be resident at once for p (0: p cannot run so); sets p's
// launcher fields and the shared memory.
template <int C, bool TP>
int cluster_try(step_params& p, int& dyn) {
  static cluster_kernel<C, TP> k;
  if (k.init() != cudaSuccess || k.dyn_max <= 0 || !cluster_fits<C>(p, k.dyn_max, dyn)) return 0;
  if (dyn != k.placed_dyn) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = cluster_cfg(C, 1, dyn, launch_cfg{}, attr);
    int clusters = 0;
    const cudaError_t e =
        cudaOccupancyMaxActiveClusters(&clusters, cluster_kernel<C, TP>::kern, &cfg);
    if (e != cudaSuccess) cudaGetLastError();
    k.placed_dyn = dyn;
    k.active = e == cudaSuccess ? clusters : 0;
  }
  return k.active;
}

// When scoring, the automatic choice takes the cluster while each CTA's chunk holds at most
// this many keys; selection alone takes it wherever the rows fit. Measured on the H200
// (bench/RESULTS-cuda.md, run 8, Llama shape): the cluster selects faster at every length
// that fits (B = 1: 16.5 vs 25.0 us at 128K, 24.5 vs 29.6 at 256K) and scores + selects
// faster up to 16K keys per CTA (the step at 128K: 44.2 vs 50.2 us at B = 1, 77.6 vs 85.8 at
// B = 8 with 8-CTA clusters), about even at 256K (57.0 vs 55.8), slower beyond: 16 SMs read
// the sketch keys slower than the whole grid does (512K: 75.9 vs 57.3).
constexpr int cl_auto_max_score_chunk = 16384;

// The cluster size the step runs with, 0 for the grid. Selection alone: 16 CTAs per sequence
// where they fit (faster than 8 even when not all clusters are resident at once). Scoring:
// 16 when a cluster per sequence is resident at once, else 8 if those are (B = 8 at 128K:
// 16-CTA clusters in two waves 44.5 us, 8-CTA clusters 37.1 us for score + select).
int choose(step_params& p, int& dyn) {
  if (p.sync == step_sync::grid || (p.attend_on && !p.attend_chained)) return 0;
  const bool need_cluster = p.sync == step_sync::cluster || p.budget.top_p < 1.f;
  step_params p16 = p, p8 = p;
  int dyn16 = 0, dyn8 = 0;
  const bool tp = p.budget.top_p < 1.f;
  const int a16 = tp ? cluster_try<16, true>(p16, dyn16) : cluster_try<16, false>(p16, dyn16);
  const bool try8 = a16 == 0 || (p.score && a16 < p.batch);
  const int a8 = !try8 ? 0 : tp ? cluster_try<8, true>(p8, dyn8) : cluster_try<8, false>(p8, dyn8);
  int C = 0;
  if (a16 > 0 && (!p.score || a16 >= p.batch))
    C = 16;
  else if (a8 >= p.batch)
    C = 8;
  else
    C = a16 > 0 ? 16 : a8 > 0 ? 8 : 0;
  if (C == 0) return 0;
  p = C == 16 ? p16 : p8;
  dyn = C == 16 ? dyn16 : dyn8;
  const bool auto_ok = !p.score || p.smem_scores <= cl_auto_max_score_chunk;
  return need_cluster || auto_ok ? C : 0;
}

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
  step_params q = p;
  int dyn = 0;
  const int C = choose(q, dyn);
  if (C > 0) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = cluster_cfg(C, q.batch, dyn, lc, attr);
    if (q.budget.top_p < 1.f)
      return C == 16 ? cudaLaunchKernelEx(&cfg, cluster_kernel<16, true>::kern, q)
                     : cudaLaunchKernelEx(&cfg, cluster_kernel<8, true>::kern, q);
    return C == 16 ? cudaLaunchKernelEx(&cfg, cluster_kernel<16, false>::kern, q)
                   : cudaLaunchKernelEx(&cfg, cluster_kernel<8, false>::kern, q);
  }
  if (p.sync == step_sync::cluster || p.budget.top_p < 1.f) return cudaErrorNotSupported;
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

step_sync launch_step_choice(const step_params& p) {
  step_params q = p;
  int dyn = 0;
  return choose(q, dyn) > 0 ? step_sync::cluster : step_sync::grid;
}

int64_t step_workspace_bytes(int batch, int n_sm) {
  return step_ws_words(batch, n_sm) * 4;
}

int64_t step_workspace_hist_word(int b, int n_sm) {
  return step_ws_words(b, n_sm);  // sequence b's block follows the b blocks before it
}

}  // namespace sieve::cuda
