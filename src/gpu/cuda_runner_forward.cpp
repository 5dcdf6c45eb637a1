// CudaRunner: the launches of one step (embedding, the layers, the logits rows) and the
// attention of a layer over the step's decode and prefill groups.
#include <cuda_runtime_api.h>

#include <cstdlib>

#include "core/log.h"

#include "backend/cuda/model_ops.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve {
using namespace gpu_internal;

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

Status CudaRunner::Impl::matmul(const MatGroup& g, const bf16* x, int32_t n, float* y) {
  if (n > g.q_max_tok) return gemm(g.bf, g.rows, g.cols, x, n, y);
  int64_t off = 0;
  for (size_t i = 0; i < g.q.size();
       ++i) {  // the parts write their columns of y; x is quantized once
    cuda::qgemv_params p;
    p.w = g.q[i].w;
    p.type = g.q[i].type;
    p.rows = g.q[i].rows;
    p.cols = g.cols;
    p.x = x;
    p.ldx = g.cols;
    p.n_tok = n;
    p.y = y + off;
    p.ldy = g.rows;
    p.workspace = qws;
    p.x_quantized = i > 0;
    SIEVE_TRY(cuda_check(cuda::launch_qgemv(p, stream), "quantized gemv"));
    off += g.q[i].rows;
  }
  return {};
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
        g->q_max_tok = n;
        float* y = g->rows == hp.n_vocab ? logits : gu;  // gu holds [C, 2 n_ff] floats
        st = time_us([&] { return matmul(*g, x, n, y); }, q_us);
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
  return {};
}

cuda::paged_kv CudaRunner::Impl::kv_view(int il, int32_t first, int32_t batch,
                                         int32_t n_tok) const {
  cuda::paged_kv kvv;
  kvv.k = kv_k;
  kvv.v = kv_v;
  kvv.pages.indptr = dev(indptr_off(il)) + first;
  kvv.pages.indices = dev(pages_off(n_tok));
  kvv.pages.last_page_len = dev(last_off(il)) + first;
  kvv.pages.batch = batch;
  kvv.pages.page_size = page_size;
  kvv.n_kv_heads = hp.n_head_kv;
  kvv.head_dim = hp.head_dim;
  kvv.type = cuda::dtype::bf16;
  return kvv;
}

Status CudaRunner::Impl::attention(int il, int32_t n_tok) {
  const cuda::launch_cfg lc{stream, true};
  const int64_t qd = hp.q_dim();
  const int32_t B = static_cast<int32_t>(order.size());
  int32_t n_dec = 0, n_dec_dense = 0, n_pre_dense = 0;
  for (const StepEntry& e : order) {
    n_dec += e.decode ? 1 : 0;
    n_dec_dense += e.decode && !e.sparse ? 1 : 0;
    n_pre_dense += !e.decode && !e.sparse ? 1 : 0;
  }
  cuda::token_set window;
  window.sel_idx = win_idx;
  window.sel_count = win_cnt;
  window.sel_stride = 1;
  window.sel_heads = 1;
  window.n_window = hp.sliding_window - 1;  // + the query itself: sliding_window tokens
  const bool slide = sliding(il);
  auto decode = [&](int32_t first, int32_t count, const cuda::token_set& set, int32_t splits) {
    cuda::decode_params a;
    a.kv = kv_view(il, first, count, n_tok);
    a.q = q + order[first].row * qd;
    a.n_q_heads = hp.n_head;
    a.scale = hp.attn_scale;
    a.o = o + order[first].row * qd;
    a.ws_o = ws_o;
    a.ws_ml = ws_ml;
    a.ws_counter = ws_cnt;
    a.set = set;
    a.n_splits = splits;
    return cuda::decode_attention(a, lc);
  };
  auto prefill = [&](int32_t first, int32_t count, const int32_t* qo, const cuda::token_set& set) {
    cuda::prefill_params p;
    p.kv = kv_view(il, first, count, n_tok);
    p.q = q + order[first].row * qd;
    p.qo_indptr = qo;
    p.n_q_heads = hp.n_head;
    int32_t max_q = 0, total = 0;
    for (int32_t b = first; b < first + count; ++b) {
      max_q = std::max(max_q, order[b].n);
      total += order[b].n;
    }
    p.max_q = max_q;
    p.total_q = total;
    p.scale = hp.attn_scale;
    p.o = o + order[first].row * qd;
    p.set = set;
    if (slide) p.causal_window = hp.sliding_window;
    p.n_splits = cuda::prefill_splits(p, k_prefill_splits);
    p.ws_o = ws_o;
    p.ws_ml = ws_ml;
    return cuda::prefill_attention(p, lc);
  };
  const cuda::token_set dense;
  if (slide) {  // every query its own last sliding_window keys
    if (n_dec > 0) SIEVE_TRY(decode(0, n_dec, window, window_splits));
    if (B > n_dec) SIEVE_TRY(prefill(n_dec, B - n_dec, dev(off_qo), window));
    return {};
  }
  if (n_dec_dense > 0) {
    const int32_t splits =
        cuda::decode_splits(n_dec_dense * hp.n_head_kv, lim.n_ctx, facts.n_sm, hp.head_dim);
    SIEVE_TRY(decode(0, n_dec_dense, dense, std::min(splits, 256)));
  }
  for (int32_t b = n_dec_dense; b < n_dec; ++b) {
    cuda::token_set set;
    SIEVE_TRY(select_tokens(il, b, q + order[b].row * qd, n_tok, set));
    SIEVE_TRY(decode(b, 1, set, sparse_splits));
  }
  if (n_pre_dense > 0) SIEVE_TRY(prefill(n_dec, n_pre_dense, dev(off_qo), dense));
  for (int32_t b = n_dec + n_pre_dense; b < B; ++b) {  // one selection from the chunk's mean query
    const StepEntry& e = order[b];
    cuda::sketch_query_params mq;
    mq.q = q + e.row * qd;
    mq.type = cuda::dtype::bf16;
    mq.qo_indptr = dev(off_qo_local) + 2 * b;
    mq.batch = 1;
    mq.n_q_heads = hp.n_head;
    mq.n_kv_heads = hp.n_head_kv;
    mq.head_dim = hp.head_dim;
    mq.n_sk_heads = hp.n_head_kv;
    mq.q_out = q_mean_f;
    mq.q_mean = q_mean;
    SIEVE_TRY(cuda::sketch_query(mq, lc));
    cuda::token_set set;
    SIEVE_TRY(select_tokens(il, b, q_mean, n_tok, set));
    SIEVE_TRY(prefill(b, 1, dev(off_qo_local) + 2 * b, set));
  }
  return {};
}

Status CudaRunner::Impl::enqueue(int32_t n_tok, int32_t n_rows) {
  const cuda::launch_cfg lc{stream, true};
  const int32_t E = hp.n_embd, qd = hp.q_dim(), kvd = hp.kv_dim(), F = hp.n_ff;
  (void)F;
  SIEVE_TRY(cuda_check(cuda::launch_embed(w.tok_embd, dev(0), n_tok, E, hp.embd_scale, h, stream),
                       "embed"));
  for (int il = 0; il < hp.n_layer; ++il) {
    const GpuLayer& L = w.layers[il];
    SIEVE_TRY(cuda_check(
        cuda::launch_rms_norm(h, L.attn_norm, hp.rms_eps, n_tok, E, xb, true, stream), "norm"));
    SIEVE_TRY(matmul(L.qkv, xb, n_tok, qkv));
    if (L.bqkv)
      SIEVE_TRY(
          cuda_check(cuda::launch_bias_add(qkv, L.bqkv, n_tok, qd + 2 * kvd, stream), "bias"));
    cuda::qkv_rope_params rp;
    rp.qkv = qkv;
    rp.pos = dev(off_pos);
    rp.q_norm = L.q_norm;
    rp.k_norm = L.k_norm;
    rp.eps = hp.rms_eps;
    rp.n_head = hp.n_head;
    rp.n_kv = hp.n_head_kv;
    rp.head_dim = hp.head_dim;
    rp.n_rot = hp.n_rot;
    rp.base = hp.rope_base[il];
    rp.neox = hp.rope_mode == RopeMode::neox;
    rp.q = q;
    rp.k = k;
    rp.v = v;
    SIEVE_TRY(cuda_check(cuda::launch_qkv_rope(rp, n_tok, stream), "qkv_rope"));
    cuda::kv_append_params ap;
    ap.k = kv_k;
    ap.v = kv_v;
    ap.k_new = k;
    ap.v_new = v;
    ap.slot = reinterpret_cast<const int64_t*>(dev(slots_off(il, n_tok)));
    ap.n_new = n_tok;
    ap.n_kv_heads = hp.n_head_kv;
    ap.head_dim = hp.head_dim;
    ap.page_size = page_size;
    ap.type = cuda::dtype::bf16;
    sketch_append(ap, il);
    SIEVE_TRY(cuda::kv_append(ap, lc));
    SIEVE_TRY(attention(il, n_tok));
    SIEVE_TRY(matmul(L.wo, o, n_tok, tmp));
    SIEVE_TRY(cuda_check(
        cuda::launch_residual_add(h, tmp, L.post_attn, hp.rms_eps, n_tok, E, stream), "residual"));
    SIEVE_TRY(cuda_check(
        cuda::launch_rms_norm(h, L.ffn_norm, hp.rms_eps, n_tok, E, xb, true, stream), "norm"));
    SIEVE_TRY(matmul(L.gu, xb, n_tok, gu));
    SIEVE_TRY(
        cuda_check(cuda::launch_glu(gu, n_tok, F, hp.act != FfnAct::silu, act, stream), "glu"));
    SIEVE_TRY(matmul(L.down, act, n_tok, tmp));
    SIEVE_TRY(cuda_check(
        cuda::launch_residual_add(h, tmp, L.post_ffn, hp.rms_eps, n_tok, E, stream), "residual"));
  }
  // The rows that get logits, in the runner's order: every row of a decode-only step, else
  // each entry's last row (every row with all_logits).
  if (n_rows == n_tok) {
    SIEVE_TRY(cuda_check(
        cuda::launch_rms_norm(h, w.output_norm, hp.rms_eps, n_tok, E, xsel, true, stream), "norm"));
  } else {
    int32_t r = 0;
    for (const StepEntry& e : order) {
      const int32_t first = e.all_logits ? e.row : e.row + e.n - 1;
      const int32_t n = e.all_logits ? e.n : 1;
      SIEVE_TRY(cuda_check(cuda::launch_rms_norm(h + int64_t{first} * E, w.output_norm, hp.rms_eps,
                                                 n, E, xsel + int64_t{r} * E, true, stream),
                           "norm"));
      r += n;
    }
  }
  return matmul(w.output, xsel, n_rows, logits);
}

}  // namespace sieve
