// The selection chain: [level-0 histogram] -> refine x3 -> finalize -> emit. Every pass
// is launched whatever the data (no host synchronisation); passes with nothing left to do
// exit after re-deriving the threshold state.
#include "backend/cuda/kernels/select.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda {

int64_t select_workspace_bytes(int n_rows, int max_tiles) {
  return sel_ws_bytes(n_rows, max_tiles);
}
int64_t select_header_bytes() {
  return sizeof(sel_row_hdr);
}
int select_tile_scores() {
  return sel_tile;
}

cudaError_t launch_select(const select_params& p, bool hist_done, int grid_x,
                          const launch_cfg& lc) {
  const bool want_mass = p.budget.top_p < 1.f;
  const dim3 grid(grid_x, p.n_rows);
  cudaError_t e;
  if (!hist_done) {
    e = cudaMemsetAsync(p.ws.base, 0, static_cast<size_t>(p.n_rows) * sizeof(sel_row_hdr),
                        lc.stream);
    if (e != cudaSuccess) return e;
    e = launch_kernel(select_hist_kernel, grid, dim3(sel_threads), 0, lc, p, want_mass);
    if (e != cudaSuccess) return e;
  }
  for (int pass = 1; pass <= 3; ++pass) {
    e = launch_kernel(select_refine_kernel, grid, dim3(sel_threads), 0, lc, p, pass, want_mass);
    if (e != cudaSuccess) return e;
  }
  return launch_kernel(select_emit_kernel, grid, dim3(sel_threads), 0, lc, p);
}

}  // namespace sieve::cuda
