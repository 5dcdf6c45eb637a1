// POD parameter structs shared by the CUDA kernels (kernels/*.cuh), their launchers
// (launch/*.cu) and the host API (cuda_ops.h). Raw pointers only: no engine types here,
// so the engine adapts its own KV store / selection types to these at one place.
//
// Conventions
// - Paged KV of one layer: K and V each [n_pages, page_size, n_kv_heads, head_dim].
//   Sequence b owns pages page_indices[page_indptr[b] .. page_indptr[b+1]) in order; its
//   last page holds last_page_len[b] tokens (1..page_size). Token t of sequence b lives
//   in page page_indices[page_indptr[b] + t / page_size], slot t % page_size.
// - Sketch keys are paged with the same page table, head-major inside a page so that
//   one head's keys of a page are contiguous: [n_pages, n_sk_heads, page_size, d_s].
// - Selections are index lists of token positions, ascending, one row per
//   (sequence, selection head): idx [n_rows, stride], count [n_rows]. This is CSR with
//   indptr[r] = r * stride and a per-row length (no scan needed on the device).
// - Logits and softmax statistics are kept in base-2 units (x * log2(e)) so kernels use
//   exp2; lse outputs are natural-log.
#pragma once

#include <cstdint>

namespace sieve::cuda {

enum class dtype : int32_t { f32 = 0, f16 = 1, bf16 = 2, fp8_e4m3 = 3, int8 = 4 };

// A paged page table (shared by K/V and the sketch keys of a layer).
struct page_table {
  const int32_t* indptr = nullptr;         // [batch + 1]
  const int32_t* indices = nullptr;        // [indptr[batch]]
  const int32_t* last_page_len = nullptr;  // [batch]
  int32_t batch = 0;
  int32_t page_size = 0;
  int32_t page_shift =
      -1;  // log2(page_size) when it is a power of two, else -1 (set by the host API)
};

// One layer's paged K/V.
struct paged_kv {
  const void* k = nullptr;  // [n_pages, page_size, n_kv_heads, head_dim]
  const void* v = nullptr;  // [n_pages, page_size, n_kv_heads, head_dim]
  page_table pages;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  dtype type = dtype::bf16;  // bf16 or f16
};

// Which tokens an attention reads. Dense when sel_idx is null: all tokens [0, len).
// Sparse: sinks [0, n_sink) + the selected list + the window [q_start - n_window, len),
// where q_start = len - n_queries is the first query position (the queries' own KV is
// already appended). The selection must lie in [n_sink, q_start - n_window), which is the
// range the selection kernels use, so the three parts never overlap.
struct token_set {
  const int32_t* sel_idx = nullptr;    // [batch * sel_heads, sel_stride] ascending positions
  const int32_t* sel_count = nullptr;  // [batch * sel_heads]
  int32_t sel_stride = 0;
  int32_t sel_heads = 1;  // 1: one list per sequence; n_kv_heads: one list per kv head
  int32_t n_sink = 0;
  int32_t n_window = 0;
};

// Decode attention (one query token per sequence), split-K over the token set, partial
// (o, max, sum) states merged by the last CTA of each (sequence, kv head).
// Also the exact paged q.K scorer (score_mode): then v is unused, the token set is dense,
// and the kernel writes base-2 logits and per-chunk softmax statistics.
struct decode_params {
  paged_kv kv;
  token_set set;
  const void* q = nullptr;  // [batch, n_q_heads, head_dim], kv.type
  int32_t n_q_heads = 0;
  float scale = 0.f;  // softmax scale, typically 1/sqrt(head_dim)
  // attention outputs
  void* o = nullptr;       // [batch, n_q_heads, head_dim], kv.type
  float* lse = nullptr;    // [batch, n_q_heads] natural-log sum-exp, optional
  int32_t n_splits = 1;    // CTAs per (sequence, kv head)
  float* ws_o = nullptr;   // [batch, n_kv_heads, n_splits, G, head_dim] unnormalised partial o
  float* ws_ml = nullptr;  // [batch, n_kv_heads, n_splits, G, 2] (max, sum), base 2
  uint32_t* ws_counter = nullptr;  // [batch, n_kv_heads]: zero before first use; left zero
  // score-mode outputs
  float* logits = nullptr;  // [batch * n_kv_heads, G, logit_stride] q.k * scale * log2(e)
  int64_t logit_stride = 0;
  float* stats = nullptr;    // [batch * n_kv_heads, n_splits, G, 2] per-chunk (max, sum), base 2
  int32_t chunk_tokens = 0;  // score mode: tokens per CTA (multiple of 64)
  void* zero_ws = nullptr;   // score mode: if set, CTA 0 of each row zeroes this many bytes
  int64_t zero_bytes = 0;    //   (the selection workspace header; see select_params)
  const int32_t* skip = nullptr;  // score mode: when set and *skip != 0 the launch does nothing
                                  // (a selection-cache hit, sel_cache_params)
  // score mode: the softmax statistics count the tokens [stats_lo, len - stats_tail) only (the
  // range a selection picks from, whose per-head softmax the CPU's soft vote sums); every
  // token's logit is written. 0, 0: all tokens.
  int32_t stats_lo = 0, stats_tail = 0;
  // Timing breakdown (benchmarks only; attention mode): thread 0 of every CTA stamps
  // %globaltimer into phase_ns[cta * decode_n_stamps + i] (cta = (b * n_kv + g) * n_splits +
  // split; decode_stamp names i); zero where a CTA did not reach a stamp.
  uint64_t* phase_ns = nullptr;
};

// The stamps of decode_params::phase_ns, in order.
enum decode_stamp : int {
  ds_entry,    // the kernel starts
  ds_ready,    // after the wait for the previous kernel (PDL)
  ds_issued,   // the prologue's list entries and page ids have arrived, its gathers are issued
  ds_first,    // the first tile has landed and been computed
  ds_loop,     // every tile done
  ds_partial,  // the partial (o, max, sum) is written (split > 1) or the output (split == 1)
  ds_counted,  // the split counter says whether this CTA merges
  ds_merged,   // the merging CTA has written the output
  decode_n_stamps
};

// Selection workspace: device scratch of select_workspace_bytes(); its per-row header must
// be zero when a selection pipeline starts (the first scorer kernel zeroes it, or the host
// API issues a memset).
struct select_workspace {
  void* base = nullptr;
  int32_t n_rows = 0;
  int32_t max_tiles = 0;  // tiles of select_tile scores per row (ceil(max_len / tile))
};

// Budget of a selection, per row. Selected = the r* highest scores of the row's range,
// r* = min(k_max, max(k_min, r_p)) where r_p is the smallest count whose score mass
// reaches top_p * (mass of the range); top_p >= 1 means pure top-k (r_p = k_max).
// Ties at the threshold are broken by lower token index.
struct select_budget {
  int32_t k_max = 0;
  int32_t k_min = 0;
  float top_p = 2.f;
  int32_t lo = 0;    // first selectable position (n_sink)
  int32_t tail = 0;  // positions >= len - tail are not selectable (window + queries)
};

// Scores of many rows and where the selection goes.
struct select_params {
  const float* scores = nullptr;  // [n_rows, score_stride]
  int64_t score_stride = 0;
  const int32_t* seq_len = nullptr;  // [n_rows / rows_per_seq] tokens in each sequence
  int32_t rows_per_seq = 1;
  int32_t n_rows = 0;
  select_budget budget;
  select_workspace ws;
  int32_t* out_idx = nullptr;     // [n_rows, out_stride] ascending token positions
  int32_t out_stride = 0;         // >= budget.k_max
  int32_t* out_count = nullptr;   // [n_rows]
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launches do nothing
};

// Histogram sink used by scorer kernels that fuse the first selection pass.
struct hist_sink {
  select_workspace ws;
  const int32_t* seq_len = nullptr;
  int32_t rows_per_seq = 1;
  select_budget budget;
  bool want_mass = false;  // top-p needs the score mass per bin
};

// Sketch keys of one layer, paged like K.
struct sketch_keys {
  const void* keys = nullptr;  // [n_pages, n_sk_heads, page_size, dim]
  dtype type = dtype::bf16;    // bf16, fp8_e4m3 or int8 (value = stored * key_scale)
  float key_scale = 1.f;
  int32_t n_sk_heads = 0;
  int32_t dim = 0;  // d_s: 8, 16 or 32
  page_table pages;
};

enum class sketch_mode : int32_t {
  stats = 0,  // pass 1 of the soft vote: per-chunk per-head (max, sum)
  vote = 1,   // pass 2: score = sum_h softmax_h, using the merged pass-1 statistics
  raw = 2,    // one pass: score = sum_h logit_h (ranks only; no mass meaning)
};

// Sketch (indexer) scoring: logit_{h,t} = (q_h . key_t) * key_scale * scale over the
// sketch head's n_sq query heads.
struct sketch_score_params {
  sketch_keys sk;
  const float* q = nullptr;  // [batch, n_sk_heads, n_sq, dim] fp32 query sketches
  int32_t n_sq = 0;          // query heads per sketch head (<= 32)
  float scale = 1.f;
  sketch_mode mode = sketch_mode::vote;
  int32_t chunk_tokens = 0;  // tokens per CTA
  int32_t n_chunks = 0;
  float* stats = nullptr;   // [batch * n_sk_heads, n_chunks, n_sq, 2]
  float* scores = nullptr;  // [batch * n_sk_heads, score_stride]
  int64_t score_stride = 0;
  hist_sink hist;           // vote/raw modes: fused first histogram pass (ws.base may be null)
  void* zero_ws = nullptr;  // stats mode: CTA 0 of each row zeroes this (see decode_params);
                            // raw mode: the launcher memsets it first
  int64_t zero_bytes = 0;
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launch does nothing
  // stats mode: the statistics count the tokens [stats_lo, len - stats_tail) only (see
  // decode_params); 0, 0: all tokens.
  int32_t stats_lo = 0, stats_tail = 0;
};

// TokenSelect's hard vote (aggregation=hard_vote) for one sequence, after each head's top-k
// (idx / count, one row per query head): output row o, token t of the selectable range
// [lo, len - tail) = (votes of the heads o*heads_per_row .. + heads_per_row - 1 whose list holds
// t) + soft[o][t] * tie. `votes` is int scratch, zero at rest: the launch adds into it and
// returns the range to zero, so it needs no memset.
struct hard_vote_params {
  const int32_t* idx = nullptr;  // [n_heads, idx_stride] each head's picks
  int32_t idx_stride = 0;
  const int32_t* count = nullptr;  // [n_heads]
  int32_t n_heads = 0;
  int32_t heads_per_row = 1;    // divides n_heads
  const float* soft = nullptr;  // [n_heads / heads_per_row, stride] the soft vote of each row
  int32_t* votes = nullptr;     // [n_heads / heads_per_row, stride] zero at rest
  float* out = nullptr;         // [n_heads / heads_per_row, stride]
  int64_t stride = 0;
  float tie = 0.f;                   // 1 / (heads_per_row + 1)
  const int32_t* seq_len = nullptr;  // [1]
  int32_t lo = 0, tail = 0;
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launches do nothing
};

// Block-granular selection (the `block` knob) for one sequence: the selectable range
// [lo, len - tail) split into blocks of `block` tokens from lo (the last may be partial).
// block_sums: block_scores[r][b] = sum of scores[r] over block b, *n_blocks = their count; a top-k
// / top-p over those rows picks blocks (blk_idx / blk_count); block_expand: their tokens,
// ascending, into out_idx / out_count.
struct block_pick_params {
  const float* scores = nullptr;  // [n_rows, stride] token scores
  float* block_scores = nullptr;  // [n_rows, stride] by block index
  int64_t stride = 0;
  int32_t* n_blocks = nullptr;       // [1]: written by block_sums
  const int32_t* blk_idx = nullptr;  // [n_rows, blk_stride] ascending picked blocks
  int32_t blk_stride = 0;
  const int32_t* blk_count = nullptr;  // [n_rows]
  int32_t max_blocks = 0;              // at most this many picked per row
  int32_t* out_idx = nullptr;          // [n_rows, out_stride] >= max_blocks x block
  int32_t out_stride = 0;
  int32_t* out_count = nullptr;  // [n_rows]
  int32_t n_rows = 1;
  const int32_t* seq_len = nullptr;  // [1]
  int32_t lo = 0, tail = 0, block = 1;
  int32_t max_len = 0;            // >= *seq_len
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launches do nothing
};

// Quest's block scores for one sequence (quest_score): the tokens a selection picks from are
// [c0, pick_end) with n_prefix = len - n_queries, c0 = min(sinks, n_prefix) and pick_end =
// max(c0, n_prefix - local); its complete blocks of `block` tokens, b0 = ceil(c0 / block) ..
// b1 = pick_end / block, score per KV head g: scale * sum over g's query heads h of
// sum_i max(q_h,i min_i, q_h,i max_i), min / max over the block's keys of head g (computed from
// K as the selection runs). scores[g][b] for b in [b0, b1); *n_blocks = b1 (the block row's
// length for the selection that follows).
struct quest_params {
  paged_kv kv;              // one sequence (pages.batch = 1), bf16
  const void* q = nullptr;  // [n_q_heads, head_dim] bf16: the selection query
  int32_t n_q_heads = 0;
  float scale = 1.f;
  int32_t block = 16;
  int32_t sinks = 0, local = 0, n_queries = 1;
  float* scores = nullptr;  // [n_kv_heads, score_stride] by block index
  int64_t score_stride = 0;
  int32_t* n_blocks = nullptr;  // [1] out
};

// The token list of Quest's picked blocks (quest_expand), per row: the partial block at the
// range's start [c0, min(pick_end, b0 block)), the picked blocks' tokens (ascending block
// indices), the partial block at its end [max(b0, b1) block, pick_end) - as the CPU reads them.
struct quest_expand_params {
  const int32_t* blk_idx = nullptr;  // [n_rows, blk_stride] ascending block indices
  int32_t blk_stride = 0;
  const int32_t* blk_count = nullptr;  // [n_rows]
  int32_t max_blocks = 0;              // the selection's k_max (at most this many per row)
  int32_t n_rows = 1;
  const int32_t* seq_len = nullptr;  // [1] tokens held, the queries included
  int32_t block = 16;
  int32_t sinks = 0, local = 0, n_queries = 1;
  int32_t* out_idx = nullptr;  // [n_rows, out_stride]: needs (max_blocks + 2) x block
  int32_t out_stride = 0;
  int32_t* out_count = nullptr;  // [n_rows]
};

// Scores between the scorer and the selection, for one sequence: output row o, token t of
// [0, len) = mul * sum of input rows o*fold .. o*fold + fold - 1 at t; then, with pool > 1,
// each t of the selectable range [lo, len - tail) takes the max over the window
// [t - pool/2, t - pool/2 + pool) clipped to that range (sparse/select.h max_pool_scores).
struct score_fold_params {
  const float* in = nullptr;  // [n_in, in_stride]
  int64_t in_stride = 0;
  int32_t n_in = 0;
  int32_t fold = 1;  // divides n_in
  float mul = 1.f;
  int32_t pool = 0;      // 0 / 1: no pooling
  float* out = nullptr;  // [n_in / fold, out_stride]; must not overlap in
  int64_t out_stride = 0;
  const int32_t* seq_len = nullptr;  // [1] tokens of the sequence
  int32_t lo = 0, tail = 0;          // the selection budget's lo and tail
  int32_t max_len = 0;               // >= *seq_len (sizes the grid)
  const int32_t* skip = nullptr;     // when set and *skip != 0 the launch does nothing
};

// Soft vote from exact logits: score_t = sum_h 2^(l_{h,t} - M_h) / Z_h over the G heads of a
// KV group, M_h/Z_h merged from the per-chunk statistics of the scorer.
inline constexpr int32_t soft_vote_max_heads = 64;  // fold * G
struct soft_vote_params {
  const float* logits = nullptr;  // [n_rows, G, logit_stride]
  int64_t logit_stride = 0;
  const float* stats = nullptr;  // [n_rows, n_chunks, G, 2]
  int32_t n_chunks = 0;
  int32_t G = 0;
  int32_t n_rows = 0;  // input rows
  // Input rows summed into one output row: 1 = one per row (a KV group's vote), n_kv = every
  // head of a sequence (a layer's vote in one launch, no separate row sum). Divides n_rows.
  int32_t fold = 1;
  int32_t max_len = 0;
  float* scores = nullptr;  // [n_rows / fold, score_stride]
  int64_t score_stride = 0;
  hist_sink hist;
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launch does nothing
};

// One fused sparse decode step in a single launch: sketch scores with one shared sketch head
// per sequence (raw mode: sum of the n_sq query logits), the selection (11/11/10-bit radix
// levels, ties to the lowest positions; top-k, or top-p for selection alone), the ordered
// index list, then decode attention over sinks + selection + window (chained behind it, or
// inside a grid launch). CTAs meet at cluster or grid barriers between phases instead of
// kernel boundaries. `attend.set` must name this step's outputs (sel_idx = out_idx,
// sel_count = out_count, sel_heads = 1, n_sink = budget.lo, n_window = budget.tail - 1); the
// host API checks that.
//
// How the fused step's CTAs meet: one thread-block cluster per sequence (distributed shared
// memory, cluster barriers; rows must fit the cluster's shared memory, sm_90) or a
// cooperative launch over the whole device (global histograms, grid barriers; any length).
enum class step_sync : int32_t { automatic = 0, grid = 1, cluster = 2 };

struct step_params {
  sketch_keys sk;            // n_sk_heads == 1
  const float* q = nullptr;  // [batch, n_sq, dim] fp32 query sketches
  int32_t n_sq = 1;          // query sketches per sequence (<= 32)
  float scale = 1.f;         // logit = (q . key) * key_scale * scale
  bool score = true;         // false: selection (and attention) over the given `scores`
  bool attend_on = true;     // false: stop after the selection
  // Where the attention runs: true = the decode kernel, launched right behind this one with
  // programmatic dependent launch; false = inside this launch after one more grid barrier
  // (phase P5). Measured on the H200 (bench/RESULTS-cuda.md, run 6), Llama shape: chained
  // 51.9 / 84.4 us at 128K (B=1 / B=8), in-kernel 64.3 / 99.6 us; the same attention code runs
  // with 3x longer list and page-id round trips inside the persistent kernel.
  bool attend_chained = true;
  float* scores = nullptr;  // [batch, score_stride]: written when score, else read
  int64_t score_stride = 0;
  const int32_t* seq_len = nullptr;  // [batch / rows_per_seq]
  int32_t batch = 0;                 // sequences; selection alone: rows
  // Selection alone (score and attend_on false) over several rows per sequence (e.g. one per
  // KV head, rows b*r .. b*r + r-1): row b has seq_len[b / rows_per_seq] scores.
  int32_t rows_per_seq = 1;
  int32_t max_len = 0;         // >= every seq_len (sizes the per-CTA buffers)
  select_budget budget;        // top-k; top-p (top_p < 1): selection alone, cluster path only
  int32_t* out_idx = nullptr;  // [batch, out_stride] ascending positions
  int32_t out_stride = 0;
  int32_t* out_count = nullptr;  // [batch]
  uint32_t* ws = nullptr;        // step_ws_bytes(): zero before first use; the kernel leaves it so
  decode_params attend;          // attention of the step (kv, q, o, splits, merge workspaces)
  uint64_t* phase_ns = nullptr;  // optional [8]: %globaltimer stamps of CTA 0 at the start,
                                 // after P0, P1, P2, P3, P4, the last barrier, the end
  int32_t ctas_per_seq = 0;      // set by the launcher
  int32_t smem_scores = 0;       // set by the launcher: score cache capacity per CTA (floats)
  int64_t slot_words = 0;        // set by the launcher: the workspace's per-CTA slot words
  step_sync sync = step_sync::automatic;  // automatic: cluster when the rows fit (launch/step.cu)
  int32_t cl_keys = 0;            // set by the launcher (cluster): sketch keys per cp.async stage
  const int32_t* skip = nullptr;  // when set and *skip != 0 the launch does nothing
};

// TokenSelect's Selection Cache for one decode query of one layer (one selection row, the
// layer's vote): the fingerprint is the query rotated back to position 0 and averaged over the
// heads; while its cosine with the fingerprint of the layer's last selection is >= theta, the
// selection is reused and the tokens that left the window since then are appended to it (as
// the CPU pipeline does). The kernel writes *skip (1 = hit: the scorer and selection launches
// that read it do nothing); on a miss it stores the new fingerprint, and the selection launch
// that follows writes the list.
struct sel_cache_params {
  const void* q = nullptr;           // [n_q_heads, head_dim] bf16, RoPE at position *pos
  const int32_t* pos = nullptr;      // the query's position
  const int32_t* seq_len = nullptr;  // tokens held, the query included
  int32_t n_q_heads = 0, head_dim = 0, n_rot = 0;
  const double* inv_freq = nullptr;  // [n_rot / 2] RoPE angle per position of pair i (qkv_rope's)
  bool neox = false;                 // RoPE pairs (i, i + n_rot/2), else (2i, 2i+1)
  float theta = 0.9f;
  int32_t n_sink = 0, n_window = 0;  // the token set's: picks lie in [n_sink, len - 1 - n_window)
  float* fp = nullptr;               // [head_dim] the layer's stored fingerprint
  int32_t* state = nullptr;          // [4]: valid, pick end at the selection, gap appended, 0
  int32_t* sel_idx = nullptr;        // the layer's selection row (stride >= top_k + max_gap)
  int32_t* sel_count = nullptr;
  int32_t max_gap = 0;       // a hit that would append more tokens than this re-selects
  int32_t* skip = nullptr;   // out: 1 = hit
  uint32_t* hits = nullptr;  // optional: += 1 per hit
};

// Append new tokens' K/V into pages and write their sketch keys.
struct kv_append_params {
  void* k = nullptr;  // paged [n_pages, page_size, n_kv_heads, head_dim]
  void* v = nullptr;
  const void* k_new = nullptr;  // [n_new, n_kv_heads, head_dim]
  const void* v_new = nullptr;
  const int64_t* slot = nullptr;  // [n_new] page * page_size + offset
  int32_t n_new = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t page_size = 0;
  dtype type = dtype::bf16;
  // sketch (optional: sk_keys null = none). Sketch head s projects the concatenated keys of
  // kv heads [s*r, (s+1)*r), r = n_kv_heads / n_sk_heads, with proj[s]: [r*head_dim, dim].
  void* sk_keys = nullptr;  // [n_pages, n_sk_heads, page_size, dim]
  dtype sk_type = dtype::bf16;
  float sk_scale = 1.f;  // stored = value / sk_scale
  int32_t n_sk_heads = 0;
  int32_t sk_dim = 0;
  const float* proj = nullptr;  // [n_sk_heads, r * head_dim, sk_dim]
};

// Query sketches: q_sketch[b, s, j, :] = q[b, h, :] . proj[s][(g - s*r)*D : +D, :] for the
// j-th query head of sketch head s (h = s*r*G + j, g = h / G). Optionally averages a chunk
// of queries first (prefill selection uses one mean query per head).
struct sketch_query_params {
  const void* q = nullptr;  // [n_tok, n_q_heads, head_dim], type
  dtype type = dtype::bf16;
  const int32_t* qo_indptr = nullptr;  // [batch + 1] tokens of each sequence; null: one each
  int32_t batch = 0;
  int32_t n_q_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t n_sk_heads = 0;
  int32_t sk_dim = 0;
  const float* proj = nullptr;  // [n_sk_heads, r * head_dim, sk_dim]; null: no projection
  float* q_out =
      nullptr;  // proj: [batch, n_sk_heads, n_sq, sk_dim]; else [batch, n_q_heads, head_dim]
  void* q_mean = nullptr;  // optional [batch, n_q_heads, head_dim] in `type` (mean query)
};

// Prefill chunk attention: the n_q_b newest tokens of each sequence attend causally to the
// token set (dense or sinks + selection + window) of their sequence.
struct prefill_params {
  paged_kv kv;
  token_set set;
  const void* q = nullptr;             // [total_q, n_q_heads, head_dim], kv.type
  const int32_t* qo_indptr = nullptr;  // [batch + 1]
  int32_t n_q_heads = 0;
  int32_t max_q = 0;    // max queries of one sequence
  int32_t total_q = 0;  // qo_indptr[batch]
  float scale = 0.f;
  // > 0: a sliding window - the query at position p sees keys k with p - k < causal_window
  // (Gemma's local layers; pair it with a token set whose window covers the chunk's reach)
  int32_t causal_window = 0;
  void* o = nullptr;       // [total_q, n_q_heads, head_dim]
  int32_t n_splits = 1;    // split-K parts (merged by a second kernel)
  float* ws_o = nullptr;   // [n_splits, total_q, n_q_heads, head_dim]
  float* ws_ml = nullptr;  // [n_splits, total_q, n_q_heads, 2]
  // (query, head) rows per CTA: 0 = the launcher's choice (128: two m-tiles per warp up to
  // D = 128, eight warps at D = 256); 64 or 128 force one (benchmarks and tests)
  int32_t tile_rows = 0;
};

}  // namespace sieve::cuda
