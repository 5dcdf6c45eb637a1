// Raw launchers: one per kernel family, dispatching dtype / head_dim to template
// instances. They trust their arguments (cuda_ops.cpp validates) and return the launch
// error. Compiled by nvcc; this header is plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels/params.h"

namespace sieve::cuda {

struct launch_cfg {
  cudaStream_t stream = nullptr;
  bool pdl = true;  // programmatic dependent launch (sm_90): overlap with the previous kernel
};

cudaError_t launch_decode(const decode_params& p, bool score_mode, const launch_cfg& lc);
cudaError_t launch_soft_vote(const soft_vote_params& p, int grid_x, const launch_cfg& lc);
cudaError_t launch_sketch_score(const sketch_score_params& p, const launch_cfg& lc);
// hist_done: the level-0 histogram was fused into the scorer.
cudaError_t launch_select(const select_params& p, bool hist_done, int grid_x, const launch_cfg& lc);
cudaError_t launch_kv_append(const kv_append_params& p, const launch_cfg& lc);
cudaError_t launch_sketch_query(const sketch_query_params& p, const launch_cfg& lc);
cudaError_t launch_prefill(const prefill_params& p, const launch_cfg& lc);
// The CTA shape launch_prefill(p) picks: rows per CTA, and CTAs resident per SM (0: unknown).
int prefill_rows_per_cta(const prefill_params& p);
int prefill_resident_ctas(const prefill_params& p);
// The fused sparse decode step: a cluster launch (with lc.pdl) or a cooperative grid launch
// (lc.pdl not used), as launch_step_choice() says.
cudaError_t launch_sparse_step(const step_params& p, const launch_cfg& lc);
// How launch_sparse_step would run p: step_sync::cluster or step_sync::grid.
step_sync launch_step_choice(const step_params& p);
int64_t step_workspace_bytes(int batch, int n_sm);
int64_t step_workspace_hist_word(int b, int n_sm);
// Benchmark aid: a cooperative launch of ctas_per_sm x SMs CTAs crossing n grid barriers.
cudaError_t launch_barrier_probe(uint32_t* ws, int n_barriers, int ctas_per_sm,
                                 cudaStream_t stream);

cudaError_t launch_sel_cache(const sel_cache_params& p, const launch_cfg& lc);
cudaError_t launch_score_fold(const score_fold_params& p, int grid_x, const launch_cfg& lc);
cudaError_t launch_clear_selection(int32_t* count, const int32_t* skip, const launch_cfg& lc);
int score_fold_tile();
cudaError_t launch_hard_vote(const hard_vote_params& p, int grid_x, const launch_cfg& lc);
cudaError_t launch_block_sums(const block_pick_params& p, const launch_cfg& lc);
cudaError_t launch_block_expand(const block_pick_params& p, const launch_cfg& lc);
cudaError_t launch_quest_score(const quest_params& p, int grid_x, const launch_cfg& lc);
cudaError_t launch_quest_expand(const quest_expand_params& p, const launch_cfg& lc);
// Pseudo-random fill (mean offset, sd scale) of n elements of type t: benchmark data.
cudaError_t launch_fill_random(void* p, int64_t n, dtype t, uint64_t seed, float scale,
                               float offset, cudaStream_t stream);

int64_t select_workspace_bytes(int n_rows, int max_tiles);
int64_t select_header_bytes();  // per row; zeroed at pipeline start
int select_tile_scores();

}  // namespace sieve::cuda
