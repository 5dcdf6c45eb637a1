// Host API of the CUDA backend: validated launches of the sparse-attention kernels and
// the sizing helpers callers need to allocate workspaces. Every call is asynchronous on
// the given stream and never synchronises with the host; errors come back as a Status
// naming the bad argument (or the CUDA error of the launch).
//
// A sparse decode step is a chain on one stream (see bench/cuda/bench_cuda.cpp):
//   exact:  score_exact -> soft_vote(+hist) -> select(hist_done) -> decode_attention
//   sketch: sketch_score(stats) -> sketch_score(vote, +hist) -> select(hist_done) ->
//   decode_attention
// The first scorer kernel zeroes the selection workspace header (zero_ws/zero_bytes), so
// the chain needs no memset; select() without a fused histogram issues its own memset.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels/params.h"
#include "backend/cuda/launch/launch.h"
#include "core/result.h"

namespace sieve::cuda {

struct device_facts {
  int n_sm = 0;
  int64_t l2_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t global_bytes = 0;
};
// Facts of the current device (queried once); an error when there is none.
Result<device_facts> current_device();

// log2(page_size) for power-of-two pages, else -1.
int32_t page_shift_of(int32_t page_size);

// ---- sizing helpers
// Scores / logits rows are padded to whole selection tiles (float4 reads past the end of
// a row stay inside the row).
int64_t score_row_stride(int32_t max_len);
int32_t select_max_tiles(int32_t max_len);
int64_t select_ws_bytes(int32_t n_rows, int32_t max_len);
int64_t select_ws_header_bytes();  // per row; what zero_ws/zero_bytes clear
// Split-K parts for decode over lists of at most max_list tokens, for n_groups
// (sequence, kv head) pairs: enough CTAs to fill the GPU, at least 2 tiles each.
int32_t decode_splits(int32_t n_groups, int32_t max_list, int32_t n_sm, int32_t head_dim = 128);
int64_t decode_ws_o_floats(int32_t batch, int32_t n_kv, int32_t n_splits, int32_t G,
                           int32_t head_dim);
int64_t decode_ws_ml_floats(int32_t batch, int32_t n_kv, int32_t n_splits, int32_t G);
// Tokens per CTA of the exact scorer (multiple of 64) and of the sketch scorer.
int32_t score_chunk_tokens(int32_t n_rows, int32_t max_len, int32_t n_sm);
int32_t sketch_chunk_tokens(int32_t n_rows, int32_t max_len, int32_t n_sm);

// ---- launches
Status decode_attention(decode_params p, const launch_cfg& lc);
// Exact paged q.K: logits (base 2) + per-chunk softmax statistics; p.n_splits must equal
// ceil(max_len / p.chunk_tokens).
Status score_exact(decode_params p, const launch_cfg& lc);
Status soft_vote(soft_vote_params p, const launch_cfg& lc);
Status sketch_score(sketch_score_params p, const launch_cfg& lc);
// Top-k / top-p selection; hist_done when a scorer already built the level-0 histogram.
Status select(select_params p, bool hist_done, const launch_cfg& lc);
Status kv_append(kv_append_params p, const launch_cfg& lc);
Status sketch_query(sketch_query_params p, const launch_cfg& lc);
Status prefill_attention(prefill_params p, const launch_cfg& lc);
// Split-K parts that fill the device about once with prefill_attention(p)'s CTAs (p's
// shape, batch and tile_rows; n_splits ignored): 1 when one pass already fills it.
int32_t prefill_splits(const prefill_params& p, int32_t max_splits);

// TokenSelect's Selection Cache probe for one layer's decode query (sel_cache_params): writes
// *p.skip, which the scorer / vote / fused-selection launches that follow read (their skip).
Status selection_cache_probe(sel_cache_params p, const launch_cfg& lc);
// Rows summed, scaled and max-pooled between a scorer and the selection (score_fold_params).
Status score_fold(score_fold_params p, const launch_cfg& lc);
// An empty selection row (*count = 0) unless *skip (may be null) says the cache kept it.
Status clear_selection(int32_t* count, const int32_t* skip, const launch_cfg& lc);
// TokenSelect's hard vote from each head's top-k and the soft vote (hard_vote_params).
Status hard_vote(hard_vote_params p, int32_t max_len, const launch_cfg& lc);
// Block-granular selection (block_pick_params): the range's block sums, then (after a top-k /
// top-p over them) the picked blocks' tokens.
Status block_sums(block_pick_params p, const launch_cfg& lc);
Status block_expand(block_pick_params p, const launch_cfg& lc);
// Quest: block bounds of one sequence's selectable range (quest_params), then, after a top-k
// over them, the picked blocks' token list (quest_expand_params).
Status quest_score(quest_params p, const launch_cfg& lc);
Status quest_expand(quest_expand_params p, const launch_cfg& lc);

// The fused sparse decode step: score + top-k (top-p: cluster path only) in one launch (one
// thread-block cluster per sequence, kernels/step_cluster.cuh, or one cooperative grid,
// kernels/sparse_step.cuh; p.sync), the attention chained behind it. ws: step_ws_bytes(batch),
// zeroed once before first use (only the grid uses it); it serves any batch up to the one it was
// sized for.
int64_t step_ws_bytes(int32_t batch);
// Word offset of sequence b's level histograms (3 x 2176 words, zero at rest) in it.
int64_t step_ws_hist_word(int32_t b);
Status sparse_step(step_params p, const launch_cfg& lc);
// How sparse_step() would run p on the current device: step_sync::cluster or ::grid.
step_sync sparse_step_mode(step_params p);

}  // namespace sieve::cuda
