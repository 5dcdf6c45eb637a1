// Instances of the quantized GEMV for the 32-element block types (kernels/qgemv.cuh).
#include "backend/cuda/kernels/qgemv.cuh"

namespace sieve::cuda::qgemv {

cudaError_t run_legacy(qtype q, int n_tok, const kparams& p, unsigned grid, const launch_cfg& lc) {
  switch (q) {
    case qtype::q4_0:
      return run_nt<qtype::q4_0>(n_tok, p, grid, lc);
    case qtype::q4_1:
      return run_nt<qtype::q4_1>(n_tok, p, grid, lc);
    case qtype::q5_0:
      return run_nt<qtype::q5_0>(n_tok, p, grid, lc);
    case qtype::q5_1:
      return run_nt<qtype::q5_1>(n_tok, p, grid, lc);
    case qtype::q8_0:
      return run_nt<qtype::q8_0>(n_tok, p, grid, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace sieve::cuda::qgemv
