// Shared pieces of the selection (see select.cuh): workspace layout, the warp-aggregated
// block histogram, the per-row threshold state and how the last CTA of a pass advances it.
#pragma once

#include "backend/cuda/kernels/common.cuh"

namespace sieve::cuda {

constexpr int sel_threads = 256;
constexpr int sel_per_thread = 16;
constexpr int sel_tile = sel_threads * sel_per_thread;  // scores per tile
constexpr int sel_cap = 16384;                          // candidates resolved by one CTA
constexpr int sel_warps = sel_threads / 32;

enum sel_mode : uint32_t { sel_build = 0, sel_collect = 1, sel_done = 2 };

// Per-row header; all zero when a pipeline starts (= building the level-0 histogram).
struct sel_row_hdr {
  uint32_t cnt[4][256];
  float mass[4][256];
  // threshold search state, written only by the last CTA of a pass
  uint32_t mode;     // sel_mode
  int32_t depth;     // resolved 8-bit levels
  uint32_t prefix;   // resolved key bits
  uint32_t c_above;  // scores above the current bin
  float m_above;
  uint32_t bin_cnt;  // scores inside the current bin
  uint32_t total, k_max, k_min;
  float target;
  uint32_t thr_key, r_tie, n_sel;  // result (mode done)
  uint32_t cand_n, ticket;
  uint32_t pass_ctr[4];
  uint32_t pad[5];
};
static_assert(sizeof(sel_row_hdr) % 16 == 0, "header rows are zeroed with 16-byte stores");

__host__ __device__ inline int64_t sel_ws_bytes(int n_rows, int max_tiles) {
  return static_cast<int64_t>(n_rows) * sizeof(sel_row_hdr) +
         static_cast<int64_t>(n_rows) * sel_cap * 4 + static_cast<int64_t>(n_rows) * max_tiles * 8;
}
__device__ __forceinline__ sel_row_hdr* sel_hdr(const select_workspace& ws, int row) {
  return static_cast<sel_row_hdr*>(ws.base) + row;
}
__device__ __forceinline__ uint32_t* sel_cand(const select_workspace& ws, int row) {
  uint8_t* p =
      static_cast<uint8_t*>(ws.base) + static_cast<int64_t>(ws.n_rows) * sizeof(sel_row_hdr);
  return reinterpret_cast<uint32_t*>(p) + static_cast<int64_t>(row) * sel_cap;
}
__device__ __forceinline__ unsigned long long* sel_status(const select_workspace& ws, int row) {
  uint8_t* p = static_cast<uint8_t*>(ws.base) +
               static_cast<int64_t>(ws.n_rows) * (sizeof(sel_row_hdr) + sel_cap * 4);
  return reinterpret_cast<unsigned long long*>(p) + static_cast<int64_t>(row) * ws.max_tiles;
}

// Selectable range [lo, hi) of a row and its sequence length.
__device__ __forceinline__ void sel_row_range(const int32_t* seq_len, int rows_per_seq,
                                              const select_budget& bu, int row, int& len, int& lo,
                                              int& hi) {
  len = seq_len[row / rows_per_seq];
  lo = max(bu.lo, 0);
  hi = len - bu.tail;
  if (hi < lo) hi = lo;
}

// ---- block histogram: per-warp private bins, updated by one leader lane per distinct
// bin of a warp-wide step (match_any), so skewed data (most scores in one bin) costs one
// shared-memory update per warp step instead of 32 serialised atomics.
struct block_hist {
  uint32_t* cnt;  // smem [sel_warps][256]
  float* mass;    // smem [sel_warps][256]

  __device__ void zero() {
    for (int i = threadIdx.x; i < sel_warps * 256; i += blockDim.x) {
      cnt[i] = 0;
      mass[i] = 0.f;
    }
  }
  // All 32 lanes call; bin < 0 skips.
  __device__ __forceinline__ void add(int bin, float v, bool want_mass) {
    const int lane = threadIdx.x & 31;
    uint32_t* wc = cnt + (threadIdx.x >> 5) * 256;
    float* wm = mass + (threadIdx.x >> 5) * 256;
    __syncwarp();
    const unsigned peers = __match_any_sync(k_full_mask, bin);
    const int leader = __ffs(peers) - 1;
    if (!want_mass) {
      if (lane == leader && bin >= 0) wc[bin] += __popc(peers);
      return;
    }
    unsigned leaders = __ballot_sync(k_full_mask, lane == leader && bin >= 0);
    while (leaders) {
      const int l = __ffs(leaders) - 1;
      leaders &= leaders - 1;
      const int lb = __shfl_sync(k_full_mask, bin, l);
      const float s = warp_sum(bin == lb ? v : 0.f);
      if (lane == l) {
        wc[lb] += __popc(peers);
        wm[lb] += s;
      }
    }
  }
  // After a __syncthreads(): bin sums across warps.
  __device__ __forceinline__ void sum_bin(int b, uint32_t& c, float& m) const {
    c = 0;
    m = 0.f;
#pragma unroll
    for (int w = 0; w < sel_warps; ++w) {
      c += cnt[w * 256 + b];
      m += mass[w * 256 + b];
    }
  }
  __device__ void flush_global(uint32_t* gcnt, float* gmass, bool want_mass) const {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      uint32_t c;
      float m;
      sum_bin(b, c, m);
      if (c) {
        atomicAdd(gcnt + b, c);
        if (want_mass) atomicAdd(gmass + b, m);
      }
    }
  }
};

// ---- threshold state (a copy of the header fields, in registers)
struct sel_state {
  uint32_t prefix = 0;
  int depth = 0;
  uint32_t c_above = 0;
  float m_above = 0.f;
  uint32_t bin_cnt = 0;
  uint32_t total = 0;
  uint32_t k_max = 0, k_min = 0;
  float target = 0.f;
};

struct sel_scan_smem {
  uint32_t wc[sel_warps];
  float wm[sel_warps];
  int pick;
  int lowest;
  sel_state st;
};

__device__ __forceinline__ bool sel_pred(const sel_state& st, uint32_t c_incl, float m_incl) {
  return c_incl >= st.k_max || (m_incl >= st.target && c_incl >= st.k_min);
}

// One level (256 threads; thread t passes the count/mass of bin 255 - t): choose the bin
// that holds the boundary. Every thread returns the same state.
__device__ inline void sel_step(sel_state& st, uint32_t c, float m, bool want_mass,
                                const select_budget& bu, sel_scan_smem& sm) {
  const int tid = threadIdx.x;  // suffix over bins = prefix over threads
  const int lane = tid & 31, warp = tid >> 5;
  const int bin = 255 - tid;
  if (!want_mass) m = 0.f;
  uint32_t sc = c;
  float sm_ = m;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t c2 = __shfl_up_sync(k_full_mask, sc, o);
    const float m2 = __shfl_up_sync(k_full_mask, sm_, o);
    if (lane >= o) {
      sc += c2;
      sm_ += m2;
    }
  }
  if (lane == 31) {
    sm.wc[warp] = sc;
    sm.wm[warp] = sm_;
  }
  if (tid == 0) {
    sm.pick = 256;
    sm.lowest = -1;
  }
  __syncthreads();
  uint32_t oc = 0;
  float om = 0.f;
  for (int w = 0; w < warp; ++w) {
    oc += sm.wc[w];
    om += sm.wm[w];
  }
  sc += oc;
  sm_ += om;
  if (st.depth == 0) {
    uint32_t tc = 0;
    float tm = 0.f;
    for (int w = 0; w < sel_warps; ++w) {
      tc += sm.wc[w];
      tm += sm.wm[w];
    }
    st.total = tc;
    st.k_max = min(static_cast<uint32_t>(max(bu.k_max, 0)), tc);
    st.k_min = min(static_cast<uint32_t>(max(bu.k_min, 0)), st.k_max);
    st.target = (want_mass && bu.top_p < 1.f) ? bu.top_p * tm : INFINITY;
  }
  const uint32_t c_incl = st.c_above + sc;
  const float m_incl = st.m_above + sm_;
  if (c > 0 && sel_pred(st, c_incl, m_incl)) atomicMin(&sm.pick, tid);
  if (c > 0) atomicMax(&sm.lowest, tid);
  __syncthreads();
  int pick = sm.pick < 256 ? sm.pick : sm.lowest;  // none: take everything left
  if (pick < 0) pick = 0;
  if (tid == pick) {
    sel_state s2 = st;
    s2.c_above = c_incl - c;
    s2.m_above = m_incl - m;
    s2.bin_cnt = c;
    s2.prefix = (st.prefix << 8) | static_cast<uint32_t>(bin);
    s2.depth = st.depth + 1;
    sm.st = s2;
  }
  __syncthreads();
  st = sm.st;
  __syncthreads();
}

// How many of the bin_cnt scores equal to the fully resolved key to take.
__device__ __forceinline__ uint32_t sel_ties(const sel_state& st) {
  const float v = key_float(st.prefix);
  uint64_t r = st.k_max > st.c_above ? st.k_max - st.c_above : 0;
  if (st.target != INFINITY) {
    uint64_t rp = r;
    if (v > 0.f) {
      const float need = st.target - st.m_above;
      rp = need <= 0.f ? 1 : static_cast<uint64_t>(ceilf(need / v));
    }
    const uint64_t rmin = st.k_min > st.c_above ? st.k_min - st.c_above : 0;
    if (rp < rmin) rp = rmin;
    if (rp < r) r = rp;
  }
  if (r < 1) r = 1;
  if (r > st.bin_cnt) r = st.bin_cnt;
  return static_cast<uint32_t>(r);
}

// Context the last CTA of a pass needs to advance a row.
struct sel_row_ctx {
  select_workspace ws;
  select_budget budget;
  bool want_mass;
  int row;
  int hi;              // end of the selectable range (tiles to clear)
  int32_t* out_count;  // may be null (written by the emit kernel then)
};

__device__ inline void sel_load_state(const sel_row_hdr* h, sel_state& st) {
  st.prefix = __ldcg(&h->prefix);
  st.depth = __ldcg(&h->depth);
  st.c_above = __ldcg(&h->c_above);
  st.m_above = __ldcg(&h->m_above);
  st.bin_cnt = __ldcg(&h->bin_cnt);
  st.total = __ldcg(&h->total);
  st.k_max = __ldcg(&h->k_max);
  st.k_min = __ldcg(&h->k_min);
  st.target = __ldcg(&h->target);
}

// Called by all 256 threads of the last CTA of a pass over `row`, after a threadfence.
// bh: block histogram scratch (for candidate resolution).
__device__ inline void sel_advance(const sel_row_ctx& cx, block_hist bh, sel_scan_smem& sm) {
  sel_row_hdr* h = sel_hdr(cx.ws, cx.row);
  const uint32_t mode = __ldcg(&h->mode);
  if (mode == sel_done) return;
  sel_state st;
  sel_load_state(h, st);
  bool done = false;
  uint32_t new_mode = sel_build;
  if (mode == sel_build) {
    const int lv = st.depth;
    const int b = 255 - threadIdx.x;
    sel_step(st, __ldcg(&h->cnt[lv][b]), __ldcg(&h->mass[lv][b]), cx.want_mass, cx.budget, sm);
    if (st.total == 0 || st.k_max == 0) {
      done = true;
    } else if (st.depth == 4) {
      done = true;
    } else if (st.bin_cnt <= static_cast<uint32_t>(sel_cap)) {
      new_mode = sel_collect;
    }
  } else {  // candidates of the current bin are in the buffer: resolve the remaining levels
    const uint32_t* cand = sel_cand(cx.ws, cx.row);
    const int n =
        static_cast<int>(min(min(__ldcg(&h->cand_n), st.bin_cnt), static_cast<uint32_t>(sel_cap)));
    const int n_iter = ceil_div(n, sel_threads);
    while (st.depth < 4) {
      const int shift = 32 - 8 * st.depth;
      bh.zero();
      __syncthreads();
      for (int it = 0; it < n_iter; ++it) {
        const int i = it * sel_threads + threadIdx.x;
        const uint32_t key = i < n ? __ldcg(cand + i) : 0u;
        const bool in = i < n && (key >> shift) == st.prefix;
        bh.add(in ? static_cast<int>((key >> (shift - 8)) & 255u) : -1, key_float(key),
               cx.want_mass);
      }
      __syncthreads();
      uint32_t c;
      float m;
      bh.sum_bin(255 - threadIdx.x, c, m);
      sel_step(st, c, m, cx.want_mass, cx.budget, sm);
    }
    done = true;
  }
  if (threadIdx.x == 0) {
    if (done) {
      uint32_t r_tie = 0, n_sel = 0, thr = 0xffffffffu;
      if (st.total > 0 && st.k_max > 0) {
        r_tie = sel_ties(st);
        n_sel = st.c_above + r_tie;
        thr = st.prefix;
      }
      h->thr_key = thr;
      h->r_tie = r_tie;
      h->n_sel = n_sel;
      if (cx.out_count) cx.out_count[cx.row] = static_cast<int32_t>(n_sel);
    }
    h->prefix = st.prefix;
    h->depth = st.depth;
    h->c_above = st.c_above;
    h->m_above = st.m_above;
    h->bin_cnt = st.bin_cnt;
    h->total = st.total;
    h->k_max = st.k_max;
    h->k_min = st.k_min;
    h->target = st.target;
    h->mode = done ? sel_done : new_mode;
  }
  if (done) {  // the emit kernel's look-back needs clear tile flags
    unsigned long long* status = sel_status(cx.ws, cx.row);
    const int n_tiles = ceil_div(max(cx.hi, 1), sel_tile);
    for (int i = threadIdx.x; i < n_tiles; i += blockDim.x) status[i] = 0ull;
  }
}

// End of a pass: count the CTA in; the last CTA of the row advances the state. All
// threads of the CTA call this (after their histogram flush / candidate writes).
__device__ inline void sel_pass_end(const sel_row_ctx& cx, int pass, int ctas_in_row, block_hist bh,
                                    sel_scan_smem& sm) {
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    sel_row_hdr* h = sel_hdr(cx.ws, cx.row);
    s_last = atomicAdd(&h->pass_ctr[pass], 1u) == static_cast<uint32_t>(ctas_in_row - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  sel_advance(cx, bh, sm);
}

}  // namespace sieve::cuda
