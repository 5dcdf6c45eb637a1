// TokenSelect's selection on the device for a session: exact scores, the head soft vote,
// the fused top-k, and the Selection Cache.
#include "gpu/gpu_session_impl.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>

#include "core/log.h"

namespace sieve {
using namespace gpu_internal;

cuda::step_params GpuSession::Impl::fused_select_params(const cuda::select_budget& bu, int32_t* out_idx,
                                                        int32_t out_stride, int32_t* out_count) const {
  const int32_t rows = pol.layer_vote ? 1 : hp.n_head_kv;
  cuda::step_params st;
  st.score = false;
  st.attend_on = false;
  st.scores = pol.layer_vote ? scores + int64_t{hp.n_head_kv} * score_stride : scores;
  st.score_stride = score_stride;
  st.seq_len = seqlen_dev();
  st.batch = rows;
  st.rows_per_seq = rows;
  st.max_len = max_ctx;
  st.budget = bu;
  st.out_idx = out_idx;
  st.out_stride = out_stride;
  st.out_count = out_count;
  st.ws = step_ws;
  return st;
}

// One selection over zero scores at the longest length decides whether the fused selection
// runs here (shared memory, cluster or grid residency for this shape); the chain otherwise.
Status GpuSession::Impl::init_fused_select() {
  const int32_t rows = pol.layer_vote ? 1 : hp.n_head_kv;
  auto ws = mem.alloc<uint8_t>(cuda::step_ws_bytes(rows), "selection workspace");
  if (!ws) return ws.error();
  step_ws = reinterpret_cast<uint32_t*>(*ws);
  SIEVE_TRY(cuda_check(cudaMemsetAsync(step_ws, 0, cuda::step_ws_bytes(rows), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(scores, 0, (hp.n_head_kv + 1) * score_stride * sizeof(float), stream), "memset"));
  io_host[3] = max_ctx;  // the probe's length
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(io_dev, io_host, k_io_head * sizeof(int32_t), cudaMemcpyHostToDevice, stream), "copy"));
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = pol.local + 1;
  const Status probe =
      cuda::sparse_step(fused_select_params(bu, sel_idx, pol.top_k, sel_cnt), cuda::launch_cfg{stream, true});
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!probe.ok() || e != cudaSuccess) {
    (void)cudaGetLastError();  // a refused launch leaves no sticky error; clear the last one
    step_ws = nullptr;
  }
  return {};
}

Status GpuSession::Impl::init_selection_cache() {
  if (step_ws == nullptr) {  // the probe's skip reaches the fused selection only
    log_warn("gpu: the fused selection does not run for this shape, so the selection cache is off");
    return {};
  }
  const int32_t L = hp.n_layer;
  auto fp = mem.alloc<float>(int64_t{L} * hp.head_dim, "selection cache");
  auto st = mem.alloc<int32_t>(4 * L, "selection cache");
  auto ix = mem.alloc<int32_t>(int64_t{L} * sc_stride(), "selection cache");
  auto ct = mem.alloc<int32_t>(L, "selection cache");
  auto sk = mem.alloc<int32_t>(L, "selection cache");
  auto hi = mem.alloc<uint32_t>(1, "selection cache");
  if (!fp || !st || !ix || !ct || !sk || !hi) return make_error("cuda: cannot allocate the selection cache");
  sc_fp = *fp;
  sc_state = *st;
  sc_idx = *ix;
  sc_cnt = *ct;
  sc_skip = *sk;
  sc_hits = *hi;
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&hits_host), sizeof(uint32_t)), "pinned memory"));
  cache_on = true;
  return clear_selection_cache();
}

// A new sequence: no layer has a fingerprint, no hits counted.
Status GpuSession::Impl::clear_selection_cache() {
  if (!cache_on) return {};
  *hits_host = 0;
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_state, 0, 4 * hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_cnt, 0, hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_skip, 0, hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_hits, 0, sizeof(uint32_t), stream), "memset"));
  return cuda_check(cudaStreamSynchronize(stream), "selection cache reset");
}

Status GpuSession::Impl::select_tokens(int il, const bf16* qsel, int32_t tail, cuda::token_set& set, bool decode) {
  const cuda::launch_cfg lc{stream, true};
  // With the cache (decode, scope=layer, fused selection) the layer's own row, wide enough for
  // the tokens a reuse appends; else the shared rows.
  const bool cached = decode && cache_on;
  int32_t* const out_idx = cached ? sc_idx + int64_t{il} * sc_stride() : sel_idx;
  int32_t* const out_cnt = cached ? sc_cnt + il : sel_cnt;
  const int32_t out_stride = cached ? sc_stride() : pol.top_k;
  const int32_t* const skip = cached ? sc_skip + il : nullptr;
  if (cached) {
    cuda::sel_cache_params cp;
    cp.q = qsel;
    cp.pos = pos_dev();
    cp.seq_len = seqlen_dev();
    cp.n_q_heads = hp.n_head;
    cp.head_dim = hp.head_dim;
    cp.n_rot = hp.n_rot;
    cp.rope_base = hp.rope_base[il];
    cp.neox = hp.rope_mode == RopeMode::neox;
    cp.theta = pol.theta;
    cp.n_sink = pol.sinks;
    cp.n_window = pol.local;
    cp.fp = sc_fp + int64_t{il} * hp.head_dim;
    cp.state = sc_state + 4 * il;
    cp.sel_idx = out_idx;
    cp.sel_count = out_cnt;
    cp.max_gap = k_max_gap;
    cp.skip = sc_skip + il;
    cp.hits = sc_hits;
    SIEVE_TRY(cuda::selection_cache_probe(cp, lc));
  }
  const int32_t G = hp.n_gqa();
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = tail;
  cuda::select_params sel;
  sel.score_stride = score_stride;
  sel.seq_len = seqlen_dev();
  sel.rows_per_seq = sel_rows;
  sel.n_rows = sel_rows;
  sel.budget = bu;
  sel.ws.base = sel_ws;
  sel.ws.n_rows = rows;
  sel.ws.max_tiles = cuda::select_max_tiles(max_ctx);
  sel.out_idx = out_idx;
  sel.out_stride = out_stride;
  sel.out_count = out_cnt;
  // exact paged q.K (chunks past the length are empty) -> per-head softmax summed -> top-k
  cuda::decode_params s = decode_base(il, qsel);
  s.logits = sc_logits;
  s.logit_stride = score_stride;
  s.stats = sc_stats;
  s.chunk_tokens = score_chunk;
  s.n_splits = score_chunks;
  s.zero_ws = pol.layer_vote || step_ws ? nullptr : sel_ws;
  s.zero_bytes = cuda::select_ws_header_bytes();
  s.skip = skip;
  SIEVE_TRY(cuda::score_exact(s, lc));
  cuda::soft_vote_params vt;
  vt.logits = sc_logits;
  vt.logit_stride = score_stride;
  vt.stats = sc_stats;
  vt.n_chunks = score_chunks;
  vt.G = G;
  vt.n_rows = rows;
  vt.max_len = max_ctx;
  // scope=layer: every head of the layer votes into one row (scores' last), in the same launch
  float* summed = scores + int64_t{rows} * score_stride;
  vt.fold = pol.layer_vote ? rows : 1;
  vt.scores = pol.layer_vote ? summed : scores;
  vt.score_stride = score_stride;
  vt.hist.seq_len = seqlen_dev();
  vt.hist.rows_per_seq = sel_rows;
  vt.hist.budget = bu;
  if (!pol.layer_vote && !step_ws) vt.hist.ws = sel.ws;
  vt.skip = skip;
  SIEVE_TRY(cuda::soft_vote(vt, lc));
  if (pol.layer_vote) sel.scores = summed;
  if (step_ws) {  // cache_on implies the fused selection
    cuda::step_params st = fused_select_params(bu, out_idx, out_stride, out_cnt);
    st.skip = skip;
    SIEVE_TRY(cuda::sparse_step(st, lc));
  } else if (pol.layer_vote) {
    SIEVE_TRY(cuda::select(sel, false, lc));
  } else {
    sel.scores = scores;
    SIEVE_TRY(cuda::select(sel, true, lc));
  }
  set.sel_idx = out_idx;
  set.sel_count = out_cnt;
  set.sel_stride = out_stride;
  set.sel_heads = sel_rows;
  set.n_sink = pol.sinks;
  set.n_window = pol.local;
  return {};
}

}  // namespace sieve
