// CudaRunner: a sparse policy's selection on the device for one sequence of a step (exact paged
// q.K or sketch keys, the head soft vote or the raw sum, max-pooling, the fused top-k or the
// chain's top-k / top-p; none for StreamingLLM), the per-sequence Selection Cache, and the
// sketch keys' pages and projections.
#include <cuda_runtime_api.h>

#include <cmath>

#include "core/log.h"
#include "engine/sparse_seq.h"
#include "gpu/cuda_runner_impl.h"
#include "sparse/sketch.h"

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
  // (rows: one per KV head, or one per query head for the hard vote's top-k per head)
  SIEVE_TRY(mem.alloc_to(sel_ws,
                         cuda::select_ws_bytes(std::max(hp.n_head_kv, hp.n_head), lim.n_ctx),
                         "selection workspace"));
  SIEVE_TRY(mem.alloc_to(sel_idx, n_kv * k_max_top_k, "selection"));
  SIEVE_TRY(mem.alloc_to(sel_cnt, n_kv, "selection"));
  SIEVE_TRY(mem.alloc_to(q_mean, hp.q_dim(), "mean query"));
  SIEVE_TRY(mem.alloc_to(q_mean_f, hp.q_dim(), "mean query"));
  SIEVE_TRY(mem.alloc_to(sc_post, (n_kv + 1) * score_stride, "selection scores"));
  sk_chunk = cuda::sketch_chunk_tokens(hp.n_head_kv, lim.n_ctx, facts.n_sm);
  sk_chunks = (lim.n_ctx + sk_chunk - 1) / sk_chunk;
  SIEVE_TRY(mem.alloc_to(sk_q, n_kv * G * 32, "query sketches"));
  SIEVE_TRY(mem.alloc_to(sk_stats, n_kv * sk_chunks * G * 2, "sketch statistics"));
  SIEVE_TRY(mem.alloc_to(quest_idx, n_kv * k_max_top_k, "quest blocks"));
  SIEVE_TRY(mem.alloc_to(quest_cnt, n_kv + 1, "quest blocks"));
  quest_nblk = quest_cnt + n_kv;
  SIEVE_TRY(mem.alloc_to(hv_idx, int64_t{hp.n_head} * k_max_top_k, "hard vote"));
  SIEVE_TRY(mem.alloc_to(hv_cnt, int64_t{hp.n_head}, "hard vote"));
  SIEVE_TRY(mem.alloc_to(hv_votes, n_kv * score_stride, "hard vote"));
  SIEVE_TRY(cuda_check(cudaMemset(hv_votes, 0, n_kv * score_stride * sizeof(int32_t)), "memset"));
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
        "cuda: the fused selection does not run for this shape ({}); the selection chain runs "
        "instead",
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

Status CudaRunner::Impl::attach_sketches(const KvGeometry& g) {
  sk_dim = g.sketch_dim;
  sk_pages = nullptr;
  sk_proj = nullptr;
  if (sk_dim == 0) return {};
  // (one page more than the store's: the K/V pool's scratch page, where padding rows of a
  // decode graph's size bucket append, is one past the store's pages)
  const int64_t n = int64_t{g.n_pages + 1} * g.page_size * hp.n_head_kv * sk_dim;
  return kv_mem.alloc_to(sk_pages, n, "the sketch keys");
}

Status CudaRunner::Impl::prepare_policy(const PolicyConfig& p, const GpuPolicy& g) {
  if (g.scorer != GpuScorer::sketch || sk_proj != nullptr) return {};
  const SketchSpec spec = sketch_spec_for(p, hp);
  if (sk_pages == nullptr || spec.dim != sk_dim) {
    return make_error(
        "policy '{}' ranks with {}-dimensional sketch keys, but the GPU's KV store keeps {}; start "
        "the engine with this policy as its default so that sketch keys are written",
        p.preset, spec.dim, sk_dim == 0 ? "none" : fmt::format("{}-dimensional ones", sk_dim));
  }
  // The projection as a matrix per (full layer, KV head): row i is the projection of e_i.
  const SketchProjection proj(spec);
  const int32_t d = hp.head_dim, ds = sk_dim, n_kv = hp.n_head_kv;
  std::vector<float> host(static_cast<size_t>(hp.n_layer) * n_kv * d * ds, 0.0f);
  std::vector<float> unit(d, 0.0f);
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.layer_kind[il] != LayerKind::full) continue;
    for (int32_t h = 0; h < n_kv; ++h) {
      float* m = host.data() + (static_cast<size_t>(il) * n_kv + h) * d * ds;
      for (int32_t i = 0; i < d; ++i) {
        unit[i] = 1.0f;
        proj.project(unit.data(), il, h, m + static_cast<size_t>(i) * ds);
        unit[i] = 0.0f;
      }
    }
  }
  float* dst = nullptr;
  SIEVE_TRY(mem.alloc_to(dst, static_cast<int64_t>(host.size()), "sketch projections"));
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, stream),
                       "sketch projections"));
  SIEVE_TRY(cuda_check(cudaStreamSynchronize(stream), "sketch projections"));
  sk_proj = dst;
  // Graphs captured before wrote no sketch keys at append: a sequence of this policy replaying
  // one in its dense steps would leave its keys without sketches.
  for (auto& [key, ge] : graphs) cudaGraphExecDestroy(ge);
  graphs.clear();
  log_info("cuda: sketch keys of {} dimensions ({}) written at append from now on", sk_dim,
           spec.basis ? "PCA basis " + spec.basis_path : fmt::format("JL seed {}", spec.seed));
  return {};
}

void CudaRunner::Impl::sketch_append(cuda::kv_append_params& ap, int il) const {
  if (sk_proj == nullptr || hp.layer_kind[il] != LayerKind::full) return;
  ap.sk_keys = sk_pages;
  ap.sk_type = cuda::dtype::bf16;
  ap.sk_scale = 1.f;
  ap.n_sk_heads = hp.n_head_kv;
  ap.sk_dim = sk_dim;
  ap.proj = sk_proj + int64_t{il} * hp.n_head_kv * hp.head_dim * sk_dim;
}

Status CudaRunner::Impl::score_rows(int il, int32_t b, const bf16* qsel, int32_t n_tok,
                                    const GpuPolicy& pol, const cuda::select_budget& bu, bool fused,
                                    const int32_t* skip, float* out, bool& hist_done) {
  const cuda::launch_cfg lc{stream, true};
  const int32_t G = hp.n_gqa();
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  const int32_t* const seq_len = dev(off_seq_len) + b;
  const float scale = pol.raw_logits ? 1.f : hp.attn_scale;
  // The launch that writes the selection's rows itself (one per KV head, no fold after it)
  // builds the chain's level-0 histogram on the way.
  cuda::hist_sink hist;
  hist.seq_len = seq_len;
  hist.rows_per_seq = sel_rows;
  hist.budget = bu;
  hist.want_mass = bu.top_p < 1.f;
  const cuda::select_workspace ws{sel_ws, rows, cuda::select_max_tiles(lim.n_ctx)};
  // Rows of `in` summed by `fold` (times mul), then max-pooled, into the selection's rows.
  auto fold = [&](const float* in, int32_t n_in, int32_t f, float mul) {
    cuda::score_fold_params fp;
    fp.in = in;
    fp.in_stride = score_stride;
    fp.n_in = n_in;
    fp.fold = f;
    fp.mul = mul;
    fp.pool = pol.pool;
    fp.out = out;
    fp.out_stride = score_stride;
    fp.seq_len = seq_len;
    fp.lo = bu.lo;
    fp.tail = bu.tail;
    fp.max_len = lim.n_ctx;
    fp.skip = skip;
    return cuda::score_fold(fp, lc);
  };
  hist_done = false;
  if (pol.scorer == GpuScorer::sketch) {
    // the selection query's sketches (decode: the query; prefill: the chunk's mean query)
    cuda::sketch_query_params sq;
    sq.q = qsel;
    sq.type = cuda::dtype::bf16;
    sq.batch = 1;
    sq.n_q_heads = hp.n_head;
    sq.n_kv_heads = rows;
    sq.head_dim = hp.head_dim;
    sq.n_sk_heads = rows;
    sq.sk_dim = sk_dim;
    sq.proj = sk_proj + int64_t{il} * rows * hp.head_dim * sk_dim;
    sq.q_out = sk_q;
    SIEVE_TRY(cuda::sketch_query(sq, lc));
    cuda::sketch_score_params ss;
    ss.sk.keys = sk_pages;
    ss.sk.type = cuda::dtype::bf16;
    ss.sk.n_sk_heads = rows;
    ss.sk.dim = sk_dim;
    ss.sk.pages = kv_view(il, b, 1, n_tok).pages;
    ss.q = sk_q;
    ss.n_sq = G;
    ss.scale = scale;
    ss.chunk_tokens = sk_chunk;
    ss.n_chunks = sk_chunks;
    ss.stats = sk_stats;
    ss.score_stride = score_stride;
    ss.skip = skip;
    ss.stats_lo = bu.lo;  // each head's softmax over the range the picks come from, as the CPU
    ss.stats_tail = bu.tail;
    // one row per KV head: the selection's rows when nothing is folded or pooled after
    const bool direct = !pol.layer_vote && pol.pool <= 1;
    ss.scores = direct ? out : sc_post;
    ss.zero_ws = direct ? sel_ws : nullptr;
    ss.zero_bytes = cuda::select_ws_header_bytes();
    if (pol.raw_sum) {
      ss.mode = cuda::sketch_mode::raw;
    } else {
      ss.mode = cuda::sketch_mode::stats;
      SIEVE_TRY(cuda::sketch_score(ss, lc));
      ss.mode = cuda::sketch_mode::vote;
      ss.zero_ws = nullptr;
    }
    if (direct) {
      hist.ws = ws;
      ss.hist = hist;
      hist_done = true;
    }
    SIEVE_TRY(cuda::sketch_score(ss, lc));
    if (!direct) SIEVE_TRY(fold(sc_post, rows, pol.layer_vote ? rows : 1, 1.f));
    return {};
  }
  // exact paged q.K (chunks past the length are empty)
  const bool direct_vote = !pol.layer_vote && !pol.raw_sum && !pol.hard_vote && pol.pool <= 1;
  cuda::decode_params s;
  s.kv = kv_view(il, b, 1, n_tok);
  s.q = qsel;
  s.n_q_heads = hp.n_head;
  s.scale = scale;
  s.logits = sc_logits;
  s.logit_stride = score_stride;
  s.stats = sc_stats;
  s.chunk_tokens = score_chunk;
  s.n_splits = score_chunks;
  s.zero_ws = direct_vote ? sel_ws : nullptr;
  s.zero_bytes = cuda::select_ws_header_bytes();
  s.skip = skip;
  s.stats_lo = bu.lo;  // each head's softmax over the range the picks come from, as the CPU
  s.stats_tail = bu.tail;
  SIEVE_TRY(cuda::score_exact(s, lc));
  if (pol.raw_sum)  // the logits are in base 2: x ln 2 gives the CPU's scaled logits
    return fold(sc_logits, rows * G, pol.layer_vote ? rows * G : G, static_cast<float>(M_LN2));
  const bool post = pol.pool > 1 || pol.hard_vote;  // rows that another launch finishes
  // per-head softmax summed over the KV group, or (scope=layer) over every head of the layer
  // into one row in the same launch
  cuda::soft_vote_params vt;
  vt.logits = sc_logits;
  vt.logit_stride = score_stride;
  vt.stats = sc_stats;
  vt.n_chunks = score_chunks;
  vt.G = G;
  vt.n_rows = rows;
  vt.max_len = lim.n_ctx;
  vt.fold = pol.layer_vote ? rows : 1;
  vt.scores = post ? sc_post : out;
  vt.score_stride = score_stride;
  vt.hist = hist;
  if (direct_vote && !fused) {
    vt.hist.ws = ws;
    hist_done = true;
  }
  vt.skip = skip;
  SIEVE_TRY(cuda::soft_vote(vt, lc));
  if (pol.hard_vote) {
    // each query head's top-k over its own logits (one selection row per head), then per
    // token the heads that picked it plus the soft vote / (heads + 1), in place
    cuda::select_params hs;
    hs.scores = sc_logits;
    hs.score_stride = score_stride;
    hs.seq_len = seq_len;
    hs.rows_per_seq = hp.n_head;
    hs.n_rows = hp.n_head;
    hs.budget.k_max = pol.top_k;
    hs.budget.lo = bu.lo;
    hs.budget.tail = bu.tail;
    hs.ws = {sel_ws, hp.n_head, cuda::select_max_tiles(lim.n_ctx)};
    hs.out_idx = hv_idx;
    hs.out_stride = k_max_top_k;
    hs.out_count = hv_cnt;
    hs.skip = skip;
    SIEVE_TRY(cuda::select(hs, false, lc));
    cuda::hard_vote_params hv;
    hv.idx = hv_idx;
    hv.idx_stride = k_max_top_k;
    hv.count = hv_cnt;
    hv.n_heads = hp.n_head;
    hv.heads_per_row = pol.layer_vote ? hp.n_head : G;
    hv.soft = sc_post;
    hv.votes = hv_votes;
    hv.out = sc_post;
    hv.stride = score_stride;
    hv.tie = 1.0f / static_cast<float>(hv.heads_per_row + 1);
    hv.seq_len = seq_len;
    hv.lo = bu.lo;
    hv.tail = bu.tail;
    hv.skip = skip;
    SIEVE_TRY(cuda::hard_vote(hv, lim.n_ctx, lc));
  }
  if (post) SIEVE_TRY(fold(sc_post, sel_rows, 1, 1.f));
  return {};
}

// Quest: block bounds per KV head (summed over the layer with scope=layer), the top
// ceil(top_k / block) blocks of the range, and their tokens with the range's partial blocks.
// The selection's rows go to sel_idx (quest reuses nothing).
Status CudaRunner::Impl::select_quest(int il, int32_t b, const bf16* qsel, int32_t n_tok,
                                      float* out_rows, cuda::token_set& set) {
  const cuda::launch_cfg lc{stream, true};
  const StepEntry& e = order[b];
  const GpuPolicy& pol = pols[e.pol];
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  const int32_t B = pol.block;
  cuda::quest_params qp;
  qp.kv = kv_view(il, b, 1, n_tok);
  qp.q = qsel;
  qp.n_q_heads = hp.n_head;
  qp.scale = pol.raw_logits ? 1.f : hp.attn_scale;
  qp.block = B;
  qp.sinks = pol.sinks;
  qp.local = pol.local;
  qp.n_queries = e.n;
  qp.scores = pol.layer_vote ? sc_post : out_rows;
  qp.score_stride = score_stride;
  qp.n_blocks = quest_nblk;
  SIEVE_TRY(cuda::quest_score(qp, lc));
  if (pol.layer_vote) {
    cuda::score_fold_params fp;
    fp.in = sc_post;
    fp.in_stride = score_stride;
    fp.n_in = rows;
    fp.fold = rows;
    fp.out = out_rows;
    fp.out_stride = score_stride;
    fp.seq_len = quest_nblk;
    fp.max_len = (lim.n_ctx + B - 1) / B;
    SIEVE_TRY(cuda::score_fold(fp, lc));
  }
  cuda::select_params sel;
  sel.scores = out_rows;
  sel.score_stride = score_stride;
  sel.seq_len = quest_nblk;  // the row's blocks end at the range's last complete one
  sel.rows_per_seq = sel_rows;
  sel.n_rows = sel_rows;
  sel.budget.k_max = (pol.top_k + B - 1) / B;
  sel.budget.lo = (pol.sinks + B - 1) / B;
  sel.budget.tail = 0;
  sel.ws.base = sel_ws;
  sel.ws.n_rows = rows;
  sel.ws.max_tiles = cuda::select_max_tiles(lim.n_ctx);
  sel.out_idx = quest_idx;
  sel.out_stride = k_max_top_k;
  sel.out_count = quest_cnt;
  SIEVE_TRY(cuda::select(sel, false, lc));
  cuda::quest_expand_params xp;
  xp.blk_idx = quest_idx;
  xp.blk_stride = k_max_top_k;
  xp.blk_count = quest_cnt;
  xp.max_blocks = sel.budget.k_max;
  xp.n_rows = sel_rows;
  xp.seq_len = dev(off_seq_len) + b;
  xp.block = B;
  xp.sinks = pol.sinks;
  xp.local = pol.local;
  xp.n_queries = e.n;
  xp.out_idx = sel_idx;
  xp.out_stride = k_max_top_k;
  xp.out_count = sel_cnt;
  SIEVE_TRY(cuda::quest_expand(xp, lc));
  set.sel_idx = sel_idx;
  set.sel_count = sel_cnt;
  set.sel_stride = k_max_top_k;
  set.sel_heads = sel_rows;
  set.n_sink = pol.sinks;
  set.n_window = pol.local;
  return {};
}

Status CudaRunner::Impl::select_tokens(int il, int32_t b, const bf16* qsel, int32_t n_tok,
                                       cuda::token_set& set) {
  const cuda::launch_cfg lc{stream, true};
  const StepEntry& e = order[b];
  const GpuPolicy& pol = pols[e.pol];
  const int64_t L = hp.n_layer;
  const int64_t row = int64_t{e.slot} * L + il;
  const bool ranks = pol.scorer != GpuScorer::none;
  // One launch selects the layer's top-k up to the budget probed at start.
  const bool fused = step_ws != nullptr && ranks && pol.layer_vote && pol.top_k <= k_fused_top_k &&
                     pol.top_p <= 0.f && pol.block == 1;
  // With the cache (decode, scope=layer) the sequence's own row for the layer, wide enough for
  // the tokens a reuse appends; else the shared rows.
  const bool cached = e.decode && pol.selection_cache;
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
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  set.sel_idx = out_idx;
  set.sel_count = out_cnt;
  set.sel_stride = out_stride;
  set.sel_heads = sel_rows;
  set.n_sink = pol.sinks;
  set.n_window = pol.local;
  if (!ranks) {  // sinks + window: an empty pick list (a cache hit appends what left the window)
    if (cached) return cuda::clear_selection(out_cnt, skip, lc);
    set.sel_idx = win_idx;
    set.sel_count = win_cnt;
    set.sel_stride = 1;
    set.sel_heads = 1;
    return {};
  }
  float* const out_rows = pol.layer_vote ? scores + int64_t{rows} * score_stride : scores;
  if (pol.scorer == GpuScorer::quest) return select_quest(il, b, qsel, n_tok, out_rows, set);
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = pol.local + e.n;
  if (pol.top_p > 0.f) {
    bu.top_p = pol.top_p;
    bu.k_min = pol.min_keep;
  }
  bool hist_done = false;
  SIEVE_TRY(score_rows(il, b, qsel, n_tok, pol, bu, fused, skip, out_rows, hist_done));
  if (pol.block > 1) {
    // blocks of `block` tokens from the range's start ranked by their summed scores, as
    // sparse/select.cpp pick_tokens: the top ceil(top_k / block), or under top_p the fewest
    // reaching the mass with at least ceil(min_keep / block) and at most top_k / block
    const int32_t B = pol.block;
    cuda::block_pick_params bp;
    bp.scores = out_rows;
    bp.block_scores = sc_post;
    bp.stride = score_stride;
    bp.n_blocks = quest_nblk;
    bp.n_rows = sel_rows;
    bp.seq_len = seq_len;
    bp.lo = bu.lo;
    bp.tail = bu.tail;
    bp.block = B;
    bp.max_len = lim.n_ctx;
    bp.skip = skip;
    SIEVE_TRY(cuda::block_sums(bp, lc));
    cuda::select_params sel;
    sel.scores = sc_post;
    sel.score_stride = score_stride;
    sel.seq_len = quest_nblk;
    sel.rows_per_seq = sel_rows;
    sel.n_rows = sel_rows;
    if (pol.top_p > 0.f) {
      sel.budget.k_max = pol.top_k / B;
      sel.budget.k_min = (pol.min_keep + B - 1) / B;
      sel.budget.top_p = pol.top_p;
    } else {
      sel.budget.k_max = (pol.top_k + B - 1) / B;
    }
    sel.ws = {sel_ws, rows, cuda::select_max_tiles(lim.n_ctx)};
    sel.out_idx = quest_idx;
    sel.out_stride = k_max_top_k;
    sel.out_count = quest_cnt;
    sel.skip = skip;
    SIEVE_TRY(cuda::select(sel, false, lc));
    bp.blk_idx = quest_idx;
    bp.blk_stride = k_max_top_k;
    bp.blk_count = quest_cnt;
    bp.max_blocks = sel.budget.k_max;
    bp.out_idx = out_idx;
    bp.out_stride = out_stride;
    bp.out_count = out_cnt;
    return cuda::block_expand(bp, lc);
  }
  if (fused) {  // (it reads the layer's row, scores' last)
    cuda::step_params st = fused_select_params(pol, bu, seq_len, out_idx, out_stride, out_cnt);
    st.skip = skip;
    return cuda::sparse_step(st, lc);
  }
  cuda::select_params sel;
  sel.scores = out_rows;
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
  sel.skip = skip;
  return cuda::select(sel, hist_done, lc);
}

}  // namespace sieve
