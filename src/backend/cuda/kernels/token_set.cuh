// The token list one (sequence, kv head) attends to, as a virtual array: dense [0, len), or
// sinks + selected positions + window-and-queries. Attention kernels walk it by position
// i in [0, total) and gather each token's K/V rows in place (no copies of K/V).
#pragma once

#include "backend/cuda/kernels/common.cuh"

namespace sieve::cuda {

struct token_list {
  const int32_t* sel = nullptr;  // null: dense
  int n_sink = 0;                // sink part: positions [0, n_sink)
  int n_sel = 0;                 // selected part
  int w_start = 0;               // window part: positions [w_start, len)
  int len = 0;
  int total = 0;

  __device__ __forceinline__ int token(int i) const {
    if (sel == nullptr || i < n_sink) return i;
    i -= n_sink;
    // L2 path, not the read-only cache: the fused step reads lists written in the same launch
    if (i < n_sel) return __ldcg(sel + i);
    return w_start + (i - n_sel);
  }
};

// n_queries: how many of the newest tokens are queries (1 for decode).
__device__ __forceinline__ token_list make_token_list(const token_set& s, int b, int g, int len,
                                                      int n_queries) {
  token_list t;
  t.len = len;
  if (s.sel_idx == nullptr) {
    t.total = len;
    return t;
  }
  const int row = b * s.sel_heads + (s.sel_heads == 1 ? 0 : g);
  const int q_start = len - n_queries;
  t.n_sink = min(s.n_sink, len);
  t.w_start = max(q_start - s.n_window, t.n_sink);
  t.sel = s.sel_idx + static_cast<int64_t>(row) * s.sel_stride;
  t.n_sel = s.sel_count[row];
  t.total = t.n_sink + t.n_sel + (len - t.w_start);
  return t;
}

}  // namespace sieve::cuda
