// Decode attention over a paged KV cache and a token list (dense, or sinks + selection +
// window), split-K across CTAs; and, in score mode, the exact paged q.K scorer.
//
// Shape of the work: one CTA = (split, kv head g, sequence b). The G query heads of the
// KV group are the N dimension of a tensor-core product, tokens the M dimension:
//   S^T[tokens, heads] = K_tile[tokens, D] . q^T[D, heads]        (mma m16n8k16, N = 8 >= G)
//   O^T[D, heads]     += V_tile^T[D, tokens] . P[tokens, heads]
// so K and V are read once per group, q lives in registers, and the probabilities move
// from the S accumulators into the B operand of the second product with movmatrix (no
// shared-memory round trip). Each of the 4 warps owns 16 tokens of every 64-token tile
// and keeps its own online-softmax state; warps merge at the end, splits merge through
// the last CTA of the group (an atomic counter that the last CTA resets to zero).
// Tiles are gathered with cp.async, 16 bytes per thread-op, into an XOR-swizzled ring
// of 2-4 stages; rows past the end are zero-filled so they stay finite.
#pragma once

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/token_set.cuh"

namespace sieve::cuda {

template <int D, bool SCORE>
struct decode_cfg {
  static constexpr int warps = 4;
  static constexpr int threads = 128;
  // tokens per pipeline stage, 16 per warp per 64-token sub-block. Measured on the H200
  // (2026-11-29): 128-token stages in score mode read K 6% faster at 1M but 25% slower at
  // 128K than 64-token stages with three CTAs per SM, so both modes use 64.
  static constexpr int tile = 64;
  static constexpr int row_bytes = D * 2;
  static constexpr int tensors = SCORE ? 1 : 2;
  static constexpr int stage_bytes = tile * row_bytes * tensors;
  static constexpr int stages_raw = 98304 / stage_bytes;
  static constexpr int stages = stages_raw < 2 ? 2 : (stages_raw > 4 ? 4 : stages_raw);
  static constexpr int pipe_bytes = stages * stage_bytes;
  static constexpr int merge_bytes = warps * 8 * (D + 2) * 4;
  static constexpr int max_splits = 256;
  static constexpr int split_ml_bytes = max_splits * 8 * 2 * 4;
  static constexpr int smem_bytes_a = pipe_bytes > merge_bytes ? pipe_bytes : merge_bytes;
  static constexpr int smem_bytes = smem_bytes_a > split_ml_bytes ? smem_bytes_a : split_ml_bytes;
  static_assert(D % 64 == 0, "head_dim must be 64, 128 or 256");
};

// One work item (split, kv head g, sequence b) of decode attention / exact scoring, run by a
// whole CTA of 128 threads over `smem` (C::smem_bytes). decode_kernel runs one per CTA; the
// fused sparse step (sparse_step.cuh) loops over items inside a persistent CTA, so the body
// must not assume that the CTA's shared memory is fresh (callers __syncthreads() between).
// Thread 0's timing stamps of CTA (split, row_id = b * n_kv + g) in attention mode with
// p.phase_ns set (decode_params::phase_ns); null otherwise.
template <bool SCORE>
__device__ __forceinline__ uint64_t* decode_stamp_slots(const decode_params& p, int row_id,
                                                        int split) {
  if (SCORE || p.phase_ns == nullptr || threadIdx.x != 0) return nullptr;
  return p.phase_ns + (static_cast<int64_t>(row_id) * p.n_splits + split) * decode_n_stamps;
}

template <class T, int D, bool SCORE>
__device__ __forceinline__ void decode_block(const decode_params& p, const int split, const int g,
                                             const int b, uint8_t* smem) {
  using C = decode_cfg<D, SCORE>;
  constexpr int KD = D / 16;      // k-steps of the S product, m-tiles of the O product
  constexpr int CPR = D / 8;      // 16-byte chunks per row
  constexpr int RPP = 128 / CPR;  // rows one pass of the CTA loads
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int n_kv = p.kv.n_kv_heads;
  const int G = p.n_q_heads / n_kv;
  const int row_id = b * n_kv + g;
  const page_table& pt = p.kv.pages;

  if constexpr (SCORE) {
    if (p.zero_ws != nullptr && split == 0) {
      uint4* z = reinterpret_cast<uint4*>(static_cast<uint8_t*>(p.zero_ws) + row_id * p.zero_bytes);
      for (int i = tid; i < p.zero_bytes / 16; i += C::threads) z[i] = make_uint4(0, 0, 0, 0);
    }
  }

  const int len = seq_len_of(pt, b);
  const int first_page = pt.indptr[b];
  const token_list tl =
      SCORE ? make_token_list(token_set{}, b, g, len, 1) : make_token_list(p.set, b, g, len, 1);
  int begin, end;
  if constexpr (SCORE) {
    begin = min(split * p.chunk_tokens, len);
    end = min(len, begin + p.chunk_tokens);
  } else {
    const int per = ceil_div(ceil_div(tl.total, p.n_splits), C::tile) * C::tile;
    begin = min(split * per, tl.total);
    end = min(tl.total, begin + per);
  }
  const int n_tiles = ceil_div(end - begin, C::tile);

  // q as the B operand: b0 = q[head lane/4][16kk + 2(lane%4) + {0,1}], b1 = the same + 8.
  uint32_t qf[KD][2];
  {
    const int hq = lane >> 2;
    const T* qrow =
        static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.n_q_heads + g * G + hq) * D;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      if (hq < G) {
        qf[kk][0] = *reinterpret_cast<const uint32_t*>(qrow + kk * 16 + 2 * (lane & 3));
        qf[kk][1] = *reinterpret_cast<const uint32_t*>(qrow + kk * 16 + 8 + 2 * (lane & 3));
      } else {
        qf[kk][0] = qf[kk][1] = 0u;
      }
    }
  }
  const float sl2 = p.scale * k_log2e;
  uint64_t* stamps = decode_stamp_slots<SCORE>(p, row_id, split);
  auto stamp = [&](int i) {
    if (stamps != nullptr) stamps[i] = global_ns();
  };

  const T* kbase = static_cast<const T*>(p.kv.k);
  const T* vbase = static_cast<const T*>(p.kv.v);
  // The gather of a tile is a chain of three dependent loads: the rows' list entries (sparse
  // lists), their page ids, then the cp.asyncs of K/V. Each link is issued one iteration ahead
  // of its consumer, so no load is waited for in the iteration that issues it: iteration `it`
  // issues the cp.asyncs of tile it+P (page ids loaded in iteration it-1), the page ids of tile
  // it+P+1 (list entries loaded in iteration it-1) and the list entries of tile it+P+2. Waiting
  // for a page id in the iteration that loads it (one HBM round trip per 64-token tile) held
  // the exact scorer to 2.3-3.1 TB/s and the sparse gather to a few us per tile. The two slots
  // of in-flight state swap roles every iteration without a register copy (a copy would wait
  // for the pending loads).
  constexpr int ROWS = C::tile / RPP;  // rows of a tile this thread copies
  const int col = tid % CPR;
  const int r_first = tid / CPR;
  struct gather_slot {
    int tok[ROWS];  // token positions (-1: past the end)
    int pid[ROWS];  // their physical page ids
  };
  auto load_tokens = [&](int t_idx, gather_slot& s) {
    const int v0 = begin + t_idx * C::tile + r_first;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
      const int vi = v0 + j * RPP;
      s.tok[j] = vi < end ? tl.token(vi) : -1;
    }
  };
  auto load_pages = [&](gather_slot& s) {
#pragma unroll
    for (int j = 0; j < ROWS; ++j)
      s.pid[j] = s.tok[j] >= 0 ? __ldg(pt.indices + first_page + page_of(pt, s.tok[j])) : 0;
  };
  auto tile_issue = [&](int stage, const gather_slot& s) {
    uint8_t* ks = smem + stage * C::stage_bytes;
    uint8_t* vs = ks + C::tile * C::row_bytes;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
      const int r = r_first + j * RPP;
      const int soff = r * C::row_bytes + ((col ^ (r & 7)) << 4);
      const int64_t row = static_cast<int64_t>(s.pid[j]) * pt.page_size + slot_of(pt, s.tok[j]);
      const int64_t off = s.tok[j] >= 0 ? (row * n_kv + g) * D + col * 8 : 0;
      cp_async16(ks + soff, kbase + off, s.tok[j] >= 0);
      if constexpr (!SCORE) cp_async16(vs + soff, vbase + off, s.tok[j] >= 0);
    }
  };
  // Prologue, batched: the list entries of tiles 0..P+1, the page ids of tiles 0..P, then the
  // cp.asyncs of tiles 0..P-1. Slot a holds tile P (entries + pages), slot b tile P+1 (entries).
  constexpr int P = C::stages - 1;
  gather_slot sa, sb;
  {
    gather_slot pro[P];
#pragma unroll
    for (int s = 0; s < P; ++s) load_tokens(s, pro[s]);  // rows past the end read as -1
    load_tokens(P, sa);
    load_tokens(P + 1, sb);
#pragma unroll
    for (int s = 0; s < P; ++s) load_pages(pro[s]);
    load_pages(sa);
#pragma unroll
    for (int s = 0; s < P; ++s) {
      if (s < n_tiles) tile_issue(s, pro[s]);
      cp_async_commit();
    }
  }
  stamp(ds_issued);

  // Per lane: heads h0 = 2(lane%4), h0+1; tokens lane/4 and lane/4 + 8 of the warp's 16.
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  float o[SCORE ? 1 : KD][4];
#pragma unroll
  for (int i = 0; i < (SCORE ? 1 : KD); ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  const int h0 = 2 * (lane & 3);

  // One pipeline iteration: wait for tile `it`, issue the cp.asyncs of tile it+P from `cur`,
  // the page ids of tile it+P+1 into `nxt` (its list entries came in the last iteration) and
  // the list entries of tile it+P+2 into `cur`, then the tensor-core work of tile `it`.
  auto tile_step = [&](const int it, gather_slot& cur, gather_slot& nxt) {
    cp_async_wait<C::stages - 2>();
    __syncthreads();
    const int nt = it + P;
    if (nt < n_tiles) tile_issue(nt % C::stages, cur);
    cp_async_commit();
    load_pages(nxt);
    load_tokens(nt + 2, cur);  // -1 past the end

    const uint8_t* ks = smem + (it % C::stages) * C::stage_bytes;
    const uint8_t* vs = ks + C::tile * C::row_bytes;

#pragma unroll
    for (int sub = 0; sub < C::tile / 64; ++sub) {
      const int r0 = sub * 64 + warp * 16;
      float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        uint32_t a[4];
        const int row = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int ch = kk * 2 + (lane >> 4);
        ldmatrix_x4(a, ks + row * C::row_bytes + ((ch ^ (row & 7)) << 4));
        mma_16816<T>(c, a, qf[kk][0], qf[kk][1]);
      }
      const int vi_lo = begin + it * C::tile + r0 + (lane >> 2);
      const bool ok_lo = vi_lo < end;
      const bool ok_hi = vi_lo + 8 < end;
      float s0 = ok_lo ? c[0] * sl2 : -INFINITY;
      float s1 = ok_lo ? c[1] * sl2 : -INFINITY;
      float s2 = ok_hi ? c[2] * sl2 : -INFINITY;
      float s3 = ok_hi ? c[3] * sl2 : -INFINITY;

      if constexpr (SCORE) {
        // dense list: the token position is the list position
        float* lg = p.logits + static_cast<int64_t>(row_id) * G * p.logit_stride;
        if (h0 < G) {
          if (ok_lo) lg[h0 * p.logit_stride + vi_lo] = s0;
          if (ok_hi) lg[h0 * p.logit_stride + vi_lo + 8] = s2;
        }
        if (h0 + 1 < G) {
          if (ok_lo) lg[(h0 + 1) * p.logit_stride + vi_lo] = s1;
          if (ok_hi) lg[(h0 + 1) * p.logit_stride + vi_lo + 8] = s3;
        }
        // the statistics cover the stats range only (the tokens a selection picks from)
        const int r_hi = len - p.stats_tail;
        if (vi_lo < p.stats_lo || vi_lo >= r_hi) s0 = s1 = -INFINITY;
        if (vi_lo + 8 < p.stats_lo || vi_lo + 8 >= r_hi) s2 = s3 = -INFINITY;
      }

      float mx0 = fmaxf(s0, s2), mx1 = fmaxf(s1, s3);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(k_full_mask, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(k_full_mask, mx1, off));
      }
      const float mn0 = fmaxf(m_run[0], mx0), mn1 = fmaxf(m_run[1], mx1);
      const float ref0 = mn0 == -INFINITY ? 0.f : mn0;
      const float ref1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = fast_exp2(m_run[0] - ref0), al1 = fast_exp2(m_run[1] - ref1);
      const float p0 = fast_exp2(s0 - ref0), p1 = fast_exp2(s1 - ref1);
      const float p2 = fast_exp2(s2 - ref0), p3 = fast_exp2(s3 - ref1);
      l_run[0] = l_run[0] * al0 + p0 + p2;
      l_run[1] = l_run[1] * al1 + p1 + p3;
      m_run[0] = mn0;
      m_run[1] = mn1;

      if constexpr (!SCORE) {
        const uint32_t b0 = movmatrix_trans(pack2<T>(p0, p1));
        const uint32_t b1 = movmatrix_trans(pack2<T>(p2, p3));
#pragma unroll
        for (int mt = 0; mt < KD; ++mt) {
          o[mt][0] *= al0;
          o[mt][1] *= al1;
          o[mt][2] *= al0;
          o[mt][3] *= al1;
          uint32_t a[4];
          const int tok = r0 + (lane & 7) + ((lane >> 4) << 3);
          const int ch = mt * 2 + ((lane >> 3) & 1);
          ldmatrix_x4_trans(a, vs + tok * C::row_bytes + ((ch ^ (tok & 7)) << 4));
          mma_16816<T>(o[mt], a, b0, b1);
        }
      }
    }
  };
  // Unrolled by two so that the slots swap roles without a register copy. Measured on the H200
  // against one loop body choosing the roles by a uniform branch: dense decode 7-10% faster,
  // exact scoring 2-6% (bench/RESULTS-cuda.md, run 6).
  for (int it = 0; it < n_tiles; it += 2) {
    tile_step(it, sa, sb);
    if (it == 0) stamp(ds_first);
    if (it + 1 < n_tiles) tile_step(it + 1, sb, sa);
  }
  cp_async_wait<0>();
  stamp(ds_loop);

  // token-direction sums of this warp
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
    l_run[0] += __shfl_xor_sync(k_full_mask, l_run[0], off);
    l_run[1] += __shfl_xor_sync(k_full_mask, l_run[1], off);
  }
  __syncthreads();  // the pipeline ring is reused below

  float* sm_o = reinterpret_cast<float*>(smem);  // [warps][8][D]
  float* sm_ml = sm_o + C::warps * 8 * D;        // [warps][8][2]
  if constexpr (!SCORE) {
#pragma unroll
    for (int mt = 0; mt < KD; ++mt) {
      const int d0 = mt * 16 + (lane >> 2);
      sm_o[(warp * 8 + h0) * D + d0] = o[mt][0];
      sm_o[(warp * 8 + h0 + 1) * D + d0] = o[mt][1];
      sm_o[(warp * 8 + h0) * D + d0 + 8] = o[mt][2];
      sm_o[(warp * 8 + h0 + 1) * D + d0 + 8] = o[mt][3];
    }
  }
  if (lane < 4) {
    sm_ml[(warp * 8 + h0) * 2 + 0] = m_run[0];
    sm_ml[(warp * 8 + h0) * 2 + 1] = l_run[0];
    sm_ml[(warp * 8 + h0 + 1) * 2 + 0] = m_run[1];
    sm_ml[(warp * 8 + h0 + 1) * 2 + 1] = l_run[1];
  }
  __syncthreads();

  if constexpr (SCORE) {
    if (tid < G) {
      float m = -INFINITY, l = 0.f;
#pragma unroll
      for (int w = 0; w < C::warps; ++w)
        merge_ms(m, l, sm_ml[(w * 8 + tid) * 2], sm_ml[(w * 8 + tid) * 2 + 1]);
      float* st = p.stats + ((static_cast<int64_t>(row_id) * p.n_splits + split) * G + tid) * 2;
      st[0] = m;
      st[1] = l;
    }
    return;
  } else {
    const int S = p.n_splits;
    T* out = static_cast<T*>(p.o) + (static_cast<int64_t>(b) * p.n_q_heads + g * G) * D;
    for (int idx = tid; idx < G * D; idx += C::threads) {
      const int h = idx / D, d = idx - h * D;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < C::warps; ++w) M = fmaxf(M, sm_ml[(w * 8 + h) * 2]);
      float acc = 0.f, L = 0.f;
      if (M != -INFINITY) {
#pragma unroll
        for (int w = 0; w < C::warps; ++w) {
          const float f = exp2f(sm_ml[(w * 8 + h) * 2] - M);
          acc += sm_o[(w * 8 + h) * D + d] * f;
          L += sm_ml[(w * 8 + h) * 2 + 1] * f;
        }
      }
      if (S == 1) {
        out[h * D + d] = from_float<T>(L > 0.f ? acc / L : 0.f);
        if (d == 0 && p.lse != nullptr)
          p.lse[static_cast<int64_t>(b) * p.n_q_heads + g * G + h] =
              L > 0.f ? (M + log2f(L)) / k_log2e : -INFINITY;
      } else {
        const int64_t base = (static_cast<int64_t>(row_id) * S + split) * G + h;
        p.ws_o[base * D + d] = acc;
        if (d == 0) {
          p.ws_ml[base * 2 + 0] = M;
          p.ws_ml[base * 2 + 1] = L;
        }
      }
    }
    stamp(ds_partial);
    if (S == 1) return;

    // Last CTA of the group merges the splits (classic threadfence reduction).
    __shared__ bool s_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const uint32_t prev = atomicAdd(p.ws_counter + row_id, 1u);
      s_last = prev == static_cast<uint32_t>(S - 1);
    }
    __syncthreads();
    stamp(ds_counted);
    if (!s_last) return;
    __threadfence();
    // Weights of the splits: w[s][h] = 2^(m_s - M_h) / L_h (normalisation folded in), then
    // each thread sums one float4 of o over all splits, 8 loads in flight.
    float* sm_w = reinterpret_cast<float*>(smem);  // [S][G]
    float* sm_l = sm_w + S * G;                    // [S][G]
    float* sm_mh = sm_l + S * G;                   // [G] M_h, then [G] 1/L_h
    const float* gml = p.ws_ml + static_cast<int64_t>(row_id) * S * G * 2;
    for (int i = tid; i < S * G; i += C::threads) {
      sm_w[i] = __ldcg(gml + 2 * i);
      sm_l[i] = __ldcg(gml + 2 * i + 1);
    }
    __syncthreads();
    if (tid < G) {
      float M = -INFINITY;
      for (int s = 0; s < S; ++s) M = fmaxf(M, sm_w[s * G + tid]);
      float L = 0.f;
      if (M != -INFINITY)
        for (int s = 0; s < S; ++s) L += sm_l[s * G + tid] * exp2f(sm_w[s * G + tid] - M);
      sm_mh[tid] = M;
      sm_mh[G + tid] = L;
      if (p.lse != nullptr)
        p.lse[static_cast<int64_t>(b) * p.n_q_heads + g * G + tid] =
            L > 0.f ? (M + log2f(L)) / k_log2e : -INFINITY;
    }
    __syncthreads();
    for (int i = tid; i < S * G; i += C::threads) {
      const int h = i % G;
      const float M = sm_mh[h], L = sm_mh[G + h];
      sm_w[i] = (M == -INFINITY || L <= 0.f || sm_w[i] == -INFINITY) ? 0.f : exp2f(sm_w[i] - M) / L;
    }
    __syncthreads();
    const float4* go =
        reinterpret_cast<const float4*>(p.ws_o + static_cast<int64_t>(row_id) * S * G * D);
    constexpr int D4 = D / 4;
    for (int v = tid; v < G * D4; v += C::threads) {
      const int h = v / D4;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      int s = 0;
      for (; s + 8 <= S; s += 8) {
        float4 x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) x[u] = __ldcg(go + static_cast<int64_t>((s + u) * G) * D4 + v);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const float w = sm_w[(s + u) * G + h];
          acc.x += w * x[u].x;
          acc.y += w * x[u].y;
          acc.z += w * x[u].z;
          acc.w += w * x[u].w;
        }
      }
      for (; s < S; ++s) {
        const float4 x = __ldcg(go + static_cast<int64_t>(s * G) * D4 + v);
        const float w = sm_w[s * G + h];
        acc.x += w * x.x;
        acc.y += w * x.y;
        acc.z += w * x.z;
        acc.w += w * x.w;
      }
      const int d = (v - h * D4) * 4;
      uint2 packed;
      packed.x = pack2<T>(acc.x, acc.y);
      packed.y = pack2<T>(acc.z, acc.w);
      *reinterpret_cast<uint2*>(out + h * D + d) = packed;
    }
    if (tid == 0) p.ws_counter[row_id] = 0u;  // ready for the next launch
    stamp(ds_merged);
  }
}

template <class T, int D, bool SCORE>
__global__ void __launch_bounds__(128) decode_kernel(const decode_params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  // grid (n_splits, n_kv, batch): the row is b * n_kv + g
  uint64_t* stamps = decode_stamp_slots<SCORE>(p, blockIdx.z * gridDim.y + blockIdx.y, blockIdx.x);
  if (stamps != nullptr) stamps[ds_entry] = global_ns();
  griddep_wait();
  if (stamps != nullptr) stamps[ds_ready] = global_ns();
  griddep_launch_dependents();
  if constexpr (SCORE) {
    if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  }
  decode_block<T, D, SCORE>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}

}  // namespace sieve::cuda
