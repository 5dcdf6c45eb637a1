// The fused sparse decode step: one persistent, cooperative launch that scores, selects
// and attends, with grid barriers where the separate kernels had launch boundaries.
//
// Why: below 1M tokens the separate chain (sketch_score -> select x3-4 -> decode) is bound by
// fixed latency, not bytes: each kernel boundary costs 3-5 us and the selection's last-CTA
// hand-offs chain several round trips (bench/RESULTS-cuda.md). Here every CTA owns a
// contiguous chunk of one sequence's selectable range for the whole step, keeps its scores
// in shared memory, and the phases are separated by grid barriers (~1 us each):
//
//   P0  sketch scores of the chunk (raw: sum of the query sketches' logits) -> smem cache;
//       level-0 histogram (top 11 bits of the order-preserving key) -> global atomics
//   P1  every CTA resolves the level-0 bin from the global histogram (same answer in all);
//       histogram of the next 11 bits inside that bin
//   P2  same, last 10 bits: the exact threshold key T and r_tie (how many scores equal to T
//       to take, lowest positions first) are known after it
//   P3  per-thread counts of keys > T and == T; CTA totals -> slots
//   P4  each CTA sums its predecessors' slots and writes its selected positions in
//       ascending order (ties to the lowest positions, like select()); zeroes the histograms
//   P5  decode attention over sinks + selection + window: the (split, kv head, sequence)
//       items of decode_block, strided over the persistent CTAs (attend_chained = false; by
//       default the decode kernel runs them, launched behind this one with PDL)
// Each level is resolved by every CTA from 128 coarse sums plus the 16 fine bins of one group
// (two small L2 reads instead of 2048 words per CTA on the same few L2 slices). A level ends
// early (uniformly in all CTAs) when the boundary bin is taken whole.
#pragma once

#include <cuda/atomic>
#include <type_traits>

#include "backend/cuda/kernels/attn_decode.cuh"
#include "backend/cuda/kernels/common.cuh"

namespace sieve::cuda {

constexpr int step_threads = 128;
constexpr int step_bins = 2048;
constexpr int step_groups = 128;  // coarse groups per level (one per thread)
constexpr int step_level_words = step_bins + step_groups;
constexpr int step_max_q = 32;
constexpr int step_static_words = 1024;  // static shared words for page ids / slab counts
constexpr int step_ws_head_words = 32;
constexpr int step_max_ctas_per_sm = 32;
constexpr uint32_t step_bar_unit = 1u << 20;  // every barrier adds exactly this to the counter

// Workspace words: the barrier counter (64-bit) + padding, per-CTA (gt, eq) slots, then per
// sequence its level histograms [3][2048 fine + 128 coarse]. Only the number of sequence
// blocks depends on the batch, so one workspace serves every batch size up to the one it was
// sized for (sequence b's histograms, zero at rest, stay where they are).
constexpr int step_seq_words = 3 * step_level_words;
__host__ __device__ inline int64_t step_slot_words(int n_sm) {
  return static_cast<int64_t>(n_sm) * step_max_ctas_per_sm * 2;
}
__host__ __device__ inline int64_t step_ws_words(int batch, int n_sm) {
  return step_ws_head_words + step_slot_words(n_sm) + static_cast<int64_t>(batch) * step_seq_words;
}

// Grid barrier on one monotonic 64-bit counter: CTA i adds a weight w_i with sum_i w_i =
// step_bar_unit, so barrier k of a launch completes when the counter reaches
// base + k * step_bar_unit whatever the grid size; arrival is a fire-and-forget add and the
// wait polls the same word (one L2 round trip less than a count + generation flag). The base
// is the counter rounded down to a whole unit when the CTA starts: earlier launches left whole
// units, and the arrivals of this launch's first barrier that may already be in are less than
// a unit. Needs all CTAs resident (cooperative launch); nothing to reset between launches.
struct grid_bar {
  unsigned long long* cnt;
  unsigned long long base;
  unsigned long long w;
  int k;
  __device__ __forceinline__ void init(uint32_t* ws) {
    cnt = reinterpret_cast<unsigned long long*>(ws);
    k = 0;
    if (threadIdx.x == 0) {
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> c(*cnt);
      base = c.load(::cuda::memory_order_relaxed) &
             ~static_cast<unsigned long long>(step_bar_unit - 1);
      w = step_bar_unit / gridDim.x + (blockIdx.x < step_bar_unit % gridDim.x ? 1u : 0u);
    }
  }
  __device__ __forceinline__ void sync() {
    ++k;
    __syncthreads();
    if (threadIdx.x == 0) {
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> c(*cnt);
      __threadfence();
      c.fetch_add(w, ::cuda::memory_order_release);
      const unsigned long long target = base + static_cast<unsigned long long>(k) * step_bar_unit;
      while (c.load(::cuda::memory_order_acquire) < target) __nanosleep(20);
      __threadfence();
    }
    __syncthreads();
  }
};

struct step_state {
  uint32_t prefix = 0;  // resolved high key bits
  uint32_t need = 0;    // scores still to take at or below the current bin
  uint32_t total = 0;   // selectable scores of the sequence
  uint32_t thr = 0;     // result: threshold key
  uint32_t r_tie = 0;   //   scores equal to thr to take (all: 0xffffffff)
  uint32_t n_sel = 0;
  bool done = false;
};

template <int NW>  // warps of the block
struct scan_smem {
  uint32_t w[2][NW];
  uint32_t bin, above, cnt;
};
using step_scan = scan_smem<step_threads / 32>;

// Block-wide exclusive scan of two counters in thread order (NW warps); returns totals.
template <int NW>
__device__ __forceinline__ void block_scan2(uint32_t& a, uint32_t& b, uint32_t& ta, uint32_t& tb,
                                            scan_smem<NW>& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t sa = a, sb = b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t x = __shfl_up_sync(k_full_mask, sa, o);
    const uint32_t y = __shfl_up_sync(k_full_mask, sb, o);
    if (lane >= o) {
      sa += x;
      sb += y;
    }
  }
  __syncthreads();
  if (lane == 31) {
    sm.w[0][warp] = sa;
    sm.w[1][warp] = sb;
  }
  __syncthreads();
  uint32_t oa = 0, ob = 0;
  ta = tb = 0;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    if (w < warp) {
      oa += sm.w[0][w];
      ob += sm.w[1][w];
    }
    ta += sm.w[0][w];
    tb += sm.w[1][w];
  }
  a = sa - a + oa;
  b = sb - b + ob;
}

// Flushes a block histogram (n_bins = 2048 or 1024 in shared memory) into a level of the
// global one: fine bins and, per group of n_bins/128 bins, the coarse sum.
__device__ __forceinline__ void step_flush(const uint32_t* h, int n_bins, uint32_t* gl) {
  const int per = n_bins / step_groups;
  uint32_t sum = 0;
  for (int i = 0; i < per; ++i) {
    const uint32_t v = h[threadIdx.x * per + i];
    if (v) atomicAdd(gl + threadIdx.x * per + i, v);
    sum += v;
  }
  if (sum) atomicAdd(gl + step_bins + threadIdx.x, sum);
}

// First level: the selectable total is known. Returns true when nothing is to be selected.
__device__ __forceinline__ bool step_start(step_state& st, uint32_t total, uint32_t k_max) {
  st.total = total;
  st.need = min(k_max, total);
  if (st.need != 0) return false;
  st.done = true;
  st.thr = 0xffffffffu;
  st.r_tie = 0;
  st.n_sel = 0;
  return true;
}

// A level's boundary bin is known (its index, the scores above it, its count): narrow the
// state; done when the bin is taken whole or no key bits remain below it (rem = 0).
__device__ __forceinline__ void step_take_bin(step_state& st, int bits, int rem, uint32_t k_max,
                                              uint32_t bin, uint32_t above, uint32_t cnt) {
  st.prefix = (st.prefix << bits) | bin;
  st.need -= above;
  const uint32_t k = min(k_max, st.total);
  if (st.need == cnt) {  // the whole bin: every key at or above its lowest key
    st.done = true;
    st.thr = st.prefix << rem;
    st.r_tie = 0xffffffffu;
    st.n_sel = k;
  } else if (rem == 0) {
    st.done = true;
    st.thr = st.prefix;
    st.r_tie = st.need;
    st.n_sel = k;
  }
}

// Resolves one radix level from the sequence's global histogram (`bits` = log2 n_bins, `rem`
// = key bits below this level): a scan of the 128 coarse sums (thread t holds group 127 - t,
// so thread order is descending key order), then the fine bins of the one group holding the
// boundary. Two L2 round trips; all threads return the same state.
__device__ inline void step_resolve(const uint32_t* gl, int bits, int rem, bool first,
                                    uint32_t k_max, step_state& st, step_scan& sm) {
  const int n_bins = 1 << bits, per = n_bins / step_groups;
  const int grp = step_groups - 1 - threadIdx.x;
  const uint32_t s = __ldcg(gl + step_bins + grp);
  uint32_t excl = s, dummy = 0, total = 0, t2 = 0;
  block_scan2(excl, dummy, total, t2, sm);
  if (first && step_start(st, total, k_max)) return;
  if (excl < st.need && st.need <= excl + s) {
    uint32_t c[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) c[i] = i < per ? __ldcg(gl + grp * per + per - 1 - i) : 0u;
    uint32_t acc = excl;
    bool found = false;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if (!found && i < per && acc + c[i] >= st.need) {
        sm.bin = static_cast<uint32_t>(grp * per + per - 1 - i);
        sm.above = acc;
        sm.cnt = c[i];
        found = true;
      }
      acc += c[i];
    }
  }
  __syncthreads();
  const uint32_t bin = sm.bin, above = sm.above, cnt = sm.cnt;
  __syncthreads();
  step_take_bin(st, bits, rem, k_max, bin, above, cnt);
}

// Raw shared-sketch score of one 16-byte key row: the sum over the n_sq query sketches
// (pre-scaled in s_q) of their logits, in the order of sketch_score_kernel's raw mode.
template <class KT, int DS>
__device__ __forceinline__ float step_key_score(uint4 raw, const float (*s_q)[DS], int n_sq) {
  float k[DS];
  unpack_word<KT>(raw.x, k);
  unpack_word<KT>(raw.y, k + DS / 4);
  unpack_word<KT>(raw.z, k + DS / 2);
  unpack_word<KT>(raw.w, k + 3 * DS / 4);
  float score = 0.f;
  for (int h = 0; h < n_sq; ++h) {
    float l = 0.f;
#pragma unroll
    for (int j = 0; j < DS; j += 4) {
      const float4 q4 = *reinterpret_cast<const float4*>(&s_q[h][j]);
      l = fmaf(q4.x, k[j], l);
      l = fmaf(q4.y, k[j + 1], l);
      l = fmaf(q4.z, k[j + 2], l);
      l = fmaf(q4.w, k[j + 3], l);
    }
    score += l;
  }
  return score;
}

// Selection alone, P0: the chunk's n given scores -> the score cache (if any) and the level-0
// histogram (top 11 key bits; with s_mass, also the score mass per bin for top-p). NT threads,
// U loads of V floats (1 or 4) per thread in flight. With V = 4 a scalar head reaches the
// first 16-byte boundary, float4s follow, then a scalar tail: four times the bytes in flight,
// which bounds the grid step's phase when a CTA holds a few thousand scores (bench/
// RESULTS-cuda.md, run 16). The cluster step keeps V = 1 (its 512 threads already have a
// chunk in flight, and the float4 registers made it spill).
template <int NT, int U, int V>
__device__ inline void step_load_scores(const float* src, int n, float* cache, uint32_t* s_hist,
                                        float* s_mass = nullptr) {
  static_assert(V == 1 || V == 4, "scalar or float4 loads");
  const int tid = static_cast<int>(threadIdx.x);
  auto add = [&](int i, float v) {
    if (cache != nullptr) cache[i] = v;
    const uint32_t bin = float_key(v) >> 21;
    atomicAdd(s_hist + bin, 1u);
    if (s_mass != nullptr) atomicAdd(s_mass + bin, v);
  };
  int head = 0, n_vec = n;  // scalar head; whole vectors after it
  if constexpr (V == 4) {
    head = min(n, (4 - static_cast<int>((reinterpret_cast<uintptr_t>(src) >> 2) & 3)) & 3);
    if (tid < head) add(tid, __ldcg(src + tid));
    n_vec = (n - head) / 4;
  }
  using vec = std::conditional_t<V == 4, float4, float>;
  const vec* src_v = reinterpret_cast<const vec*>(src + head);
  for (int base = 0; base < n_vec; base += NT * U) {
    vec v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = base + u * NT + tid;
      v[u] = j < n_vec ? __ldcg(src_v + j) : vec{};
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = base + u * NT + tid;
      if (j >= n_vec) continue;
      if constexpr (V == 4) {
        const int i = head + 4 * j;
        add(i, v[u].x);
        add(i + 1, v[u].y);
        add(i + 2, v[u].z);
        add(i + 3, v[u].w);
      } else {
        add(j, v[u]);
      }
    }
  }
  if constexpr (V == 4)
    for (int i = head + 4 * n_vec + tid; i < n; i += NT) add(i, __ldcg(src + i));
}

// P3: (> T, == T) counts per slab of 32 consecutive scores (one per lane, ballots), four
// slabs per warp step so several loads are in flight; s_slab[e] = gt | eq << 16. Returns the
// CTA's totals in every thread. load(i) gives score i of the chunk.
template <int NW, class Load>
__device__ inline void step_count(const step_state& st, int n, Load load, uint32_t* s_slab,
                                  uint32_t& g_tot, uint32_t& e_tot, scan_smem<NW>& sm) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_slabs = ceil_div(n, 32);
  uint32_t wg = 0, we = 0;
  if (st.n_sel > 0) {
    for (int e0 = warp; e0 < n_slabs; e0 += 4 * NW) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = (e0 + NW * u) * 32 + lane;
        v[u] = i < n ? load(i) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int e = e0 + NW * u;
        if (e >= n_slabs) break;
        const int i = e * 32 + lane;
        const uint32_t key = float_key(v[u]);
        const uint32_t gt = __popc(__ballot_sync(k_full_mask, i < n && key > st.thr));
        const uint32_t eq = __popc(__ballot_sync(k_full_mask, i < n && key == st.thr));
        if (lane == 0) s_slab[e] = gt | (eq << 16);
        wg += gt;
        we += eq;
      }
    }
  } else {
    for (int e = tid; e < n_slabs; e += NW * 32) s_slab[e] = 0u;
  }
  // every lane of a warp holds its warp's counts (ballots): lane 0 brings them to the sum
  wg = lane == 0 ? wg : 0u;
  we = lane == 0 ? we : 0u;
  block_scan2(wg, we, g_tot, e_tot, sm);
}

// P4: slab offsets by a block scan on top of (cta_g, cta_e), the counts every earlier CTA of
// the sequence selects; then each warp writes its slabs' selected positions (begin + i) in
// ascending order, ties to the lowest positions (empty slabs skipped).
template <int NW, class Load>
__device__ inline void step_emit(const step_state& st, int n, int begin, Load load,
                                 const uint32_t* s_slab, uint32_t* off_g, uint32_t* off_e,
                                 uint32_t cta_g, uint32_t cta_e, int32_t* out, scan_smem<NW>& sm) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_slabs = ceil_div(n, 32);
  const int per = ceil_div(n_slabs, NW * 32);
  const int e0 = min(tid * per, n_slabs), e1 = min(e0 + per, n_slabs);
  uint32_t tg = 0, te = 0;
  for (int e = e0; e < e1; ++e) {
    tg += s_slab[e] & 0xffffu;
    te += s_slab[e] >> 16;
  }
  uint32_t tot_g, tot_e;
  block_scan2(tg, te, tot_g, tot_e, sm);
  tg += cta_g;
  te += cta_e;
  for (int e = e0; e < e1; ++e) {
    off_g[e] = tg;
    off_e[e] = te;
    tg += s_slab[e] & 0xffffu;
    te += s_slab[e] >> 16;
  }
  __syncthreads();
  if (st.n_sel == 0) return;
  for (int e = warp; e < n_slabs; e += NW) {
    if (s_slab[e] == 0u) continue;
    const int i = e * 32 + lane;
    const uint32_t key = i < n ? float_key(load(i)) : 0u;
    const bool is_gt = i < n && key > st.thr, is_eq = i < n && key == st.thr;
    const unsigned below = (1u << lane) - 1u;
    const uint32_t g_before = off_g[e] + __popc(__ballot_sync(k_full_mask, is_gt) & below);
    const uint32_t e_before = off_e[e] + __popc(__ballot_sync(k_full_mask, is_eq) & below);
    if (is_gt) out[g_before + min(e_before, st.r_tie)] = begin + i;
    if (is_eq && e_before < st.r_tie) out[g_before + e_before] = begin + i;
  }
}

template <class T, int D, class KT, int DS>
__global__ void __launch_bounds__(step_threads) sparse_step_kernel(const step_params p) {
  static_assert(DS * sizeof(KT) == 16, "one 16-byte load per sketch key row");
  extern __shared__ __align__(128) uint8_t smem[];  // score cache, then the attention ring
  __shared__ __align__(16) float s_q[step_max_q][DS];
  __shared__ uint32_t s_hist[step_bins];
  __shared__ uint32_t s_words[step_static_words];
  __shared__ step_scan s_scan;

  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit: all CTAs leave
  const int tid = threadIdx.x;
  const int cps = p.ctas_per_seq;
  const int b = blockIdx.x / cps, part = blockIdx.x - b * cps;
  const select_budget& bu = p.budget;
  grid_bar bar;
  bar.init(p.ws);
  uint32_t* slots = p.ws + step_ws_head_words;  // [grid][2]
  uint32_t* gh = slots + p.slot_words + static_cast<int64_t>(b) * step_seq_words;

  // the step's first loads, issued together: length, first page and the query sketches
  const int len = p.seq_len[b / p.rows_per_seq];
  const int first_page = p.score ? p.sk.pages.indptr[b] : 0;
  constexpr int QPT = step_max_q * DS / step_threads;  // query values per thread
  float qv[QPT];
#pragma unroll
  for (int u = 0; u < QPT; ++u) {
    const int i = u * step_threads + tid;
    qv[u] = p.score && i < p.n_sq * DS ? p.q[static_cast<int64_t>(b) * p.n_sq * DS + i] : 0.f;
  }
  const int lo = min(max(bu.lo, 0), len);
  const int hi = max(len - bu.tail, lo);
  const int chunk = ceil_div(ceil_div(hi - lo, cps), 16) * 16;
  const int begin = min(lo + part * chunk, hi);
  const int end = min(hi, begin + chunk);
  const int n = end - begin;
  const bool cached = n <= p.smem_scores;
  float* cache = reinterpret_cast<float*>(smem);
  float* gsc = p.scores + static_cast<int64_t>(b) * p.score_stride;
  // Scratch words for page ids (P0) and slab counts / offsets (P3, P4): the static array,
  // or the dynamic buffer when the scores are not cached there.
  uint32_t* words = cached ? s_words : reinterpret_cast<uint32_t*>(smem);
  const int word_cap = cached ? step_static_words : p.smem_scores;

  auto mark = [&](int i) {  // timing breakdown: CTA 0 stamps the end of each phase
    if (p.phase_ns != nullptr && blockIdx.x == 0 && tid == 0) p.phase_ns[i] = global_ns();
  };
  mark(0);
  for (int i = tid; i < step_bins; i += step_threads) s_hist[i] = 0u;

  // ---- P0: scores + level-0 histogram. Keys are double-buffered in registers (raw 16-byte
  // rows): the next step's loads are in flight while this step's are scored.
  if (p.score) {
    const page_table& pt = p.sk.pages;
    const float qscale = p.scale * p.sk.key_scale;
#pragma unroll
    for (int u = 0; u < QPT; ++u) {
      const int i = u * step_threads + tid;
      if (i < p.n_sq * DS) s_q[i / DS][i % DS] = qv[u] * qscale;
    }
    const int pg0 = begin >> pt.page_shift;
    const int n_pg = n > 0 ? ((end - 1) >> pt.page_shift) - pg0 + 1 : 0;
    int32_t* pages = reinterpret_cast<int32_t*>(words);
    const bool staged = n_pg <= word_cap;
    if (staged)
      for (int i = tid; i < n_pg; i += step_threads)
        pages[i] = __ldg(pt.indices + first_page + pg0 + i);
    __syncthreads();
    const uint4* keys = static_cast<const uint4*>(p.sk.keys);
    constexpr int TPT = 8;
    constexpr int STEP = step_threads * TPT;
    auto issue = [&](int base, uint4(&r)[TPT]) {
#pragma unroll
      for (int u = 0; u < TPT; ++u) {
        const int i = base + u * step_threads + tid;
        if (i < n) {
          const int t = begin + i;
          const int pg = t >> pt.page_shift;
          const int64_t page = staged ? pages[pg - pg0] : __ldg(pt.indices + first_page + pg);
          r[u] = __ldg(keys + page * pt.page_size + (t & (pt.page_size - 1)));
        } else {
          r[u] = make_uint4(0, 0, 0, 0);
        }
      }
    };
    uint4 cur[TPT], nxt[TPT] = {};
    issue(0, cur);
    for (int base = 0; base < n; base += STEP) {
      if (base + STEP < n) issue(base + STEP, nxt);
#pragma unroll
      for (int u = 0; u < TPT; ++u) {
        const int i = base + u * step_threads + tid;
        const float score = step_key_score<KT, DS>(cur[u], s_q, p.n_sq);
        if (i < n) {
          if (cached)
            cache[i] = score;
          else
            gsc[begin + i] = score;
          atomicAdd(s_hist + (float_key(score) >> 21), 1u);
        }
      }
#pragma unroll
      for (int u = 0; u < TPT; ++u) cur[u] = nxt[u];
    }
  } else {
    __syncthreads();
    step_load_scores<step_threads, 8, 4>(gsc + begin, n, cached ? cache : nullptr, s_hist);
  }
  __syncthreads();
  step_flush(s_hist, step_bins, gh);
  bar.sync();
  mark(1);

  // ---- P1, P2: resolve a level, histogram the next one inside the chosen bin
  step_state st;
  const uint32_t k_max = static_cast<uint32_t>(max(bu.k_max, 0));
  step_resolve(gh, 11, 21, true, k_max, st, s_scan);
  // Every CTA passes the same barriers (sequences of a batch may finish at different levels);
  // with one sequence every CTA reaches the same state, so a finished selection skips the
  // remaining level barriers in all CTAs alike.
#pragma unroll 1
  for (int level = 1; level <= 2; ++level) {
    if (st.done && p.batch == 1) {
      for (int l = level; l <= 2; ++l) mark(1 + l);  // skipped levels take no time
      break;
    }
    const int shift = level == 1 ? 21 : 10;  // bits below the resolved prefix
    const int bits = level == 1 ? 11 : 10;   // bits of this level
    const int n_bins = 1 << bits;
    uint32_t* gl = gh + level * step_level_words;
    if (!st.done) {
      for (int i = tid; i < n_bins; i += step_threads) s_hist[i] = 0u;
      __syncthreads();
      constexpr int U = 8;
      for (int base = 0; base < n; base += step_threads * U) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int i = base + u * step_threads + tid;
          v[u] = i < n ? (cached ? cache[i] : __ldcg(gsc + begin + i)) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int i = base + u * step_threads + tid;
          const uint32_t key = float_key(v[u]);
          if (i < n && (key >> shift) == st.prefix)
            atomicAdd(s_hist + ((key >> (shift - bits)) & static_cast<uint32_t>(n_bins - 1)), 1u);
        }
      }
      __syncthreads();
      step_flush(s_hist, n_bins, gl);
    }
    bar.sync();
    mark(1 + level);
    if (!st.done) step_resolve(gl, bits, shift - bits, false, k_max, st, s_scan);
  }

  // ---- P3: (> T, == T) counts per slab of 32 scores; CTA totals -> slot
  const int n_slabs = ceil_div(n, 32);
  uint32_t* s_slab = words;                             // [n_slabs] gt | eq << 16
  uint32_t* off_g = cached ? s_hist : words + n_slabs;  // [n_slabs] gt before each slab
  uint32_t* off_e = off_g + n_slabs;                    // [n_slabs] eq before each slab
  auto load = [&](int i) { return cached ? cache[i] : __ldcg(gsc + begin + i); };
  {
    uint32_t g_tot, e_tot;
    step_count<step_threads / 32>(st, n, load, s_slab, g_tot, e_tot, s_scan);
    if (tid == 0) {
      slots[2 * blockIdx.x] = g_tot;
      slots[2 * blockIdx.x + 1] = e_tot;
    }
  }
  bar.sync();
  mark(4);

  // ---- P4: the CTA's offsets from its predecessors' slots, then its positions in order
  {
    uint32_t pg = 0, pe = 0;
    for (int c = b * cps + tid; c < static_cast<int>(blockIdx.x); c += step_threads) {
      pg += __ldcg(slots + 2 * c);
      pe += __ldcg(slots + 2 * c + 1);
    }
    uint32_t cta_g, cta_e;  // everything the sequence's earlier CTAs select
    block_scan2(pg, pe, cta_g, cta_e, s_scan);
    step_emit<step_threads / 32>(st, n, begin, load, s_slab, off_g, off_e, cta_g, cta_e,
                                 p.out_idx + static_cast<int64_t>(b) * p.out_stride, s_scan);
    if (part == 0) {
      if (tid == 0) p.out_count[b] = static_cast<int32_t>(st.n_sel);
      for (int i = tid; i < 3 * step_level_words; i += step_threads) gh[i] = 0u;  // for reuse
    }
  }
  mark(5);
  if (!p.attend_on || p.attend_chained) return;  // chained: the decode kernel follows (PDL)
  bar.sync();
  mark(6);

  // ---- P5: attention over sinks + selection + window
  const int n_kv = p.attend.kv.n_kv_heads;
  const int S = p.attend.n_splits;
  const int items = p.batch * n_kv * S;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const int split = w % S, g = (w / S) % n_kv, bb = w / (S * n_kv);
    __syncthreads();
    decode_block<T, D, false>(p.attend, split, g, bb, smem);
  }
  mark(7);
}

// A cooperative kernel that only crosses n grid barriers: their cost, for the benchmark.
__global__ void __launch_bounds__(step_threads) barrier_probe_kernel(uint32_t* ws, int n) {
  grid_bar bar;
  bar.init(ws);
  for (int i = 0; i < n; ++i) bar.sync();
}

}  // namespace sieve::cuda
