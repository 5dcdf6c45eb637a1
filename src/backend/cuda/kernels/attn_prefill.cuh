// Prefill-chunk attention: the newest n_q tokens of each sequence attend causally to the
// token list of their (sequence, kv head): dense, or sinks + selection + window (the
// window part includes the chunk itself). K/V rows are gathered in place from the pages.
//
// Rows of the product are (query, head) pairs of one KV group, so one K/V tile in shared
// memory serves all G heads. One CTA = W warps x MT m-tiles of 16 rows, tokens in tiles of 64
// (32 at D = 256):
//   S[rows, tokens] = Q[rows, D] . K^T      (mma m16n8k16; K rows are the B operand)
//   O[rows, D]     += P[rows, tokens] . V    (P reused from the S accumulators in registers)
// Mask: token position <= query position, and > query position - causal_window when set
// (positions ascend along the list, so a tile whose first token lies past the CTA's last
// query ends the loop). Split-K over the list is optional; partial (o, max, sum) states are merged
// by prefill_merge_kernel.
#pragma once

#include <climits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/token_set.cuh"

namespace sieve::cuda {

// W warps of MT m-tiles of 16 rows: each K/V fragment loaded from shared memory feeds MT
// MMAs, which halves the shared-memory traffic per MMA at MT = 2 (D <= 128); D = 256 keeps
// MT = 1 for its O accumulators and takes 8 warps instead, so that one K/V tile still serves
// 128 rows (half the L2 traffic of 64-row CTAs).
template <int D, int MT, int W>
struct prefill_cfg {
  static_assert(MT == 1 || MT == 2, "one or two m-tiles per warp");
  static_assert(W == 4 || W == 8, "4 or 8 warps");
  static constexpr int warps = W;
  static constexpr int threads = 32 * W;
  static constexpr int rows = 16 * MT * W;
  // tokens per K/V tile: 32 at D = 256 (32 KB per stage)
  static constexpr int tile = D >= 256 ? 32 : 64;
  static constexpr int row_bytes = D * 2;
  static constexpr int stage_bytes = tile * row_bytes * 2;
  // two stages at 128 rows x D = 128 keep two CTAs per SM (96 KB each); 8 warps at D = 256
  // are one CTA per SM (160 KB with three stages)
  static constexpr int stages = D >= 256 ? (W == 8 ? 3 : 2) : (MT == 2 && D >= 128 ? 2 : 3);
  static constexpr int q_bytes = rows * row_bytes;
  static constexpr int pos_bytes = stages * tile * 4;
  static constexpr int smem_bytes = stages * stage_bytes + q_bytes + pos_bytes;
};

template <class T, int D, int MT, int W>
__global__ void __launch_bounds__(32 * W) prefill_kernel(const prefill_params p) {
  using C = prefill_cfg<D, MT, W>;
  constexpr int CPR = D / 8;
  constexpr int RPP = C::threads / CPR;
  constexpr int KD = D / 16;
  constexpr int NT = C::tile / 8;  // n-tiles of S
  constexpr int DN = D / 8;        // n-tiles of O
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* s_q = smem + C::stages * C::stage_bytes;
  int* s_pos = reinterpret_cast<int*>(s_q + C::q_bytes);

  const int n_split = p.n_splits;
  const int split = blockIdx.x % n_split;
  const int rblk = blockIdx.x / n_split;
  const int g = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n_kv = p.kv.n_kv_heads;
  const int G = p.n_q_heads / n_kv;
  const page_table& pt = p.kv.pages;

  griddep_wait();
  griddep_launch_dependents();

  const int q0 = p.qo_indptr[b];
  const int n_q = p.qo_indptr[b + 1] - q0;
  const int n_rows = n_q * G;
  const int R0 = rblk * C::rows;
  if (R0 >= n_rows) return;  // this sequence has fewer queries than the grid covers
  const int len = seq_len_of(pt, b);
  const int q_start = len - n_q;
  const int first_page = pt.indptr[b];
  const token_list tl = make_token_list(p.set, b, g, len, n_q);
  const int min_qpos = q_start + R0 / G;
  const int max_qpos = q_start + (min(R0 + C::rows, n_rows) - 1) / G;

  const int per = ceil_div(ceil_div(tl.total, n_split), C::tile) * C::tile;
  const int begin = min(split * per, tl.total);
  const int end = min(tl.total, begin + per);
  const int n_tiles = ceil_div(end - begin, C::tile);

  // Q tile -> shared (swizzled like K), rows past the end zero-filled.
  {
    const T* qb = static_cast<const T*>(p.q);
    const int col = tid % CPR;
    for (int r = tid / CPR; r < C::rows; r += RPP) {
      const int rr = R0 + r;
      const bool valid = rr < n_rows;
      int64_t off = 0;
      if (valid) {
        const int qi = rr / G, h = rr - qi * G;
        off = (static_cast<int64_t>(q0 + qi) * p.n_q_heads + g * G + h) * D + col * 8;
      }
      cp_async16(s_q + r * C::row_bytes + ((col ^ (r & 7)) << 4), qb + off, valid);
    }
    cp_async_commit();
  }

  const T* kbase = static_cast<const T*>(p.kv.k);
  const T* vbase = static_cast<const T*>(p.kv.v);
  auto load_tile = [&](int stage, int t_idx) {
    uint8_t* ks = smem + stage * C::stage_bytes;
    uint8_t* vs = ks + C::tile * C::row_bytes;
    const int v0 = begin + t_idx * C::tile;
    const int col = tid % CPR;
    for (int r = tid / CPR; r < C::tile; r += RPP) {
      const int vi = v0 + r;
      const bool valid = vi < end;
      int64_t off = 0;
      int pos = INT_MAX;
      if (valid) {
        pos = tl.token(vi);
        off = (token_row(pt, first_page, pos) * n_kv + g) * D + col * 8;
      }
      if (col == 0) s_pos[stage * C::tile + r] = pos;
      const int soff = r * C::row_bytes + ((col ^ (r & 7)) << 4);
      cp_async16(ks + soff, kbase + off, valid);
      cp_async16(vs + soff, vbase + off, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < C::stages - 1; ++s) {
    if (s < n_tiles) load_tile(s, s);
    cp_async_commit();
  }

  // this lane's rows: m-tile m covers warp*16*MT + m*16 + lane/4 and + 8 ([m][0], [m][1])
  const int wrow = warp * 16 * MT;
  const float sl2 = p.scale * k_log2e;
  float m_run[MT][2], l_run[MT][2];
  float o[MT][DN][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    m_run[m][0] = m_run[m][1] = -INFINITY;
    l_run[m][0] = l_run[m][1] = 0.f;
#pragma unroll
    for (int i = 0; i < DN; ++i) o[m][i][0] = o[m][i][1] = o[m][i][2] = o[m][i][3] = 0.f;
  }

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<C::stages - 2>();
    __syncthreads();
    const int st = it % C::stages;
    const int* pos = s_pos + st * C::tile;
    const int first_pos = pos[0];
    if (first_pos > max_qpos) break;  // every later token is in the future
    // every token of the tile visible to every row of the CTA: no mask (positions ascend;
    // a short last tile ends in INT_MAX)
    const bool full = pos[C::tile - 1] <= min_qpos &&
                      (p.causal_window <= 0 || first_pos > max_qpos - p.causal_window);
    {
      const int nt = it + C::stages - 1;
      if (nt < n_tiles) load_tile(nt % C::stages, nt);
      cp_async_commit();
    }
    const uint8_t* ks = smem + st * C::stage_bytes;
    const uint8_t* vs = ks + C::tile * C::row_bytes;

    float s[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int row = wrow + m * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = kk * 2 + (lane >> 4);
        ldmatrix_x4(a[m], s_q + row * C::row_bytes + ((ch ^ (row & 7)) << 4));
      }
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        // matrices: tokens n*8.., chunks 2kk, 2kk+1; tokens (n+1)*8.., chunks 2kk, 2kk+1
        uint32_t bq[4];
        const int tok = n * 8 + (lane & 7) + ((lane >> 4) << 3);
        const int ch = kk * 2 + ((lane >> 3) & 1);
        ldmatrix_x4(bq, ks + tok * C::row_bytes + ((ch ^ (tok & 7)) << 4));
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_16816<T>(s[m][n], a[m], bq[0], bq[1]);
          mma_16816<T>(s[m][n + 1], a[m], bq[2], bq[3]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      // scale + causal mask, row max
      float mx0 = -INFINITY, mx1 = -INFINITY;
      if (full) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][n][e] *= sl2;
          mx0 = fmaxf(mx0, fmaxf(s[m][n][0], s[m][n][1]));
          mx1 = fmaxf(mx1, fmaxf(s[m][n][2], s[m][n][3]));
        }
      } else {
        // the lane's two query positions (recomputed here: masked tiles are few)
        const int qp0 = q_start + (R0 + wrow + m * 16 + (lane >> 2)) / G;
        const int qp1 = q_start + (R0 + wrow + m * 16 + (lane >> 2) + 8) / G;
        // sliding window: keys at or below lo are out of the query's reach
        const int lo0 = p.causal_window > 0 ? qp0 - p.causal_window : -1;
        const int lo1 = p.causal_window > 0 ? qp1 - p.causal_window : -1;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const int c0 = n * 8 + 2 * (lane & 3);
          const int pa = pos[c0], pb = pos[c0 + 1];
          s[m][n][0] = pa <= qp0 && pa > lo0 ? s[m][n][0] * sl2 : -INFINITY;
          s[m][n][1] = pb <= qp0 && pb > lo0 ? s[m][n][1] * sl2 : -INFINITY;
          s[m][n][2] = pa <= qp1 && pa > lo1 ? s[m][n][2] * sl2 : -INFINITY;
          s[m][n][3] = pb <= qp1 && pb > lo1 ? s[m][n][3] * sl2 : -INFINITY;
          mx0 = fmaxf(mx0, fmaxf(s[m][n][0], s[m][n][1]));
          mx1 = fmaxf(mx1, fmaxf(s[m][n][2], s[m][n][3]));
        }
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(k_full_mask, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(k_full_mask, mx1, off));
      }
      const float mn0 = fmaxf(m_run[m][0], mx0), mn1 = fmaxf(m_run[m][1], mx1);
      const float ref0 = mn0 == -INFINITY ? 0.f : mn0;
      const float ref1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = fast_exp2(m_run[m][0] - ref0), al1 = fast_exp2(m_run[m][1] - ref1);
      m_run[m][0] = mn0;
      m_run[m][1] = mn1;
      float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        s[m][n][0] = fast_exp2(s[m][n][0] - ref0);
        s[m][n][1] = fast_exp2(s[m][n][1] - ref0);
        s[m][n][2] = fast_exp2(s[m][n][2] - ref1);
        s[m][n][3] = fast_exp2(s[m][n][3] - ref1);
        rs0 += s[m][n][0] + s[m][n][1];
        rs1 += s[m][n][2] + s[m][n][3];
      }
      l_run[m][0] = l_run[m][0] * al0 + rs0;
      l_run[m][1] = l_run[m][1] * al1 + rs1;
#pragma unroll
      for (int d = 0; d < DN; ++d) {
        o[m][d][0] *= al0;
        o[m][d][1] *= al0;
        o[m][d][2] *= al1;
        o[m][d][3] *= al1;
      }
    }
#pragma unroll
    for (int kt = 0; kt < C::tile / 16; ++kt) {
      uint32_t a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        a[m][0] = pack2<T>(s[m][2 * kt][0], s[m][2 * kt][1]);
        a[m][1] = pack2<T>(s[m][2 * kt][2], s[m][2 * kt][3]);
        a[m][2] = pack2<T>(s[m][2 * kt + 1][0], s[m][2 * kt + 1][1]);
        a[m][3] = pack2<T>(s[m][2 * kt + 1][2], s[m][2 * kt + 1][3]);
      }
#pragma unroll
      for (int dn = 0; dn < DN; dn += 2) {
        uint32_t bv[4];
        const int tok = kt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = dn + (lane >> 4);
        ldmatrix_x4_trans(bv, vs + tok * C::row_bytes + ((ch ^ (tok & 7)) << 4));
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma_16816<T>(o[m][dn], a[m], bv[0], bv[1]);
          mma_16816<T>(o[m][dn + 1], a[m], bv[2], bv[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l_run[m][0] += __shfl_xor_sync(k_full_mask, l_run[m][0], off);
      l_run[m][1] += __shfl_xor_sync(k_full_mask, l_run[m][1], off);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rr = R0 + wrow + m * 16 + (lane >> 2) + half * 8;
      if (rr >= n_rows) continue;
      const int qi = rr / G, h = rr - qi * G;
      const int64_t orow = (static_cast<int64_t>(q0 + qi) * p.n_q_heads + g * G + h);
      const float L = l_run[m][half];
      if (n_split == 1) {
        const float inv = L > 0.f ? 1.f / L : 0.f;
        T* out = static_cast<T*>(p.o) + orow * D;
#pragma unroll
        for (int dn = 0; dn < DN; ++dn) {
          const int d = dn * 8 + 2 * (lane & 3);
          *reinterpret_cast<uint32_t*>(out + d) =
              pack2<T>(o[m][dn][2 * half] * inv, o[m][dn][2 * half + 1] * inv);
        }
      } else {
        const int64_t total_rows = static_cast<int64_t>(p.total_q) * p.n_q_heads;
        const int64_t w = split * total_rows + orow;
        float* wo = p.ws_o + w * D;
#pragma unroll
        for (int dn = 0; dn < DN; ++dn) {
          const int d = dn * 8 + 2 * (lane & 3);
          *reinterpret_cast<float2*>(wo + d) =
              make_float2(o[m][dn][2 * half], o[m][dn][2 * half + 1]);
        }
        if ((lane & 3) == 0) {
          p.ws_ml[w * 2] = m_run[m][half];
          p.ws_ml[w * 2 + 1] = L;
        }
      }
    }
  }
}

// One CTA per (query token, head) row: merge the split partial states.
template <class T>
__global__ void prefill_merge_kernel(const prefill_params p, int D) {
  griddep_wait();
  griddep_launch_dependents();
  const int64_t row = blockIdx.x;
  const int64_t total_rows = static_cast<int64_t>(p.total_q) * p.n_q_heads;
  float M = -INFINITY;
  for (int s = 0; s < p.n_splits; ++s) M = fmaxf(M, p.ws_ml[(s * total_rows + row) * 2]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f, L = 0.f;
    if (M != -INFINITY) {
      for (int s = 0; s < p.n_splits; ++s) {
        const float ms = p.ws_ml[(s * total_rows + row) * 2];
        if (ms == -INFINITY) continue;
        const float f = exp2f(ms - M);
        acc += p.ws_o[(s * total_rows + row) * D + d] * f;
        L += p.ws_ml[(s * total_rows + row) * 2 + 1] * f;
      }
    }
    static_cast<T*>(p.o)[row * D + d] = from_float<T>(L > 0.f ? acc / L : 0.f);
  }
}

}  // namespace sieve::cuda
