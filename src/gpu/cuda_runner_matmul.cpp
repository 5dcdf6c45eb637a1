// CudaRunner's weight products: cuBLAS bf16 GEMMs, the fused dequantize-GEMV for decode rows,
// the start-up timing that picks between them, and the batch-invariant products.
//
// Batch invariance (Options::batch_invariant, on by default): a row's result must not depend on
// which other rows share the step, so that a request returns the same greedy text alone and
// among others. cuBLAS picks its kernel (tile, split-K) from the whole problem shape, so a row
// computed in a GEMM of 3 rows and in one of 300 can differ in the last bit. Here the decode
// rows of a step (its first n_dec rows) and its prefill rows are two products: decode rows
// read the quantized GEMV token by token (each token's sums run in a fixed order whatever the
// count) or, for a group without one, a cuBLASLt GEMM; prefill rows a cuBLASLt GEMM. Each
// cuBLASLt product runs one algorithm fixed per (shape, decode|prefill) at start, chosen without
// split-K, so every row's reduction over K runs in the same order for any number of rows.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdlib>

#include "core/log.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve {
using namespace gpu_internal;

namespace {

Status lt_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return make_error("cublasLt: {}: status {}", what, static_cast<int>(s));
}

}  // namespace

// y [n, out] = x [n, in] . W[out, in]^T (row-major), fp32 accumulation.
Status CudaRunner::Impl::gemm(const bf16* wt, int64_t out, int64_t in, const bf16* x, int32_t n,
                              float* y) {
  const float one = 1.f, zero = 0.f;
  return cublas_check(
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), n, static_cast<int>(in),
                   &one, wt, CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
                   static_cast<int>(in), &zero, y, CUDA_R_32F, static_cast<int>(out),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "gemm");
}

Status CudaRunner::Impl::qgemv(const MatGroup& g, const bf16* x, int32_t n, float* y) {
  for (int32_t t0 = 0; t0 < n; t0 += cuda::qgemv_max_tok) {
    const int32_t nt = std::min(n - t0, cuda::qgemv_max_tok);
    int64_t off = 0;
    for (size_t i = 0; i < g.q.size(); ++i) {  // the parts write their columns of y
      cuda::qgemv_params p;
      p.w = g.q[i].w;
      p.type = g.q[i].type;
      p.rows = g.q[i].rows;
      p.cols = g.cols;
      p.x = x + int64_t{t0} * g.cols;
      p.ldx = g.cols;
      p.n_tok = nt;
      p.y = y + int64_t{t0} * g.rows + off;
      p.ldy = g.rows;
      p.workspace = qws;
      p.x_quantized = i > 0;  // x is quantized once for all parts
      SIEVE_TRY(cuda_check(cuda::launch_qgemv(p, stream), "quantized gemv"));
      off += g.q[i].rows;
    }
  }
  return {};
}

Status CudaRunner::Impl::matmul(const MatGroup& g, const bf16* x, int32_t n, float* y,
                                int32_t n_dec) {
  if (!invariant) {
    if (n > g.q_max_tok) return gemm(g.bf, g.rows, g.cols, x, n, y);
    return qgemv(g, x, n, y);
  }
  n_dec = std::clamp(n_dec, 0, n);
  if (n_dec > 0) {
    if (g.q_max_tok > 0)
      SIEVE_TRY(qgemv(g, x, n_dec, y));
    else
      SIEVE_TRY(gemm_fixed(g, 0, x, n_dec, y));
  }
  if (n > n_dec)
    SIEVE_TRY(
        gemm_fixed(g, 1, x + int64_t{n_dec} * g.cols, n - n_dec, y + int64_t{n_dec} * g.rows));
  return {};
}

// ---- batch-invariant GEMMs (cuBLASLt, one algorithm per shape and path) ----

Status CudaRunner::Impl::init_invariant_gemm() {
  SIEVE_TRY(lt_check(cublasLtCreate(&lt), "create"));
  SIEVE_TRY(lt_check(cublasLtMatmulDescCreate(&lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t op_t = CUBLAS_OP_T;
  SIEVE_TRY(lt_check(
      cublasLtMatmulDescSetAttribute(lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)),
      "transa"));
  cublasLtMatmulPreference_t pref = nullptr;
  SIEVE_TRY(lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  const uint64_t ws = static_cast<uint64_t>(blas_ws_bytes);
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  // rows of x and y start at any token: 16-byte alignment is all the algorithm may assume
  const uint32_t align = 16;
  Status st = lt_check(cublasLtMatmulPreferenceSetAttribute(
                           pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                       "workspace");
  if (st) {
    st = lt_check(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &no_reduction, sizeof(no_reduction)),
        "reduction");
  }
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st)
      st = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)),
                    "alignment");
  }
  std::vector<const MatGroup*> groups{&w.output};
  for (const GpuLayer& L : w.layers) {
    for (const MatGroup* g : {&L.qkv, &L.wo, &L.gu, &L.down}) groups.push_back(g);
  }
  // The reference row counts the algorithms are chosen for: a decode batch, a prefill chunk.
  // Fixed numbers (not this runner's limits), so runners of any size run the same algorithms.
  constexpr int32_t k_ref_rows[2] = {8, 512};
  for (const MatGroup* g : groups) {
    if (!st) break;
    const auto key = std::make_pair(g->rows, g->cols);
    if (lt_algos.count(key)) continue;
    std::array<cublasLtMatmulAlgo_t, 2> algos{};
    for (int path = 0; path < 2 && st; ++path) {
      LtLayouts* lay = nullptr;
      st = lt_layouts(*g, k_ref_rows[path], lay);
      if (!st) break;
      cublasLtMatmulHeuristicResult_t res{};
      int found = 0;
      st = lt_check(cublasLtMatmulAlgoGetHeuristic(lt, lt_desc, lay->a, lay->b, lay->c, lay->c,
                                                   pref, 1, &res, &found),
                    "heuristic");
      if (st && (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)) {
        st = make_error("cublasLt: no split-free algorithm for a {}x{} product", g->rows, g->cols);
      }
      if (!st) break;
      cublasLtMatmulAlgo_t algo = res.algo;
      const int32_t one_split = 1;
      (void)cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one_split,
                                                 sizeof(one_split));
      (void)cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &no_reduction, sizeof(no_reduction));
      // the algorithm must take every row count the path will give it
      for (int32_t n : {1, 3, 8, 17, 64, 512, C}) {
        if (path == 0 && n > S) continue;
        if (n > C) continue;
        st = lt_layouts(*g, n, lay);
        if (!st) break;
        cublasLtMatmulHeuristicResult_t chk{};
        st = lt_check(
            cublasLtMatmulAlgoCheck(lt, lt_desc, lay->a, lay->b, lay->c, lay->c, &algo, &chk),
            "algorithm check");
        if (st && chk.workspaceSize > ws)
          st = make_error("cublasLt: the fixed algorithm wants {} bytes of workspace",
                          chk.workspaceSize);
        if (!st) break;
      }
      algos[path] = algo;
    }
    if (st) lt_algos.emplace(key, algos);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return st;
}

Status CudaRunner::Impl::lt_layouts(const MatGroup& g, int32_t n, LtLayouts*& out) {
  const auto key = std::make_tuple(g.rows, g.cols, n);
  auto it = lt_layout_cache.find(key);
  if (it == lt_layout_cache.end()) {
    if (lt_layout_cache.size() > 8192) {  // distinct chunk sizes accumulate: start afresh
      for (auto& [k, l] : lt_layout_cache) l.destroy();
      lt_layout_cache.clear();
    }
    LtLayouts l;
    // column-major views: W^T is op(A) with A [in, out] ld in; x is B [in, n]; y is C [out, n]
    Status st =
        lt_check(cublasLtMatrixLayoutCreate(&l.a, CUDA_R_16BF, g.cols, g.rows, g.cols), "layout");
    if (st)
      st = lt_check(cublasLtMatrixLayoutCreate(&l.b, CUDA_R_16BF, g.cols, n, g.cols), "layout");
    if (st)
      st = lt_check(cublasLtMatrixLayoutCreate(&l.c, CUDA_R_32F, g.rows, n, g.rows), "layout");
    if (!st) {
      l.destroy();
      return st;
    }
    it = lt_layout_cache.emplace(key, l).first;
  }
  out = &it->second;
  return {};
}

void CudaRunner::Impl::LtLayouts::destroy() {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
  a = b = c = nullptr;
}

Status CudaRunner::Impl::gemm_fixed(const MatGroup& g, int path, const bf16* x, int32_t n,
                                    float* y) {
  auto it = lt_algos.find(std::make_pair(g.rows, g.cols));
  if (it == lt_algos.end())
    return make_error("cuda runner: no fixed algorithm for a {}x{} product", g.rows, g.cols);
  LtLayouts* lay = nullptr;
  SIEVE_TRY(lt_layouts(g, n, lay));
  const float one = 1.f, zero = 0.f;
  return lt_check(cublasLtMatmul(lt, lt_desc, &one, g.bf, lay->a, x, lay->b, &zero, y, lay->c, y,
                                 lay->c, &it->second[path], blas_ws, blas_ws_bytes, stream),
                  "matmul");
}

// Each distinct group (types and shape) timed both ways at 1, 2, 4 and 8 tokens on zero
// activations, best of 5 after a warm-up: the quantized GEMV serves step sizes up to the first
// one where cuBLAS's bf16 GEMM is faster.
Status CudaRunner::Impl::choose_matmuls() {
  const char* env = std::getenv("SIEVE_GPU_MATMUL");
  const std::string want = env ? env : "auto";
  if (want != "auto" && want != "bf16" && want != "quant") {
    return make_error("SIEVE_GPU_MATMUL={}: use auto (time both), bf16 or quant", want);
  }
  std::vector<MatGroup*> groups{&w.output};
  for (GpuLayer& L : w.layers) {
    for (MatGroup* g : {&L.qkv, &L.wo, &L.gu, &L.down}) groups.push_back(g);
  }
  std::map<std::string, int32_t> decided;
  cudaEvent_t ev[2];
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[0]), "event"));
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[1]), "event"));
  auto time_us = [&](auto&& launch, float& us) -> Status {
    us = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      float ms = 0;
      SIEVE_TRY(cuda_check(cudaEventRecord(ev[0], stream), "event"));
      SIEVE_TRY(launch());
      SIEVE_TRY(cuda_check(cudaEventRecord(ev[1], stream), "event"));
      SIEVE_TRY(cuda_check(cudaEventSynchronize(ev[1]), "matmul probe"));
      SIEVE_TRY(cuda_check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "event"));
      if (rep > 0) us = std::min(us, ms * 1000.f);
    }
    return {};
  };
  Status st;
  int32_t n_quant = 0;
  std::string detail;
  SIEVE_TRY(cuda_check(
      cudaMemsetAsync(xb, 0, int64_t{8} * std::max(hp.n_embd, hp.n_ff) * sizeof(bf16), stream),
      "memset"));
  for (MatGroup* g : groups) {
    if (g->q.empty() || want == "bf16") {
      g->q_max_tok = 0;
      continue;
    }
    if (want == "quant") {
      g->q_max_tok = cuda::qgemv_max_tok;
      ++n_quant;
      continue;
    }
    const std::string sig = g->signature();
    auto it = decided.find(sig);
    if (it == decided.end()) {
      // act holds [n, n_ff] and gu [n, 2 n_ff] floats: room for any group's x and y at 8 tokens
      const bf16* x = g->cols == hp.n_ff ? act : xb;
      int32_t max_tok = 0;
      std::string line = sig + ":";
      for (int32_t n : {1, 2, 4, 8}) {
        float q_us = 0, b_us = 0;
        float* y = g->rows == hp.n_vocab ? logits : gu;  // gu holds [C, 2 n_ff] floats
        st = time_us([&] { return qgemv(*g, x, n, y); }, q_us);
        if (st) st = time_us([&] { return gemm(g->bf, g->rows, g->cols, x, n, y); }, b_us);
        if (!st) break;
        line += fmt::format(" {}:{:.1f}/{:.1f}us", n, q_us, b_us);
        if (q_us >= b_us) break;
        max_tok = n;
      }
      if (!st) break;
      it = decided.emplace(sig, max_tok).first;
      detail += (detail.empty() ? "" : "; ") + line;
    }
    g->q_max_tok = it->second;
    n_quant += it->second > 0 ? 1 : 0;
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  SIEVE_TRY(st);
  matmul_choice = fmt::format("{} of {} weight products read quantized blocks at decode ({}){}",
                              n_quant, groups.size(), want,
                              detail.empty() ? "" : " [quantized/bf16 per tokens: " + detail + "]");
  log_info("cuda: {}", matmul_choice);
  if (invariant) {
    const Status lt_st = init_invariant_gemm();
    if (!lt_st) {
      log_warn(
          "cuda: batch-invariant products are off ({}): a request's greedy text may differ "
          "between running alone and among others",
          lt_st.message());
      invariant = false;
    }
  }
  return {};
}

}  // namespace sieve
