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
//   L   per level: each CTA adds its nonzero bins into their owner's slice (CTA r owns bins
//       [r*per, (r+1)*per)) with fire-and-forget DSMEM atomics; one cluster barrier; every
//       CTA reads the merged histogram (one 16-byte DSMEM load per thread) and finds the
//       boundary bin itself: the same state in every CTA, so a resolved selection skips the
//       remaining levels uniformly
//   P3  (> T, == T) counts per slab of 32 scores; each CTA pushes its totals to the later
//       CTAs of the cluster; cluster barrier (the last DSMEM access)
//   P4  offsets from the earlier CTAs' totals, ordered positions written out
// It selects exactly what sparse_step_kernel and the separate kernels select (same scores in
// the same order, same tie rule; tests/step_test.cpp). With a top-p budget each level also
// carries the score mass per bin (cl_resolve_p: select()'s rule, select_common.cuh), which the
// grid kernel does not do.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/kernels/select_common.cuh"
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

// TP: the top-p instance, which also carries each bin's score mass.
template <bool TP>
struct cl_smem {
  // level L's merged bins owned by this CTA: slice r of the cluster histogram, bins
  // [r*per, (r+1)*per), per = bins / C <= 256 (C >= 8); every CTA adds its counts in
  __align__(16) uint32_t own[3][step_bins / 8];
  __align__(16) float ownm[3][TP ? step_bins / 8 : 4];  // top-p: their score mass
  uint32_t pre[2][32];  // (gt, eq) counts of each earlier CTA of the cluster, pushed by it
  scan_smem<cl_warps> scan;
  float wf[cl_warps];  // top-p: float scan
  float m_above;
  int pick, lowest;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cg = cooperative_groups;

// Adds this CTA's nonzero bins of one level (and, for top-p, their mass) into the owners'
// slices of the cluster histogram: fire-and-forget DSMEM atomics, made visible by the next
// cluster barrier.
template <int C, bool TP>
__device__ inline void cl_push(const cg::cluster_group& cl, const uint32_t* s_hist,
                               const float* s_mass, cl_smem<TP>& cs, int level, int n_bins) {
  const int per = n_bins / C;
  for (int j = threadIdx.x; j < n_bins; j += cl_threads) {
    const uint32_t v = s_hist[j];
    if (!v) continue;
    atomicAdd(cl.map_shared_rank(&cs.own[level][0], j / per) + j % per, v);
    if constexpr (TP)
      atomicAdd(cl.map_shared_rank(&cs.ownm[level][0], j / per) + j % per, s_mass[j]);
  }
}

// After the barrier: this thread's q = n_bins / cl_threads (4 or 2) merged bins, descending
// in key order across threads (thread t holds bins n_bins - q(t+1) .. n_bins - qt - 1), in one
// 16- or 8-byte DSMEM load from their owner (and the same for their mass with top-p).
// Returns the lowest of the bins.
template <int C, bool TP>
__device__ inline int cl_read(const cg::cluster_group& cl, cl_smem<TP>& cs, int level, int n_bins,
                              uint32_t (&c)[4], float (&m)[4]) {
  const int q = n_bins / cl_threads, per = n_bins / C;
  const int lo_bin = n_bins - q * (threadIdx.x + 1);
  const int owner = lo_bin / per, off = lo_bin % per;
  const uint32_t* src = cl.map_shared_rank(&cs.own[level][0], owner) + off;
  const float* srcm = TP ? cl.map_shared_rank(&cs.ownm[level][0], owner) + off : nullptr;
  if (q == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
    if constexpr (TP) {
      const float4 w = *reinterpret_cast<const float4*>(srcm);
      m[0] = w.x, m[1] = w.y, m[2] = w.z, m[3] = w.w;
    }
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    c[0] = v.x, c[1] = v.y;
    if constexpr (TP) {
      const float2 w = *reinterpret_cast<const float2*>(srcm);
      m[0] = w.x, m[1] = w.y;
    }
  }
  return lo_bin;
}

// One radix level over the cluster; the local histogram s_hist (n_bins = 1 << bits) is
// complete. Each CTA adds its nonzero bins into their owners' slices (fire-and-forget DSMEM
// atomics), one cluster barrier, then every CTA reads the whole merged histogram (one 8- or
// 16-byte DSMEM load per thread) and finds the boundary bin itself: the same state in every
// thread of every CTA of the cluster.
template <int C>
__device__ inline void cl_resolve(const cg::cluster_group& cl, const uint32_t* s_hist,
                                  cl_smem<false>& cs, int level, int bits, int rem, bool first,
                                  uint32_t k_max, step_state& st) {
  const int n_bins = 1 << bits, q = n_bins / cl_threads;
  cl_push<C, false>(cl, s_hist, nullptr, cs, level, n_bins);
  cl.sync();  // every slice is merged
  uint32_t c[4] = {0u, 0u, 0u, 0u};
  float m_unused[4];
  const int lo_bin = cl_read<C, false>(cl, cs, level, n_bins, c, m_unused);
  uint32_t a = c[0] + c[1] + c[2] + c[3], dummy = 0, total, t2;
  const uint32_t mine = a;
  block_scan2(a, dummy, total, t2, cs.scan);  // a = count above this thread's bins
  if (first && step_start(st, total, k_max)) return;
  if (a < st.need && st.need <= a + mine) {
    uint32_t acc = a;
    for (int i = q - 1; i >= 0; --i) {  // descending within the thread
      if (acc + c[i] >= st.need) {
        cs.scan.bin = static_cast<uint32_t>(lo_bin + i);
        cs.scan.above = acc;
        cs.scan.cnt = c[i];
        break;
      }
      acc += c[i];
    }
  }
  __syncthreads();
  const uint32_t bin = cs.scan.bin, above = cs.scan.above, cnt = cs.scan.cnt;
  __syncthreads();
  step_take_bin(st, bits, rem, k_max, bin, above, cnt);
}

// Block-wide exclusive scan of a float in thread order; returns the total too.
__device__ __forceinline__ float cl_scan_f(float x, float& total, float* wf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float incl = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(k_full_mask, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) wf[warp] = incl;
  __syncthreads();
  float before = 0.f;
  total = 0.f;
#pragma unroll
  for (int w = 0; w < cl_warps; ++w) {
    if (w < warp) before += wf[w];
    total += wf[w];
  }
  return before + incl - x;
}

// One radix level of a top-p budget (the chain's rule, select_common.cuh: the first bin in
// descending key order whose inclusive count reaches k_max, or whose inclusive mass reaches
// top_p x the row's mass with at least k_min scores; none: the lowest nonzero bin). Counts and
// masses are pushed to their owners like cl_resolve's counts. `ps` carries the chain's state;
// `st` gets the result (thr, r_tie, n_sel) once the level resolves the boundary: the last
// level, or a boundary bin holding one score.
template <int C>
__device__ inline void cl_resolve_p(const cg::cluster_group& cl, const uint32_t* s_hist,
                                    const float* s_mass, cl_smem<true>& cs, int level, int bits,
                                    int rem, const select_budget& bu, sel_state& ps,
                                    step_state& st) {
  const int tid = threadIdx.x;
  const int n_bins = 1 << bits, q = n_bins / cl_threads;
  cl_push<C, true>(cl, s_hist, s_mass, cs, level, n_bins);
  if (tid == 0) {
    cs.pick = cl_threads;
    cs.lowest = -1;
  }
  cl.sync();  // every slice is merged
  uint32_t c[4] = {0u, 0u, 0u, 0u};
  float m[4] = {0.f, 0.f, 0.f, 0.f};
  const int lo_bin = cl_read<C, true>(cl, cs, level, n_bins, c, m);
  uint32_t a = c[0] + c[1] + c[2] + c[3], dummy = 0, total, t2;
  block_scan2(a, dummy, total, t2, cs.scan);  // a: scores above this thread's bins
  float m_total;
  const float ma = cl_scan_f(m[0] + m[1] + m[2] + m[3], m_total, cs.wf);
  if (level == 0) {
    ps = sel_state{};
    ps.total = total;
    ps.k_max = min(static_cast<uint32_t>(max(bu.k_max, 0)), total);
    ps.k_min = min(static_cast<uint32_t>(max(bu.k_min, 0)), ps.k_max);
    ps.target = bu.top_p * m_total;
    if (total == 0 || ps.k_max == 0) {
      st.done = true;
      st.thr = 0xffffffffu;
      st.r_tie = 0;
      st.n_sel = 0;
      return;
    }
  }
  int cand = -1, low = -1;  // first bin meeting the budget; lowest nonzero bin (of this thread)
  {
    uint32_t ci = ps.c_above + a;
    float mi = ps.m_above + ma;
    for (int i = q - 1; i >= 0; --i) {
      ci += c[i];
      mi += m[i];
      if (c[i] == 0) continue;
      low = i;
      if (cand < 0 && sel_pred(ps, ci, mi)) cand = i;
    }
  }
  if (cand >= 0) atomicMin(&cs.pick, tid);
  if (low >= 0) atomicMax(&cs.lowest, tid);
  __syncthreads();
  const bool picked = cs.pick < cl_threads;
  if (tid == (picked ? cs.pick : cs.lowest)) {
    const int i = picked ? cand : low;
    uint32_t ab = a;
    float mb = ma;
    for (int j = q - 1; j > i; --j) {
      ab += c[j];
      mb += m[j];
    }
    cs.scan.bin = static_cast<uint32_t>(lo_bin + i);
    cs.scan.above = ab;
    cs.scan.cnt = c[i];
    cs.m_above = mb;
  }
  __syncthreads();
  const uint32_t bin = cs.scan.bin, above = cs.scan.above, cnt = cs.scan.cnt;
  const float m_above = cs.m_above;
  __syncthreads();
  ps.prefix = (ps.prefix << bits) | bin;
  ps.c_above += above;  // above: inside the previous levels' bin
  ps.m_above += m_above;
  ps.bin_cnt = cnt;
  ps.depth += 1;
  if (rem == 0) {  // the full key: how many of its ties to take
    const uint32_t r = sel_ties(ps);
    st.done = true;
    st.thr = ps.prefix;
    st.r_tie = r;
    st.n_sel = ps.c_above + r;
  } else if (cnt == 1) {  // one score in the boundary bin: it is taken
    st.done = true;
    st.thr = ps.prefix << rem;
    st.r_tie = 0xffffffffu;
    st.n_sel = ps.c_above + 1;
  }
}
#endif

// TOPP: the top-p instance (budget.top_p < 1; the launcher picks it), kept apart so the top-k
// path carries none of the mass histograms.
template <class KT, int DS, int C, bool TOPP>
__global__ void __launch_bounds__(cl_threads) step_cluster_kernel(const step_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(DS * sizeof(KT) == 16, "one 16-byte load per sketch key row");
  static_assert(C >= 8 && C <= 16 && step_bins / cl_threads == 4,
                "a thread reads 4 (level 2: 2) merged bins of one owner's slice");
  extern __shared__ __align__(128) uint8_t smem[];  // cache | page ids | key ring (P0), slabs
  __shared__ __align__(16) float s_q[step_max_q][DS];
  __shared__ uint32_t s_hist[step_bins];
  __shared__ float s_mass[TOPP ? step_bins : 1];  // top-p: score mass per bin
  __shared__ cl_smem<TOPP> cs;

  const cg::cluster_group cl = cg::this_cluster();
  const int tid = threadIdx.x;
  const int part = static_cast<int>(cl.block_rank());
  const int b = blockIdx.x / C;
  const select_budget& bu = p.budget;
  auto mark = [&](int i) {  // timing breakdown: CTA 0 stamps the end of each phase
    if (p.phase_ns != nullptr && blockIdx.x == 0 && tid == 0) p.phase_ns[i] = global_ns();
  };
  mark(0);
  constexpr bool topp = TOPP;
  for (int i = tid; i < step_bins; i += cl_threads) s_hist[i] = 0u;
  for (int i = tid; i < 3 * (step_bins / 8); i += cl_threads) (&cs.own[0][0])[i] = 0u;
  if constexpr (topp) {  // the mass histograms only serve a top-p budget
    for (int i = tid; i < step_bins; i += cl_threads) s_mass[i] = 0.f;
    for (int i = tid; i < 3 * (step_bins / 8); i += cl_threads) (&cs.ownm[0][0])[i] = 0.f;
  }
  // other CTAs add into `own` from level 0 on: they wait for this zeroing before
  cluster_arrive_release();
  griddep_wait();  // inputs of an earlier kernel (PDL launch)
  // a selection-cache hit: every CTA of every cluster leaves here, before any shared access
  if (p.skip != nullptr && *p.skip != 0) {
    cluster_wait_acquire();
    return;
  }

  const int len = p.seq_len[b / p.rows_per_seq];
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
          atomicAdd(s_hist + (float_key(score) >> 21), 1u);  // top-p is selection alone only
        }
      }
    }
    cp_async_wait<0>();
  } else {
    step_load_scores<cl_threads, 16, 1>(p.scores + static_cast<int64_t>(b) * p.score_stride + begin,
                                        n, cache, s_hist, topp ? s_mass : nullptr);
  }
  __syncthreads();

  // ---- levels: 11 / 11 / 10 bits
  step_state st;
  const uint32_t k_max = static_cast<uint32_t>(max(bu.k_max, 0));
  cluster_wait_acquire();  // every CTA's `own` is zeroed
  sel_state ps;            // top-p: the chain's threshold state
  if constexpr (topp)
    cl_resolve_p<C>(cl, s_hist, s_mass, cs, 0, 11, 21, bu, ps, st);
  else
    cl_resolve<C>(cl, s_hist, cs, 0, 11, 21, true, k_max, st);
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
    // only this CTA reads its histogram: it pushed the last level's counts before that barrier
    for (int i = tid; i < n_bins; i += cl_threads) s_hist[i] = 0u;
    if constexpr (topp)
      for (int i = tid; i < n_bins; i += cl_threads) s_mass[i] = 0.f;
    __syncthreads();
    uint32_t prefix;
    if constexpr (topp)
      prefix = ps.prefix;
    else
      prefix = st.prefix;
    for (int i = tid; i < n; i += cl_threads) {
      const float v = cache[i];
      const uint32_t key = float_key(v);
      if ((key >> shift) == prefix) {
        const uint32_t bin = (key >> (shift - bits)) & static_cast<uint32_t>(n_bins - 1);
        atomicAdd(s_hist + bin, 1u);
        if constexpr (topp) atomicAdd(s_mass + bin, v);
      }
    }
    __syncthreads();
    if constexpr (topp)
      cl_resolve_p<C>(cl, s_hist, s_mass, cs, level, bits, shift - bits, bu, ps, st);
    else
      cl_resolve<C>(cl, s_hist, cs, level, bits, shift - bits, false, k_max, st);
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
  if (tid > part && tid < C) {  // this CTA's counts to every later CTA of the cluster
    uint32_t* pre = cl.map_shared_rank(&cs.pre[0][0], tid);
    pre[part] = g_tot;
    pre[32 + part] = e_tot;
  }
  cl.sync();  // the last DSMEM access: a CTA may leave once past it
  mark(4);
  uint32_t pg = tid < part ? cs.pre[0][tid] : 0u, pe = tid < part ? cs.pre[1][tid] : 0u;
  uint32_t cta_g, cta_e;  // counts of the cluster's earlier CTAs
  block_scan2(pg, pe, cta_g, cta_e, cs.scan);
  step_emit<cl_warps>(st, n, begin, load, s_slab, off_g, off_e, cta_g, cta_e,
                      p.out_idx + static_cast<int64_t>(b) * p.out_stride, cs.scan);
  if (part == 0 && tid == 0) p.out_count[b] = static_cast<int32_t>(st.n_sel);
  mark(5);
#endif
}

}  // namespace sieve::cuda
