// Instances of the quantized GEMV for the K-quant super-block types (kernels/qgemv.cuh).
#include "backend/cuda/kernels/qgemv.cuh"

namespace sieve::cuda::qgemv {

cudaError_t run_kquant(qtype q, int n_tok, const kparams& p, unsigned grid, const launch_cfg& lc) {
  switch (q) {
    case qtype::q4_k:
      return run_nt<qtype::q4_k>(n_tok, p, grid, lc);
    case qtype::q5_k:
      return run_nt<qtype::q5_k>(n_tok, p, grid, lc);
    case qtype::q6_k:
      return run_nt<qtype::q6_k>(n_tok, p, grid, lc);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace sieve::cuda::qgemv
