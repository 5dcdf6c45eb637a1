// CudaRunner: TokenSelect's selection on the device for one sequence of a step (exact paged
// q.K, the head soft vote, the fused top-k or the chain) and the per-sequence Selection Cache.
#include <cuda_runtime_api.h>

#include "core/log.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve {
using namespace gpu_internal;

namespace {
// The fused selection is probed for this budget at start; wider budgets run the chain.
constexpr int32_t k_fused_top_k = 2048;
}  // namespace

cuda::step_params CudaRunner::Impl::fused_select_params(const GpuPolicy& pol,
                                                        const cuda::select_budget& bu,
                                                        const int32_t* seq_len, int32_t* out_idx,
                                                        int32_t out_stride,
                                                        int32_t* out_count) const {
  cuda::step_params st;
  st.score = false;
  st.attend_on = false;
  st.scores = scores + int64_t{hp.n_head_kv} * score_stride;  // the layer's summed vote
  st.score_stride = score_stride;
  st.seq_len = seq_len;
  st.batch = 1;
  st.rows_per_seq = 1;
  st.max_len = lim.n_ctx;
  st.budget = bu;
  st.out_idx = out_idx;
  st.out_stride = out_stride;
  st.out_count = out_count;
  st.ws = step_ws;
  return st;
}

Status CudaRunner::Impl::init_selection() {
  slots.assign(S, Slot{});
  const int64_t G = hp.n_gqa(), L = hp.n_layer, n_kv = hp.n_head_kv;
  score_stride = cuda::score_row_stride(lim.n_ctx);
  score_chunk = std::max(512, cuda::score_chunk_tokens(hp.n_head_kv, lim.n_ctx, facts.n_sm));
  score_chunks = (lim.n_ctx + score_chunk - 1) / score_chunk;
  sparse_splits =
      cuda::decode_splits(hp.n_head_kv, k_fused_top_k + 128 + 512 + 1, facts.n_sm, hp.head_dim);
  SIEVE_TRY(mem.alloc_to(sc_logits, n_kv * G * score_stride, "selection scores"));
  SIEVE_TRY(mem.alloc_to(sc_stats, n_kv * score_chunks * G * 2, "selection scores"));
  SIEVE_TRY(mem.alloc_to(scores, (n_kv + 1) * score_stride, "selection scores"));
  SIEVE_TRY(
      mem.alloc_to(sel_ws, cuda::select_ws_bytes(hp.n_head_kv, lim.n_ctx), "selection workspace"));
  SIEVE_TRY(mem.alloc_to(sel_idx, n_kv * k_max_top_k, "selection"));
  SIEVE_TRY(mem.alloc_to(sel_cnt, n_kv, "selection"));
  SIEVE_TRY(mem.alloc_to(q_mean, hp.q_dim(), "mean query"));
  SIEVE_TRY(mem.alloc_to(q_mean_f, hp.q_dim(), "mean query"));
  // The fused selection (one launch instead of the chain's) if it runs for this shape: one
  // selection over zero scores at the longest length decides.
  SIEVE_TRY(
      mem.alloc_to(step_ws, cuda::step_ws_bytes(1) / sizeof(uint32_t) + 1, "selection workspace"));
  int32_t* probe_len = nullptr;
  SIEVE_TRY(mem.alloc_to(probe_len, 4, "selection workspace"));
  SIEVE_TRY(cuda_check(cudaMemcpy(probe_len, &lim.n_ctx, sizeof(int32_t), cudaMemcpyHostToDevice),
                       "copy"));
  SIEVE_TRY(cuda_check(cudaMemset(step_ws, 0, cuda::step_ws_bytes(1)), "memset"));
  SIEVE_TRY(cuda_check(cudaMemset(scores, 0, (n_kv + 1) * score_stride * sizeof(float)), "memset"));
  cuda::select_budget bu;
  bu.k_max = k_fused_top_k;
  bu.lo = 128;
  bu.tail = 513;
  GpuPolicy probe_pol;
  const Status probe = cuda::sparse_step(
      fused_select_params(probe_pol, bu, probe_len, sel_idx, k_max_top_k, sel_cnt),
      cuda::launch_cfg{stream, true});
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!probe.ok() || e != cudaSuccess) {
    (void)cudaGetLastError();  // a refused launch leaves no sticky error; clear the last one
    log_info(
        "cuda: the fused selection does not run for this shape ({}); the selection chain and no "
        "selection "
        "cache run instead",
        probe.ok() ? cudaGetErrorString(e) : probe.message());
    step_ws = nullptr;
  }
  // The Selection Cache, one row per (slot, layer).
  SIEVE_TRY(mem.alloc_to(sc_fp, S * L * hp.head_dim, "selection cache"));
  SIEVE_TRY(mem.alloc_to(sc_state, S * L * 4, "selection cache"));
  SIEVE_TRY(mem.alloc_to(sc_idx, S * L * sc_stride(), "selection cache"));
  SIEVE_TRY(mem.alloc_to(sc_cnt, S * L, "selection cache"));
  SIEVE_TRY(mem.alloc_to(sc_skip, S * L, "selection cache"));
  SIEVE_TRY(mem.alloc_to(sc_hits, int64_t{S}, "selection cache"));
  SIEVE_TRY(cuda_check(cudaMemset(sc_state, 0, S * L * 4 * sizeof(int32_t)), "memset"));
  SIEVE_TRY(cuda_check(cudaMemset(sc_cnt, 0, S * L * sizeof(int32_t)), "memset"));
  SIEVE_TRY(cuda_check(cudaMemset(sc_skip, 0, S * L * sizeof(int32_t)), "memset"));
  SIEVE_TRY(cuda_check(cudaMemset(sc_hits, 0, S * sizeof(uint32_t)), "memset"));
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&hits_host), S * sizeof(uint32_t)),
                       "pinned memory"));
  std::fill(hits_host, hits_host + S, 0u);
  return {};
}

Status CudaRunner::Impl::select_tokens(int il, int32_t b, const bf16* qsel, int32_t n_tok,
                                       cuda::token_set& set) {
  const cuda::launch_cfg lc{stream, true};
  const StepEntry& e = order[b];
  const GpuPolicy& pol = pols[e.pol];
  const int64_t L = hp.n_layer;
  const int64_t row = int64_t{e.slot} * L + il;
  const bool fused = step_ws != nullptr && pol.layer_vote && pol.top_k <= k_fused_top_k;
  // With the cache (decode, scope=layer, fused selection) the sequence's own row for the
  // layer, wide enough for the tokens a reuse appends; else the shared rows.
  const bool cached = e.decode && pol.selection_cache && fused;
  int32_t* const out_idx = cached ? sc_idx + row * sc_stride() : sel_idx;
  int32_t* const out_cnt = cached ? sc_cnt + row : sel_cnt;
  const int32_t out_stride = cached ? sc_stride() : k_max_top_k;
  const int32_t* const skip = cached ? sc_skip + row : nullptr;
  const int32_t* const seq_len = dev(off_seq_len) + b;
  if (cached) {
    cuda::sel_cache_params cp;
    cp.q = qsel;
    cp.pos = dev(off_pos) + e.row;
    cp.seq_len = seq_len;
    cp.n_q_heads = hp.n_head;
    cp.head_dim = hp.head_dim;
    cp.n_rot = hp.n_rot;
    cp.inv_freq = w.layers[il].rope_inv_freq;
    cp.neox = hp.rope_mode == RopeMode::neox;
    cp.theta = pol.theta;
    cp.n_sink = pol.sinks;
    cp.n_window = pol.local;
    cp.fp = sc_fp + row * hp.head_dim;
    cp.state = sc_state + 4 * row;
    cp.sel_idx = out_idx;
    cp.sel_count = out_cnt;
    cp.max_gap = k_max_gap;
    cp.skip = sc_skip + row;
    cp.hits = sc_hits + e.slot;
    SIEVE_TRY(cuda::selection_cache_probe(cp, lc));
  }
  const int32_t G = hp.n_gqa();
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = pol.local + e.n;
  cuda::select_params sel;
  sel.score_stride = score_stride;
  sel.seq_len = seq_len;
  sel.rows_per_seq = sel_rows;
  sel.n_rows = sel_rows;
  sel.budget = bu;
  sel.ws.base = sel_ws;
  sel.ws.n_rows = rows;
  sel.ws.max_tiles = cuda::select_max_tiles(lim.n_ctx);
  sel.out_idx = out_idx;
  sel.out_stride = out_stride;
  sel.out_count = out_cnt;
  // exact paged q.K (chunks past the length are empty) -> per-head softmax summed -> top-k
  cuda::decode_params s;
  s.kv = kv_view(il, b, 1, n_tok);
  s.q = qsel;
  s.n_q_heads = hp.n_head;
  s.scale = hp.attn_scale;
  s.logits = sc_logits;
  s.logit_stride = score_stride;
  s.stats = sc_stats;
  s.chunk_tokens = score_chunk;
  s.n_splits = score_chunks;
  s.zero_ws = pol.layer_vote || fused ? nullptr : sel_ws;
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
  vt.max_len = lim.n_ctx;
  // scope=layer: every head of the layer votes into one row (scores' last), in the same launch
  float* summed = scores + int64_t{rows} * score_stride;
  vt.fold = pol.layer_vote ? rows : 1;
  vt.scores = pol.layer_vote ? summed : scores;
  vt.score_stride = score_stride;
  vt.hist.seq_len = seq_len;
  vt.hist.rows_per_seq = sel_rows;
  vt.hist.budget = bu;
  if (!pol.layer_vote && !fused) vt.hist.ws = sel.ws;
  vt.skip = skip;
  SIEVE_TRY(cuda::soft_vote(vt, lc));
  if (fused) {
    cuda::step_params st = fused_select_params(pol, bu, seq_len, out_idx, out_stride, out_cnt);
    st.skip = skip;
    SIEVE_TRY(cuda::sparse_step(st, lc));
  } else if (pol.layer_vote) {
    sel.scores = summed;
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
