// Quest's block bounds and token lists (kernels/score_quest.cuh).
#include "backend/cuda/kernels/score_quest.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {

cudaError_t launch_quest_score(const quest_params& p, int grid_x, const launch_cfg& lc) {
  return launch_kernel(quest_score_kernel, dim3(grid_x, p.kv.n_kv_heads), dim3(quest_threads), 0,
                       lc, p);
}

cudaError_t launch_quest_expand(const quest_expand_params& p, const launch_cfg& lc) {
  return launch_kernel(quest_expand_kernel, dim3(p.n_rows), dim3(256), 0, lc, p);
}

}  // namespace sieve::cuda
