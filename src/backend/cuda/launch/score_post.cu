// Score folding / pooling and the empty selection (kernels/score_post.cuh).
#include "backend/cuda/kernels/score_post.cuh"
#include "backend/cuda/launch/launch_util.cuh"

#include <algorithm>

namespace sieve::cuda {

cudaError_t launch_score_fold(const score_fold_params& p, int grid_x, const launch_cfg& lc) {
  const int w = p.pool > 1 ? p.pool : 1;
  const size_t smem = static_cast<size_t>(fold_tile + w - 1) * sizeof(float);
  return launch_kernel(score_fold_kernel, dim3(grid_x, p.n_in / p.fold), dim3(fold_threads), smem,
                       lc, p);
}

cudaError_t launch_clear_selection(int32_t* count, const int32_t* skip, const launch_cfg& lc) {
  return launch_kernel(clear_selection_kernel, dim3(1), dim3(1), 0, lc, count, skip);
}

cudaError_t launch_hard_vote(const hard_vote_params& p, int grid_x, const launch_cfg& lc) {
  cudaError_t e = launch_kernel(hard_vote_scatter_kernel, dim3(p.n_heads), dim3(256), 0, lc, p);
  if (e != cudaSuccess) return e;
  return launch_kernel(hard_vote_combine_kernel, dim3(grid_x, p.n_heads / p.heads_per_row),
                       dim3(256), 0, lc, p);
}

cudaError_t launch_block_sums(const block_pick_params& p, const launch_cfg& lc) {
  const int max_blocks = (p.max_len + p.block - 1) / p.block;
  const int grid_x = std::max(1, std::min((max_blocks + 255) / 256, 64));
  return launch_kernel(block_sums_kernel, dim3(grid_x, p.n_rows), dim3(256), 0, lc, p);
}

cudaError_t launch_block_expand(const block_pick_params& p, const launch_cfg& lc) {
  return launch_kernel(block_expand_kernel, dim3(p.n_rows), dim3(256), 0, lc, p);
}

int score_fold_tile() {
  return fold_tile;
}

}  // namespace sieve::cuda
