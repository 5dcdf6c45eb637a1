// The fused step's score + select with one thread-block cluster per sequence (sm_90).
//
// Why: the cooperative step (sparse_step.cuh) spreads a sequence over every SM, so each radix
// level costs a grid barrier (~1.2 us) plus L2 round trips to a global histogram; at 128K and
// one sequence that fixed latency is most of its 27 us. Here the C CTAs of one cluster (16
// where the device allows it) own a sequence: each keeps its chunk's scores in shared memory,
// the level histograms are merged through distributed shared memory (DSMEM) and the phases
// are separated by cluster barriers. Nothing global is written but the index list, so no
// workspace is needed. Rows must fit C x the shared memory of a CTA (~800K at C = 16); the
// launcher (launch/step.cu) falls back to the cooperative step beyond that.
//
//   P0  sketch keys of the chunk -> shared memory through a ring of cp.async stages (each
//       thread scores the keys it copied, so no block barrier per stage), or the given
//       scores; scores cached; level-0 histogram (top 11 key bits) in shared memory
//   L   per level: cluster barrier; CTA r sums bins [r*per, (r+1)*per) over the cluster
//       (reduce-scatter through DSMEM) and their total; cluster barrier; every CTA reads the
//       C slice totals, then the bins of the one slice holding the boundary: the same state
//       in every CTA, so a resolved selection skips the remaining levels uniformly
//   P3  (> T, == T) counts per slab of 32 scores; CTA totals; cluster barrier
//   P4  offsets from the earlier CTAs' totals (DSMEM), ordered positions written out
// It selects exactly what sparse_step_kernel and the separate kernels select (same scores in
// the same order, same tie rule; tests/step_test.cpp).
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/kernels/sparse_step.cuh"

namespace sieve::cuda {

constexpr int cl_threads = 512;
constexpr int cl_warps = cl_threads / 32;
constexpr int cl_ring = 8;  // cp.async stages in flight

__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// Words of the dynamic shared memory after the score cache: page ids of the chunk (scoring),
// rounded to 16 bytes.
__host__ __device__ inline int cl_page_words(int cache_floats, int page_shift) {
  return (((cache_floats >> page_shift) + 2) + 3) & ~3;
}

struct cl_smem {
  uint32_t own[step_bins / 8];  // merged bins this CTA owns (reduce-scatter; C >= 8)
  uint32_t wsum[cl_warps];
  uint32_t own_tot;  // their total
  uint32_t slice, excl, total;
  uint32_t tot[2];  // this CTA's (gt, eq) counts
  scan_smem<cl_warps> scan;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cg = cooperative_groups;

// One radix level over the cluster: the local histograms (s_hist, n_bins = 1 << bits) are
// complete in every CTA. Leaves the same state in every thread of every CTA of the cluster.
template <int C>
__device__ inline void cl_resolve(const cg::cluster_group& cl, const uint32_t* s_hist, cl_smem& cs,
                                  int bits, int rem, bool first, uint32_t k_max, step_state& st) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (1 << bits) / C;  // bins per slice (<= 256)
  const int r = static_cast<int>(cl.block_rank());
  cl.sync();  // every local histogram is complete
  uint32_t mine = 0;
  if (tid < per) {
    uint32_t v[C];
#pragma unroll
    for (int c = 0; c < C; ++c) v[c] = cl.map_shared_rank(s_hist, c)[r * per + tid];
#pragma unroll
    for (int c = 0; c < C; ++c) mine += v[c];
    cs.own[tid] = mine;
  }
  mine = __reduce_add_sync(k_full_mask, mine);
  if (lane == 0) cs.wsum[warp] = mine;
  __syncthreads();
  if (tid == 0) {
    uint32_t t = 0;
#pragma unroll
    for (int w = 0; w < cl_warps; ++w) t += cs.wsum[w];
    cs.own_tot = t;
  }
  cl.sync();  // every slice is merged
  // slice totals in descending key order (lane j holds slice C-1-j), one DSMEM read each
  if (warp == 0) {
    const uint32_t s = lane < C ? *cl.map_shared_rank(&cs.own_tot, C - 1 - lane) : 0u;
    uint32_t incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t x = __shfl_up_sync(k_full_mask, incl, o);
      if (lane >= o) incl += x;
    }
    const uint32_t total = __shfl_sync(k_full_mask, incl, 31);
    const uint32_t need = first ? min(k_max, total) : st.need;
    if (lane == 0) cs.total = total;
    if (lane < C && incl - s < need && need <= incl) {
      cs.slice = static_cast<uint32_t>(C - 1 - lane);
      cs.excl = incl - s;
    }
  }
  __syncthreads();
  if (first && step_start(st, cs.total, k_max)) return;
  const int sl = static_cast<int>(cs.slice);
  const uint32_t excl = cs.excl;
  // the boundary slice's bins, descending (thread j holds bin per-1-j of the slice)
  const uint32_t c = tid < per ? cl.map_shared_rank(cs.own, sl)[per - 1 - tid] : 0u;
  uint32_t a = c, dummy = 0, ta, tb;
  block_scan2(a, dummy, ta, tb, cs.scan);
  if (tid < per && excl + a < st.need && st.need <= excl + a + c) {
    cs.scan.bin = static_cast<uint32_t>(sl * per + per - 1 - tid);
    cs.scan.above = excl + a;
    cs.scan.cnt = c;
  }
  __syncthreads();
  const uint32_t bin = cs.scan.bin, above = cs.scan.above, cnt = cs.scan.cnt;
  __syncthreads();
  step_take_bin(st, bits, rem, k_max, bin, above, cnt);
}
#endif

template <class KT, int DS, int C>
__global__ void __launch_bounds__(cl_threads) step_cluster_kernel(const step_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(DS * sizeof(KT) == 16, "one 16-byte load per sketch key row");
  static_assert(C >= 8 && step_bins / C <= cl_threads, "a slice's bins fit one per thread");
  extern __shared__ __align__(128) uint8_t smem[];  // cache | page ids | key ring (P0), slabs
  __shared__ __align__(16) float s_q[step_max_q][DS];
  __shared__ uint32_t s_hist[step_bins];
  __shared__ cl_smem cs;

  const cg::cluster_group cl = cg::this_cluster();
  const int tid = threadIdx.x;
  const int part = static_cast<int>(cl.block_rank());
  const int b = blockIdx.x / C;
  const select_budget& bu = p.budget;
  auto mark = [&](int i) {  // timing breakdown: CTA 0 stamps the end of each phase
    if (p.phase_ns != nullptr && blockIdx.x == 0 && tid == 0) p.phase_ns[i] = global_ns();
  };
  mark(0);
  for (int i = tid; i < step_bins; i += cl_threads) s_hist[i] = 0u;
  griddep_wait();  // inputs of an earlier kernel (PDL launch)

  const int len = p.seq_len[b];
  const int lo = min(max(bu.lo, 0), len);
  const int hi = max(len - bu.tail, lo);
  const int chunk = ceil_div(ceil_div(hi - lo, C), 16) * 16;
  const int begin = min(lo + part * chunk, hi);
  const int end = min(hi, begin + chunk);
  const int n = end - begin;  // <= p.smem_scores (the launcher sizes it)
  float* cache = reinterpret_cast<float*>(smem);
  uint32_t* extra = reinterpret_cast<uint32_t*>(smem) + p.smem_scores;

  // ---- P0
  if (p.score) {
    const page_table& pt = p.sk.pages;
    const float qscale = p.scale * p.sk.key_scale;
    for (int i = tid; i < p.n_sq * DS; i += cl_threads)
      s_q[i / DS][i % DS] = p.q[static_cast<int64_t>(b) * p.n_sq * DS + i] * qscale;
    const int first_page = pt.indptr[b];
    const int pg0 = begin >> pt.page_shift;
    const int n_pg = n > 0 ? ((end - 1) >> pt.page_shift) - pg0 + 1 : 0;
    int32_t* pages = reinterpret_cast<int32_t*>(extra);
    for (int i = tid; i < n_pg; i += cl_threads)
      pages[i] = __ldg(pt.indices + first_page + pg0 + i);
    __syncthreads();
    uint4* ring = reinterpret_cast<uint4*>(extra + cl_page_words(p.smem_scores, pt.page_shift));
    const uint4* keys = static_cast<const uint4*>(p.sk.keys);
    const int sk = p.cl_keys, per_thread = sk / cl_threads;
    const int n_st = ceil_div(n, sk);
    // Thread tid copies and later scores keys u * cl_threads + tid of every stage: it reads
    // only its own copies, so waiting for its own groups is enough (no block barrier).
    auto issue = [&](int s) {
      if (s < n_st) {
        uint4* slot = ring + (s % cl_ring) * sk;
        for (int u = 0; u < per_thread; ++u) {
          const int j = u * cl_threads + tid, i = s * sk + j;
          if (i < n) {
            const int t = begin + i;
            const int64_t page = pages[(t >> pt.page_shift) - pg0];
            cp_async16(slot + j, keys + page * pt.page_size + (t & (pt.page_size - 1)), true);
          }
        }
      }
      cp_async_commit();
    };
    for (int s = 0; s < cl_ring - 1; ++s) issue(s);
    for (int s = 0; s < n_st; ++s) {
      issue(s + cl_ring - 1);
      cp_async_wait<cl_ring - 1>();  // stage s has landed
      const uint4* slot = ring + (s % cl_ring) * sk;
      for (int u = 0; u < per_thread; ++u) {
        const int j = u * cl_threads + tid, i = s * sk + j;
        if (i < n) {
          const float score = step_key_score<KT, DS>(slot[j], s_q, p.n_sq);
          cache[i] = score;
          atomicAdd(s_hist + (float_key(score) >> 21), 1u);
        }
      }
    }
    cp_async_wait<0>();
  } else {
    const float* gsc = p.scores + static_cast<int64_t>(b) * p.score_stride;
    constexpr int U = 16;
    for (int base = 0; base < n; base += cl_threads * U) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * cl_threads + tid;
        v[u] = i < n ? __ldcg(gsc + begin + i) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * cl_threads + tid;
        if (i < n) {
          cache[i] = v[u];
          atomicAdd(s_hist + (float_key(v[u]) >> 21), 1u);
        }
      }
    }
  }
  __syncthreads();

  // ---- levels: 11 / 11 / 10 bits
  step_state st;
  const uint32_t k_max = static_cast<uint32_t>(max(bu.k_max, 0));
  cl_resolve<C>(cl, s_hist, cs, 11, 21, true, k_max, st);
  mark(1);
#pragma unroll 1
  for (int level = 1; level <= 2; ++level) {
    if (st.done) {  // the same in every CTA of the cluster
      for (int l = level; l <= 2; ++l) mark(1 + l);
      break;
    }
    const int shift = level == 1 ? 21 : 10;  // bits below the resolved prefix
    const int bits = level == 1 ? 11 : 10;   // bits of this level
    const int n_bins = 1 << bits;
    // no CTA reads this histogram any more: they all passed the level's second barrier
    for (int i = tid; i < n_bins; i += cl_threads) s_hist[i] = 0u;
    __syncthreads();
    for (int i = tid; i < n; i += cl_threads) {
      const uint32_t key = float_key(cache[i]);
      if ((key >> shift) == st.prefix)
        atomicAdd(s_hist + ((key >> (shift - bits)) & static_cast<uint32_t>(n_bins - 1)), 1u);
    }
    __syncthreads();
    cl_resolve<C>(cl, s_hist, cs, bits, shift - bits, false, k_max, st);
    mark(1 + level);
  }

  // ---- P3, P4
  const int n_slabs = ceil_div(n, 32);
  uint32_t* s_slab = extra;  // the key ring is drained
  uint32_t* off_g = s_slab + n_slabs;
  uint32_t* off_e = off_g + n_slabs;
  auto load = [&](int i) { return cache[i]; };
  uint32_t g_tot, e_tot;
  step_count<cl_warps>(st, n, load, s_slab, g_tot, e_tot, cs.scan);
  if (tid == 0) {
    cs.tot[0] = g_tot;
    cs.tot[1] = e_tot;
  }
  cl.sync();
  mark(4);
  uint32_t pg = 0, pe = 0;  // counts of the cluster's earlier CTAs
  if (tid < part) {
    const uint32_t* t = cl.map_shared_rank(cs.tot, tid);
    pg = t[0];
    pe = t[1];
  }
  cluster_arrive_release();  // this CTA's last DSMEM read is done (waited for before exit)
  uint32_t cta_g, cta_e;
  block_scan2(pg, pe, cta_g, cta_e, cs.scan);
  step_emit<cl_warps>(st, n, begin, load, s_slab, off_g, off_e, cta_g, cta_e,
                      p.out_idx + static_cast<int64_t>(b) * p.out_stride, cs.scan);
  if (part == 0 && tid == 0) p.out_count[b] = static_cast<int32_t>(st.n_sel);
  mark(5);
  cluster_wait_acquire();  // no CTA leaves while another may still read its shared memory
#endif
}

}  // namespace sieve::cuda
