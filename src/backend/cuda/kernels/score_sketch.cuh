// Sketch / indexer scoring over low-dimensional paged keys (d_s 8-32; bf16, fp8 e4m3 or
// int8), and the head soft vote over exact logits.
//
// One thread scores one token at a time: its key row is 8-64 contiguous bytes, and
// consecutive threads read consecutive tokens of a page (head-major sketch layout), so
// loads are coalesced; the query sketches sit in shared memory (broadcast reads).
// The soft vote  score_t = sum_h softmax_h(l_{h,.})_t  needs each head's max and sum over
// ALL tokens before any score exists, so it takes two passes over the keys (stats, then
// vote): re-reading a 16-32 byte sketch is cheaper than writing and re-reading G logits.
// The vote pass (and the one-pass raw mode) writes one float per token and feeds the
// selection's level-0 histogram from the same registers.
#pragma once

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/select_common.cuh"

namespace sieve::cuda {

constexpr int sk_threads = 256;
constexpr int sk_max_q = 32;

__device__ __forceinline__ void zero_row_bytes(void* base, int64_t bytes, int row) {
  uint4* z = reinterpret_cast<uint4*>(static_cast<uint8_t*>(base) + row * bytes);
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) z[i] = make_uint4(0, 0, 0, 0);
}

template <class KT, int DS>
__global__ void __launch_bounds__(sk_threads) sketch_score_kernel(const sketch_score_params p) {
  __shared__ __align__(16) float s_q[sk_max_q][DS];
  __shared__ float s_gm[sk_max_q], s_gzi[sk_max_q];
  __shared__ float s_red[sel_warps][sk_max_q][2];
  __shared__ uint32_t s_cnt[sel_warps * 256];
  __shared__ float s_mass[sel_warps * 256];
  __shared__ sel_scan_smem s_scan;
  constexpr int max_pages = 4096;  // page ids of a chunk staged in shared memory
  __shared__ int32_t s_pages[max_pages];

  const int c = blockIdx.x, s = blockIdx.y, b = blockIdx.z;
  const int n_sk = p.sk.n_sk_heads;
  const int row = b * n_sk + s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nq = p.n_sq;
  const page_table& pt = p.sk.pages;

  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  // Only the stats pass may zero: in the passes that build the histogram other CTAs of the
  // row flush into the header concurrently (the raw-mode launcher uses a memset instead).
  if (p.zero_ws != nullptr && c == 0 && p.mode == sketch_mode::stats)
    zero_row_bytes(p.zero_ws, p.zero_bytes, row);

  const int len = seq_len_of(pt, b);
  const int begin = min(c * p.chunk_tokens, len);
  const int end = min(len, begin + p.chunk_tokens);
  const int first_page = pt.indptr[b];
  const float qscale = p.scale * p.sk.key_scale * (p.mode == sketch_mode::raw ? 1.f : k_log2e);
  for (int i = tid; i < nq * DS; i += sk_threads)
    s_q[i / DS][i % DS] = p.q[static_cast<int64_t>(row) * nq * DS + i] * qscale;

  if (p.mode == sketch_mode::vote) {
    // merge pass-1 statistics of every chunk: one warp per head
    for (int h = warp; h < nq; h += sel_warps) {
      float m = -INFINITY, z = 0.f;
      for (int cc = lane; cc < p.n_chunks; cc += 32) {
        const float* st = p.stats + ((static_cast<int64_t>(row) * p.n_chunks + cc) * nq + h) * 2;
        merge_ms(m, z, st[0], st[1]);
      }
      warp_merge_ms(m, z);
      if (lane == 0) {
        s_gm[h] = m == -INFINITY ? 0.f : m;
        s_gzi[h] = z > 0.f ? 1.f / z : 0.f;
      }
    }
  }
  const bool do_hist = p.mode != sketch_mode::stats && p.hist.ws.base != nullptr;
  block_hist bh{s_cnt, s_mass};
  if (do_hist) bh.zero();
  __syncthreads();

  int lo = 0, hi = 0;
  if (do_hist) {
    int l2;
    sel_row_range(p.hist.seq_len, p.hist.rows_per_seq, p.hist.budget, row, l2, lo, hi);
  }

  float m_run[sk_max_q], z_run[sk_max_q];
  if (p.mode == sketch_mode::stats) {
#pragma unroll
    for (int h = 0; h < sk_max_q; ++h) {
      m_run[h] = -INFINITY;
      z_run[h] = 0.f;
    }
  }
  const KT* keys = static_cast<const KT*>(p.sk.keys);
  float* scores = p.scores + row * p.score_stride;
  // One coalesced read of the chunk's page ids, so each key load depends on shared memory
  // only (one HBM round trip per step instead of two).
  const int pg_first = pt.page_shift >= 0 ? (begin >> pt.page_shift) : begin / pt.page_size;
  const int pg_last =
      end > begin ? (pt.page_shift >= 0 ? ((end - 1) >> pt.page_shift) : (end - 1) / pt.page_size)
                  : pg_first - 1;
  const bool staged = pg_last - pg_first + 1 <= max_pages;
  if (staged)
    for (int i = tid; i <= pg_last - pg_first; i += sk_threads)
      s_pages[i] = __ldg(pt.indices + first_page + pg_first + i);
  __syncthreads();
  // TPT tokens per thread per step: their page lookups and key loads are all issued before
  // the first use, so several loads per thread are in flight.
  constexpr int TPT = DS <= 16 ? 4 : 2;
  for (int base = begin; base < end; base += sk_threads * TPT) {
    int tt[TPT];
    int64_t page[TPT];
    int slot[TPT];
#pragma unroll
    for (int u = 0; u < TPT; ++u) {
      tt[u] = base + u * sk_threads + tid;
      page[u] = 0;
      slot[u] = 0;
      if (tt[u] < end) {
        int pg;
        if (pt.page_shift >= 0) {
          pg = tt[u] >> pt.page_shift;
          slot[u] = tt[u] & (pt.page_size - 1);
        } else {
          pg = tt[u] / pt.page_size;
          slot[u] = tt[u] - pg * pt.page_size;
        }
        page[u] = staged ? s_pages[pg - pg_first] : __ldg(pt.indices + first_page + pg);
      }
    }
    float k[TPT][DS];
#pragma unroll
    for (int u = 0; u < TPT; ++u) {
      if (tt[u] < end) {
        load_row<KT, DS>(keys + ((page[u] * n_sk + s) * pt.page_size + slot[u]) * DS, k[u]);
      } else {
#pragma unroll
        for (int j = 0; j < DS; ++j) k[u][j] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < TPT; ++u) {
      const int t = tt[u];
      const bool valid = t < end;
      float score = 0.f;
#pragma unroll
      for (int h = 0; h < sk_max_q; ++h) {
        if (h >= nq) break;
        float l = 0.f;
#pragma unroll
        for (int j = 0; j < DS; j += 4) {
          const float4 q4 = *reinterpret_cast<const float4*>(&s_q[h][j]);
          l = fmaf(q4.x, k[u][j], l);
          l = fmaf(q4.y, k[u][j + 1], l);
          l = fmaf(q4.z, k[u][j + 2], l);
          l = fmaf(q4.w, k[u][j + 3], l);
        }
        if (p.mode == sketch_mode::stats) {
          if (valid && t >= p.stats_lo && t < len - p.stats_tail) {
            if (l > m_run[h]) {
              z_run[h] = z_run[h] * fast_exp2(m_run[h] - l) + 1.f;
              m_run[h] = l;
            } else {
              z_run[h] += fast_exp2(l - m_run[h]);
            }
          }
        } else if (p.mode == sketch_mode::vote) {
          score += fast_exp2(l - s_gm[h]) * s_gzi[h];
        } else {
          score += l;
        }
      }
      if (p.mode != sketch_mode::stats) {
        if (valid) scores[t] = score;
        if (do_hist)
          bh.add(valid && t >= lo && t < hi ? static_cast<int>(float_key(score) >> 24) : -1, score,
                 p.hist.want_mass);
      }
    }
  }

  if (p.mode == sketch_mode::stats) {
#pragma unroll
    for (int h = 0; h < sk_max_q; ++h) {
      if (h >= nq) break;
      float m = m_run[h], z = z_run[h];
      warp_merge_ms(m, z);
      if (lane == 0) {
        s_red[warp][h][0] = m;
        s_red[warp][h][1] = z;
      }
    }
    __syncthreads();
    if (tid < nq) {
      float m = -INFINITY, z = 0.f;
#pragma unroll
      for (int w = 0; w < sel_warps; ++w) merge_ms(m, z, s_red[w][tid][0], s_red[w][tid][1]);
      float* st = p.stats + ((static_cast<int64_t>(row) * p.n_chunks + c) * nq + tid) * 2;
      st[0] = m;
      st[1] = z;
    }
  } else if (do_hist) {
    __syncthreads();
    sel_row_hdr* hh = sel_hdr(p.hist.ws, row);
    bh.flush_global(hh->cnt[0], hh->mass[0], p.hist.want_mass);
    const sel_row_ctx cx{p.hist.ws, p.hist.budget, p.hist.want_mass, row, hi, nullptr};
    sel_pass_end(cx, 0, gridDim.x, bh, s_scan);
  }
}

// Soft vote over exact logits (written by the score mode of decode_kernel). Output row `row`
// sums the heads of input rows row*fold .. row*fold + fold - 1 (fold 1: its own G heads).
__global__ void __launch_bounds__(sel_threads) soft_vote_kernel(const soft_vote_params p) {
  constexpr int max_h = soft_vote_max_heads;
  __shared__ float s_gm[max_h], s_gzi[max_h];
  __shared__ uint32_t s_cnt[sel_warps * 256];
  __shared__ float s_mass[sel_warps * 256];
  __shared__ sel_scan_smem s_scan;
  const int row = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int G = p.G;
  const int in0 = row * p.fold;  // first input row
  const int H = p.fold * G;      // heads voting into this output row
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  for (int h = warp; h < H; h += sel_warps) {
    float m = -INFINITY, z = 0.f;
    const int r = in0 + h / G, hg = h % G;
    for (int cc = lane; cc < p.n_chunks; cc += 32) {
      const float* st = p.stats + ((static_cast<int64_t>(r) * p.n_chunks + cc) * G + hg) * 2;
      merge_ms(m, z, st[0], st[1]);
    }
    warp_merge_ms(m, z);
    if (lane == 0) {
      s_gm[h] = m == -INFINITY ? 0.f : m;
      s_gzi[h] = z > 0.f ? 1.f / z : 0.f;
    }
  }
  const bool do_hist = p.hist.ws.base != nullptr;
  block_hist bh{s_cnt, s_mass};
  if (do_hist) bh.zero();
  __syncthreads();
  int len, lo, hi;
  sel_row_range(p.hist.seq_len, p.hist.rows_per_seq, p.hist.budget, row, len, lo, hi);
  const int n_tiles = ceil_div(len, sel_tile);
  const float* lg = p.logits + static_cast<int64_t>(in0) * G * p.logit_stride;
  float* out = p.scores + row * p.score_stride;
  for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int t0 = tile * sel_tile + tid * sel_per_thread;
    float sc[sel_per_thread];
#pragma unroll
    for (int i = 0; i < sel_per_thread; ++i) sc[i] = 0.f;
    for (int h = 0; h < H; ++h) {
      const float m = s_gm[h], zi = s_gzi[h];
#pragma unroll
      for (int i = 0; i < sel_per_thread; i += 4) {
        if (t0 + i < len) {
          const float4 f = *reinterpret_cast<const float4*>(lg + h * p.logit_stride + t0 + i);
          sc[i] += fast_exp2(f.x - m) * zi;
          sc[i + 1] += fast_exp2(f.y - m) * zi;
          sc[i + 2] += fast_exp2(f.z - m) * zi;
          sc[i + 3] += fast_exp2(f.w - m) * zi;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < sel_per_thread; i += 4)
      if (t0 + i < len)
        *reinterpret_cast<float4*>(out + t0 + i) =
            make_float4(sc[i], sc[i + 1], sc[i + 2], sc[i + 3]);
    if (do_hist) {
#pragma unroll
      for (int i = 0; i < sel_per_thread; ++i) {
        const int t = t0 + i;
        bh.add(t >= lo && t < hi ? static_cast<int>(float_key(sc[i]) >> 24) : -1, sc[i],
               p.hist.want_mass);
      }
    }
  }
  if (do_hist) {
    __syncthreads();
    sel_row_hdr* hh = sel_hdr(p.hist.ws, row);
    bh.flush_global(hh->cnt[0], hh->mass[0], p.hist.want_mass);
    const sel_row_ctx cx{p.hist.ws, p.hist.budget, p.hist.want_mass, row, hi, nullptr};
    sel_pass_end(cx, 0, gridDim.x, bh, s_scan);
  }
}

}  // namespace sieve::cuda
