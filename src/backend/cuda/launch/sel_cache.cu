// The Selection Cache probe (kernels/sel_cache.cuh).
#include "backend/cuda/kernels/sel_cache.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {

cudaError_t launch_sel_cache(const sel_cache_params& p, const launch_cfg& lc) {
  return launch_kernel(sel_cache_kernel, dim3(1), dim3(sel_cache_threads), 0, lc, p);
}

}  // namespace sieve::cuda
