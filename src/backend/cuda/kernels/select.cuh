// Sort-free top-k / top-p selection over many rows of scores (up to 2M per row), with no
// host synchronisation.
//
// Scores map to order-preserving 32-bit keys. Level 0 is a 256-bin histogram of the top 8
// key bits (fused into the scorer kernels, or select_hist_kernel), with counts and, for
// top-p, score mass. The last CTA of every pass over a row (an atomic count per pass)
// derives the bin that holds the boundary and stores the search state in the row header,
// so later CTAs read one state instead of re-deriving it. While that bin holds more than
// sel_cap scores, the next pass builds the 8-bit histogram inside it; once it fits, the
// pass copies the bin's keys to a candidate buffer and the pass's last CTA resolves the
// remaining bits from those. Three refine passes always suffice (4 levels of 8 bits). The
// exact threshold key T and the number r_tie of scores equal to T to take are then known,
// and select_emit_kernel writes the selected positions in ascending order with a
// decoupled look-back scan across tiles (a warp reads 32 predecessors at once): ties go
// to the lowest positions.
#pragma once

#include <cuda/atomic>

#include "backend/cuda/kernels/select_common.cuh"

namespace sieve::cuda {

// ---- level-0 histogram of external scores
__global__ void __launch_bounds__(sel_threads)
    select_hist_kernel(const select_params p, bool want_mass) {
  __shared__ uint32_t s_cnt[sel_warps * 256];
  __shared__ float s_mass[sel_warps * 256];
  __shared__ sel_scan_smem sm;
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  const int row = blockIdx.y;
  int len, lo, hi;
  sel_row_range(p.seq_len, p.rows_per_seq, p.budget, row, len, lo, hi);
  block_hist bh{s_cnt, s_mass};
  bh.zero();
  __syncthreads();
  const float* sc = p.scores + row * p.score_stride;
  const int n_tiles = ceil_div(hi, sel_tile);
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int t0 = tile * sel_tile + threadIdx.x * sel_per_thread;
    float v[sel_per_thread];
#pragma unroll
    for (int i = 0; i < sel_per_thread; i += 4) {
      const float4 f =
          t0 + i < hi ? *reinterpret_cast<const float4*>(sc + t0 + i) : make_float4(0, 0, 0, 0);
      v[i] = f.x;
      v[i + 1] = f.y;
      v[i + 2] = f.z;
      v[i + 3] = f.w;
    }
#pragma unroll
    for (int i = 0; i < sel_per_thread; ++i) {
      const int t = t0 + i;
      const int bin = (t >= lo && t < hi) ? static_cast<int>(float_key(v[i]) >> 24) : -1;
      bh.add(bin, v[i], want_mass);
    }
  }
  __syncthreads();
  sel_row_hdr* h = sel_hdr(p.ws, row);
  bh.flush_global(h->cnt[0], h->mass[0], want_mass);
  const sel_row_ctx cx{p.ws, p.budget, want_mass, row, hi, p.out_count};
  sel_pass_end(cx, 0, gridDim.x, bh, sm);
}

// ---- refine pass `pass` (1..3): histogram inside the threshold bin, or collect the bin's
// keys as candidates once it fits; the pass's last CTA advances the state.
__global__ void __launch_bounds__(sel_threads)
    select_refine_kernel(const select_params p, int pass, bool want_mass) {
  __shared__ uint32_t s_cnt[sel_warps * 256];
  __shared__ float s_mass[sel_warps * 256];
  __shared__ sel_scan_smem sm;
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  const int row = blockIdx.y;
  int len, lo, hi;
  sel_row_range(p.seq_len, p.rows_per_seq, p.budget, row, len, lo, hi);
  sel_row_hdr* h = sel_hdr(p.ws, row);
  const uint32_t mode = __ldcg(&h->mode);
  if (mode == sel_done) return;
  const bool collect = mode == sel_collect;
  const int depth = __ldcg(&h->depth);
  const uint32_t prefix = __ldcg(&h->prefix);
  const int shift = 32 - 8 * depth;  // bits of the resolved prefix (depth >= 1 here)
  block_hist bh{s_cnt, s_mass};
  if (!collect) bh.zero();
  __syncthreads();
  const float* sc = p.scores + row * p.score_stride;
  uint32_t* cand = sel_cand(p.ws, row);
  const int lane = threadIdx.x & 31;
  const int n_tiles = ceil_div(hi, sel_tile);
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int t0 = tile * sel_tile + threadIdx.x * sel_per_thread;
    float v[sel_per_thread];
#pragma unroll
    for (int i = 0; i < sel_per_thread; i += 4) {
      const float4 f =
          t0 + i < hi ? *reinterpret_cast<const float4*>(sc + t0 + i) : make_float4(0, 0, 0, 0);
      v[i] = f.x;
      v[i + 1] = f.y;
      v[i + 2] = f.z;
      v[i + 3] = f.w;
    }
#pragma unroll
    for (int i = 0; i < sel_per_thread; ++i) {
      const int t = t0 + i;
      const uint32_t key = float_key(v[i]);
      const bool in = t >= lo && t < hi && (key >> shift) == prefix;
      if (collect) {
        const unsigned bal = __ballot_sync(k_full_mask, in);
        if (bal) {
          uint32_t base = 0;
          if (lane == __ffs(bal) - 1)
            base = atomicAdd(&h->cand_n, static_cast<uint32_t>(__popc(bal)));
          base = __shfl_sync(k_full_mask, base, __ffs(bal) - 1);
          if (in && base + __popc(bal & ((1u << lane) - 1u)) < static_cast<uint32_t>(sel_cap))
            cand[base + __popc(bal & ((1u << lane) - 1u))] = key;
        }
      } else {
        bh.add(in ? static_cast<int>((key >> (shift - 8)) & 255u) : -1, v[i], want_mass);
      }
    }
  }
  if (!collect) {
    __syncthreads();
    bh.flush_global(h->cnt[depth], h->mass[depth], want_mass);
  }
  const sel_row_ctx cx{p.ws, p.budget, want_mass, row, hi, p.out_count};
  sel_pass_end(cx, pass, gridDim.x, bh, sm);
}

// ---- emit: ordered compaction with a decoupled look-back across tiles
__device__ __forceinline__ unsigned long long sel_pack(unsigned long long flag, uint32_t gt,
                                                       uint32_t tie) {
  return (flag << 62) | (static_cast<unsigned long long>(gt) << 31) | tie;
}

__global__ void __launch_bounds__(sel_threads) select_emit_kernel(const select_params p) {
  __shared__ uint32_t s_w[2][sel_warps];
  __shared__ uint32_t s_tile;
  __shared__ uint32_t s_excl[2];
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  const int row = blockIdx.y;
  int len, lo, hi;
  sel_row_range(p.seq_len, p.rows_per_seq, p.budget, row, len, lo, hi);
  sel_row_hdr* h = sel_hdr(p.ws, row);
  const uint32_t thr = __ldcg(&h->thr_key), r_tie = __ldcg(&h->r_tie);
  const uint32_t n_sel = __ldcg(&h->n_sel);
  if (blockIdx.x == 0 && threadIdx.x == 0) p.out_count[row] = static_cast<int32_t>(n_sel);
  if (n_sel == 0) return;
  const int n_tiles = ceil_div(hi, sel_tile);
  unsigned long long* status = sel_status(p.ws, row);
  const float* sc = p.scores + row * p.score_stride;
  int32_t* out = p.out_idx + static_cast<int64_t>(row) * p.out_stride;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) s_tile = atomicAdd(&h->ticket, 1u);
    __syncthreads();
    const int tile = static_cast<int>(s_tile);
    if (tile >= n_tiles) break;
    const int t0 = tile * sel_tile + threadIdx.x * sel_per_thread;
    uint32_t gt_mask = 0, eq_mask = 0;
#pragma unroll
    for (int i = 0; i < sel_per_thread; i += 4) {
      const float4 f =
          t0 + i < hi ? *reinterpret_cast<const float4*>(sc + t0 + i) : make_float4(0, 0, 0, 0);
      const float v[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int t = t0 + i + j;
        if (t >= lo && t < hi) {
          const uint32_t k = float_key(v[j]);
          if (k > thr) gt_mask |= 1u << (i + j);
          if (k == thr) eq_mask |= 1u << (i + j);
        }
      }
    }
    // block exclusive scan of (gt, eq) counts in thread order = position order
    const uint32_t gt = __popc(gt_mask), eq = __popc(eq_mask);
    uint32_t sg = gt, se = eq;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t a = __shfl_up_sync(k_full_mask, sg, o);
      const uint32_t c = __shfl_up_sync(k_full_mask, se, o);
      if (lane >= o) {
        sg += a;
        se += c;
      }
    }
    if (lane == 31) {
      s_w[0][warp] = sg;
      s_w[1][warp] = se;
    }
    __syncthreads();
    uint32_t og = 0, oe = 0, tg = 0, te = 0;
#pragma unroll
    for (int w = 0; w < sel_warps; ++w) {
      if (w < warp) {
        og += s_w[0][w];
        oe += s_w[1][w];
      }
      tg += s_w[0][w];
      te += s_w[1][w];
    }
    const uint32_t ex_g = sg - gt + og, ex_e = se - eq + oe;  // exclusive, within the tile
    if (warp == 0) {
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> me(status[tile]);
      uint32_t pg = 0, pe = 0;
      if (tile == 0) {
        if (lane == 0) me.store(sel_pack(2, tg, te), ::cuda::memory_order_release);
      } else {
        if (lane == 0) me.store(sel_pack(1, tg, te), ::cuda::memory_order_release);
        // look back 32 predecessors at a time; stop at the nearest inclusive prefix
        for (int base = tile - 1;; base -= 32) {
          const int j = base - lane;
          unsigned long long w = sel_pack(2, 0, 0);  // before tile 0: an inclusive zero
          if (j >= 0) {
            ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> other(status[j]);
            while (((w = other.load(::cuda::memory_order_acquire)) >> 62) == 0) __nanosleep(20);
          }
          const unsigned incl = __ballot_sync(k_full_mask, (w >> 62) == 2);
          const int stop = incl ? __ffs(incl) - 1 : 31;
          uint32_t g = lane <= stop ? static_cast<uint32_t>((w >> 31) & 0x7fffffffu) : 0u;
          uint32_t e = lane <= stop ? static_cast<uint32_t>(w & 0x7fffffffu) : 0u;
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            g += __shfl_xor_sync(k_full_mask, g, o);
            e += __shfl_xor_sync(k_full_mask, e, o);
          }
          pg += g;
          pe += e;
          if (incl) break;
        }
        if (lane == 0) me.store(sel_pack(2, pg + tg, pe + te), ::cuda::memory_order_release);
      }
      if (lane == 0) {
        s_excl[0] = pg;
        s_excl[1] = pe;
      }
    }
    __syncthreads();
    uint32_t g_before = s_excl[0] + ex_g, e_before = s_excl[1] + ex_e;
#pragma unroll
    for (int i = 0; i < sel_per_thread; ++i) {
      const uint32_t bit = 1u << i;
      if (gt_mask & bit) {
        out[g_before + min(e_before, r_tie)] = t0 + i;
        ++g_before;
      } else if (eq_mask & bit) {
        if (e_before < r_tie) out[g_before + e_before] = t0 + i;
        ++e_before;
      }
    }
  }
}

}  // namespace sieve::cuda
