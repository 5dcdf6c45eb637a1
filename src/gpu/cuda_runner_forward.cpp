// CudaRunner: the launches of one step (embedding, the layers, the logits rows) and the
// attention of a layer over the step's decode and prefill groups.
#include <cuda_runtime_api.h>

#include <cstdlib>

#include "core/log.h"

#include "backend/cuda/model_ops.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve {
using namespace gpu_internal;

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
    // split-K over the keys cuts them where the chunk's length says: unsplit, a row's sums run
    // in the same order however the prompt was chunked (batch invariance)
    p.n_splits = invariant ? 1 : cuda::prefill_splits(p, k_prefill_splits);
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
    // the split count cuts each sequence's keys; batch invariance keeps it the single
    // sequence's whatever the batch
    const int32_t splits = cuda::decode_splits((invariant ? 1 : n_dec_dense) * hp.n_head_kv,
                                               lim.n_ctx, facts.n_sm, hp.head_dim);
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
  step_dec = 0;  // decodes lead the order: the first step_dec rows (and logits rows)
  for (const StepEntry& e : order) step_dec += e.decode ? 1 : 0;
  SIEVE_TRY(cuda_check(cuda::launch_embed(w.tok_embd, dev(0), n_tok, E, hp.embd_scale, h, stream),
                       "embed"));
  for (int il = 0; il < hp.n_layer; ++il) {
    const GpuLayer& L = w.layers[il];
    SIEVE_TRY(cuda_check(
        cuda::launch_rms_norm(h, L.attn_norm, hp.rms_eps, n_tok, E, xb, true, stream), "norm"));
    SIEVE_TRY(matmul(L.qkv, xb, n_tok, qkv, step_dec));
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
    rp.inv_freq = L.rope_inv_freq;
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
    SIEVE_TRY(matmul(L.wo, o, n_tok, tmp, step_dec));
    SIEVE_TRY(cuda_check(
        cuda::launch_residual_add(h, tmp, L.post_attn, hp.rms_eps, n_tok, E, stream), "residual"));
    SIEVE_TRY(cuda_check(
        cuda::launch_rms_norm(h, L.ffn_norm, hp.rms_eps, n_tok, E, xb, true, stream), "norm"));
    SIEVE_TRY(matmul(L.gu, xb, n_tok, gu, step_dec));
    SIEVE_TRY(
        cuda_check(cuda::launch_glu(gu, n_tok, F, hp.act != FfnAct::silu, act, stream), "glu"));
    SIEVE_TRY(matmul(L.down, act, n_tok, tmp, step_dec));
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
  return matmul(w.output, xsel, n_rows, logits, step_dec);
}

}  // namespace sieve
