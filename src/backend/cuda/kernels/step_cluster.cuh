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
  // level L's merged bins owned by this CTA: slice r of the cluster histogram, bins
  // [r*per, (r+1)*per), per = bins / C <= 256 (C >= 8); every CTA adds its counts in
  __align__(16) uint32_t own[3][step_bins / 8];
  uint32_t pre[2][32];  // (gt, eq) counts of each earlier CTA of the cluster, pushed by it
  scan_smem<cl_warps> scan;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cg = cooperative_groups;

// One radix level over the cluster; the local histogram s_hist (n_bins = 1 << bits) is
// complete. Each CTA adds its nonzero bins into their owners' slices (fire-and-forget DSMEM
// atomics), one cluster barrier, then every CTA reads the whole merged histogram (one 8- or
// 16-byte DSMEM load per thread) and finds the boundary bin itself: the same state in every
// thread of every CTA of the cluster.
template <int C>
__device__ inline void cl_resolve(const cg::cluster_group& cl, const uint32_t* s_hist, cl_smem& cs,
                                  int level, int bits, int rem, bool first, uint32_t k_max,
                                  step_state& st) {
  const int tid = threadIdx.x;
  const int n_bins = 1 << bits, per = n_bins / C;
  for (int j = tid; j < n_bins; j += cl_threads) {
    const uint32_t v = s_hist[j];
    if (v) atomicAdd(cl.map_shared_rank(&cs.own[level][0], j / per) + j % per, v);
  }
  cl.sync();  // every slice is merged
  // thread t holds q bins in descending key order: bins n_bins - q(t+1) .. n_bins - qt - 1
  const int q = n_bins / cl_threads;  // 4 or 2
  const int lo_bin = n_bins - q * (tid + 1);
  const uint32_t* src = cl.map_shared_rank(&cs.own[level][0], lo_bin / per) + lo_bin % per;
  uint32_t c[4] = {0u, 0u, 0u, 0u};
  if (q == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    c[0] = v.x, c[1] = v.y;
  }
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
#endif

template <class KT, int DS, int C>
__global__ void __launch_bounds__(cl_threads) step_cluster_kernel(const step_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(DS * sizeof(KT) == 16, "one 16-byte load per sketch key row");
  static_assert(C >= 8 && C <= 16 && step_bins / cl_threads == 4,
                "a thread reads 4 (level 2: 2) merged bins of one owner's slice");
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
  for (int i = tid; i < 3 * (step_bins / 8); i += cl_threads) (&cs.own[0][0])[i] = 0u;
  // other CTAs add into `own` from level 0 on: they wait for this zeroing before
  cluster_arrive_release();
  griddep_wait();  // inputs of an earlier kernel (PDL launch)

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
          atomicAdd(s_hist + (float_key(score) >> 21), 1u);
        }
      }
    }
    cp_async_wait<0>();
  } else {
    step_load_scores<cl_threads, 16>(p.scores + static_cast<int64_t>(b) * p.score_stride + begin, n,
                                     cache, s_hist);
  }
  __syncthreads();

  // ---- levels: 11 / 11 / 10 bits
  step_state st;
  const uint32_t k_max = static_cast<uint32_t>(max(bu.k_max, 0));
  cluster_wait_acquire();  // every CTA's `own` is zeroed
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
    __syncthreads();
    for (int i = tid; i < n; i += cl_threads) {
      const uint32_t key = float_key(cache[i]);
      if ((key >> shift) == st.prefix)
        atomicAdd(s_hist + ((key >> (shift - bits)) & static_cast<uint32_t>(n_bins - 1)), 1u);
    }
    __syncthreads();
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
