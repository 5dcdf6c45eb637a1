#include "gpu/gpu_session_impl.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/model_ops.h"
#include "backend/cpu/matmul.h"
#include "core/log.h"

namespace sieve {
using namespace gpu_internal;
namespace {

// Rows of weight matrices dequantized and stacked into one bf16 matrix [sum rows, n_cols].
Result<bf16*> upload_stacked(DevMem& mem, std::initializer_list<const WeightView*> ws, const char* what) {
  const int64_t cols = (*ws.begin())->n_cols;
  int64_t rows = 0;
  for (const WeightView* w : ws) {
    if (w->n_cols != cols) return make_error("gpu: {}: stacked matrices differ in width", what);
    rows += w->n_rows;
  }
  auto dst = mem.alloc<bf16>(rows * cols, what);
  if (!dst) return dst.error();
  std::vector<float> row(cols);
  std::vector<bf16> host(std::min<int64_t>(rows, 4096) * cols);
  int64_t r0 = 0;
  for (const WeightView* w : ws) {
    for (int64_t r = 0; r < w->n_rows;) {
      const int64_t n = std::min<int64_t>(w->n_rows - r, 4096);
      for (int64_t i = 0; i < n; ++i) {
        get_row(*w, r + i, row.data());
        for (int64_t c = 0; c < cols; ++c) host[i * cols + c] = __float2bfloat16(row[c]);
      }
      SIEVE_TRY(cuda_check(cudaMemcpy(*dst + (r0 + r) * cols, host.data(), n * cols * sizeof(bf16),
                                      cudaMemcpyHostToDevice), what));
      r += n;
    }
    r0 += w->n_rows;
  }
  return *dst;
}

Result<float*> upload_vec(DevMem& mem, const float* v, int64_t n, const char* what) {
  if (v == nullptr) return static_cast<float*>(nullptr);
  auto dst = mem.alloc<float>(n, what);
  if (!dst) return dst.error();
  SIEVE_TRY(cuda_check(cudaMemcpy(*dst, v, n * sizeof(float), cudaMemcpyHostToDevice), what));
  return *dst;
}

}  // namespace


bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<GpuPolicy> gpu_policy_from(const PolicyConfig& chosen) {
  // auto prefills densely here below 64K prompt tokens: the sparse chunk is slower than the
  // dense prefill kernel on the GPU there, and 1.7x faster at 128K (bench/RESULTS.md).
  const PolicyConfig& p = chosen;
  GpuPolicy g;
  g.chunk_from = p.from_auto ? k_gpu_auto_chunk_from : 0;
  g.name = p.from_auto ? fmt::format("{} (dense prefill below {} prompt tokens)", p.describe(), g.chunk_from)
                       : p.describe();
  if (p.is_dense()) return g;
  if (p.preset != "tokenselect" || p.scorer != ScorerKind::exact) {
    return make_error(
        "policy '{}' does not run on the CUDA backend yet: it runs dense and tokenselect "
        "(use --backend cpu for the others)",
        p.preset);
  }
  if (p.aggregation != AggregationKind::soft_vote || p.top_p > 0 || p.block != 1 || p.pool_kernel > 1 ||
      p.raw_logits || p.positions == PositionMode::compact ||
      p.score_positions == ScorePositions::none || p.evicts() || p.drops_prefill() ||
      p.min_context > 0 || p.top_k <= 0) {
    return make_error(
        "tokenselect on the CUDA backend runs the soft vote with a top_k budget, token blocks "
        "and original positions; these knobs differ: {} (use --backend cpu)",
        p.describe());
  }
  g.sparse = true;
  g.layer_vote = p.scope == VoteScope::layer;
  g.top_k = p.top_k;
  g.sinks = p.sinks;
  g.local = p.local;
  g.chunk_prefill = p.prefill == PrefillMode::chunk;
  g.prefill_tail = p.prefill_tail;
  g.compact_beyond_train = p.positions == PositionMode::auto_;
  if (p.selection_cache && !g.layer_vote) {
    return make_error(
        "tokenselect on the CUDA backend runs the selection cache with scope=layer (the default); "
        "with scope=group add selection_cache=false, or use --backend cpu");
  }
  g.selection_cache = p.selection_cache;
  g.theta = p.theta;
  return g;
}


Status GpuSession::Impl::init(const Model& m, int32_t ctx, const GpuPolicy& p) {
  hp = m.hp;
  pol = p;
  if (!gpu_available()) return make_error("--backend cuda: no CUDA device is visible (use --backend cpu)");
  for (LayerKind k : hp.layer_kind) {
    if (k == LayerKind::sliding && hp.sliding_window <= 0) {
      return make_error("--backend cuda: a sliding-window layer without a window size");
    }
  }
  if (hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256) {
    return make_error("--backend cuda: head_dim {} is not supported (64, 128 or 256)", hp.head_dim);
  }
  if (hp.n_gqa() > 8) return make_error("--backend cuda: {} query heads per KV head (at most 8)", hp.n_gqa());
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim) return make_error("--backend cuda: n_rot {}", hp.n_rot);
  if (ctx <= 0) return make_error("--backend cuda: context size {} must be positive", ctx);
  max_ctx = ctx;
  n_pages = (ctx + k_page - 1) / k_page;
  SIEVE_TRY(cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties"));
  auto d = cuda::current_device();
  if (!d) return d.error();
  dev = *d;
  SIEVE_TRY(cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  SIEVE_TRY(cublas_check(cublasCreate(&blas), "create"));
  SIEVE_TRY(cublas_check(cublasSetStream(blas, stream), "stream"));

  const ModelWeights& w = m.w;
  const int64_t E = hp.n_embd;
  {
    auto t = upload_stacked(mem, {&w.tok_embd}, "token embeddings");
    if (!t) return t.error();
    tok_embd = *t;
  }
  if (w.output.data == w.tok_embd.data && w.output.type == w.tok_embd.type) {
    output = tok_embd;
  } else {
    auto t = upload_stacked(mem, {&w.output}, "output matrix");
    if (!t) return t.error();
    output = *t;
  }
  {
    auto t = upload_vec(mem, w.output_norm, E, "output norm");
    if (!t) return t.error();
    output_norm = *t;
  }
  layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[il];
    GpuLayer& G = layers[il];
    auto a = upload_stacked(mem, {&L.wq, &L.wk, &L.wv}, "attention q/k/v");
    if (!a) return a.error();
    G.wqkv = *a;
    auto b = upload_stacked(mem, {&L.wo}, "attention output");
    if (!b) return b.error();
    G.wo = *b;
    auto c = upload_stacked(mem, {&L.w_gate, &L.w_up}, "ffn gate/up");
    if (!c) return c.error();
    G.wgu = *c;
    auto dn = upload_stacked(mem, {&L.w_down}, "ffn down");
    if (!dn) return dn.error();
    G.wdown = *dn;
    struct V {
      float** dst;
      const float* src;
      int64_t n;
    };
    for (const V& v : {V{&G.attn_norm, L.attn_norm, E}, V{&G.ffn_norm, L.ffn_norm, E},
                       V{&G.q_norm, hp.qk_norm ? L.q_norm : nullptr, hp.head_dim},
                       V{&G.k_norm, hp.qk_norm ? L.k_norm : nullptr, hp.head_dim},
                       V{&G.post_attn, hp.post_norms ? L.post_attn_norm : nullptr, E},
                       V{&G.post_ffn, hp.post_norms ? L.post_ffn_norm : nullptr, E}}) {
      auto t = upload_vec(mem, v.src, v.n, "norm weights");
      if (!t) return t.error();
      *v.dst = *t;
    }
  }
  weight_bytes = mem.bytes;

  const int64_t kvd = hp.kv_dim();
  // A sliding layer's queries see their last sliding_window keys; a prefill chunk appends up
  // to max_chunk() tokens before it attends, so window + chunk tokens (+ one page of slack for
  // the partial first page) are all a ring must keep.
  const bool any_sliding = std::find(hp.layer_kind.begin(), hp.layer_kind.end(), LayerKind::sliding) != hp.layer_kind.end();
  if (any_sliding && hp.sliding_window > 0) {
    const int32_t need = (hp.sliding_window + max_chunk() + k_page - 1) / k_page + 1;
    if (need < n_pages) ring_pages = need;
  }
  for (size_t il = 0; il < layers.size(); ++il) {
    GpuLayer& G = layers[il];
    const int64_t pages = ring(static_cast<int>(il)) ? ring_pages : n_pages;
    auto k = mem.alloc<bf16>(pages * k_page * kvd, "the K cache");
    if (!k) return k.error();
    auto v = mem.alloc<bf16>(pages * k_page * kvd, "the V cache");
    if (!v) return v.error();
    G.k = *k;
    G.v = *v;
  }
  const int64_t C = max_chunk(), qd = hp.q_dim(), F = hp.n_ff;
  const int64_t qkv_w = qd + 2 * kvd;
  auto fl = [&](float*& dst, int64_t n, const char* what) -> Status {
    auto t = mem.alloc<float>(n, what);
    if (!t) return t.error();
    dst = *t;
    return {};
  };
  auto bh = [&](bf16*& dst, int64_t n, const char* what) -> Status {
    auto t = mem.alloc<bf16>(n, what);
    if (!t) return t.error();
    dst = *t;
    return {};
  };
  SIEVE_TRY(fl(h, C * E, "activations"));
  SIEVE_TRY(fl(qkv, C * qkv_w, "activations"));
  SIEVE_TRY(fl(tmp, C * E, "activations"));
  SIEVE_TRY(fl(gu, C * 2 * F, "activations"));
  SIEVE_TRY(fl(logits, hp.n_vocab, "logits"));
  SIEVE_TRY(bh(xb, C * std::max<int64_t>(E, qd), "activations"));
  SIEVE_TRY(bh(q, C * qd, "activations"));
  SIEVE_TRY(bh(k, C * kvd, "activations"));
  SIEVE_TRY(bh(v, C * kvd, "activations"));
  SIEVE_TRY(bh(o, C * qd, "activations"));
  SIEVE_TRY(bh(act, C * F, "activations"));
  // split-K workspaces: decode (<= 256 splits) and prefill (<= k_prefill_splits of a chunk)
  const int64_t G = hp.n_gqa();
  const int64_t dec_o = cuda::decode_ws_o_floats(1, hp.n_head_kv, 256, static_cast<int32_t>(G), hp.head_dim);
  const int64_t pre_o = k_prefill_splits * C * qd;
  SIEVE_TRY(fl(ws_o, std::max(dec_o, pre_o), "attention workspace"));
  SIEVE_TRY(fl(ws_ml, std::max(cuda::decode_ws_ml_floats(1, hp.n_head_kv, 256, static_cast<int32_t>(G)),
                               k_prefill_splits * C * hp.n_head * 2),
               "attention workspace"));
  auto cnt = mem.alloc<uint32_t>(hp.n_head_kv, "attention workspace");
  if (!cnt) return cnt.error();
  ws_cnt = *cnt;
  SIEVE_TRY(cuda_check(cudaMemset(ws_cnt, 0, hp.n_head_kv * sizeof(uint32_t)), "memset"));
  dense_splits = cuda::decode_splits(hp.n_head_kv, max_ctx, dev.n_sm, hp.head_dim);
  sparse_splits = cuda::decode_splits(hp.n_head_kv, pol.top_k + pol.sinks + pol.local + 1, dev.n_sm, hp.head_dim);
  score_chunk = std::max(512, cuda::score_chunk_tokens(hp.n_head_kv, max_ctx, dev.n_sm));
  score_chunks = (max_ctx + score_chunk - 1) / score_chunk;
  {  // cuBLAS gets its workspace up front: nothing is allocated while a graph is captured
    constexpr int64_t k_blas_ws = 32 << 20;
    auto bw = mem.alloc<uint8_t>(k_blas_ws, "cuBLAS workspace");
    if (!bw) return bw.error();
    SIEVE_TRY(cublas_check(cublasSetWorkspace(blas, *bw, k_blas_ws), "workspace"));
  }
  if (pol.sparse) {
    score_stride = cuda::score_row_stride(max_ctx);
    SIEVE_TRY(fl(sc_logits, hp.n_head_kv * G * score_stride, "selection scores"));
    SIEVE_TRY(fl(sc_stats, int64_t{hp.n_head_kv} * score_chunks * G * 2, "selection scores"));
    SIEVE_TRY(fl(scores, (hp.n_head_kv + 1) * score_stride, "selection scores"));
    auto ws = mem.alloc<uint8_t>(cuda::select_ws_bytes(hp.n_head_kv, max_ctx), "selection workspace");
    if (!ws) return ws.error();
    sel_ws = *ws;
    auto si = mem.alloc<int32_t>(int64_t{hp.n_head_kv} * pol.top_k, "selection");
    if (!si) return si.error();
    sel_idx = *si;
    auto sc = mem.alloc<int32_t>(hp.n_head_kv, "selection");
    if (!sc) return sc.error();
    sel_cnt = *sc;
    SIEVE_TRY(bh(q_mean, qd, "mean query"));
    SIEVE_TRY(fl(q_mean_f, qd, "mean query"));
  }
  {
    auto wi = mem.alloc<int32_t>(2, "window list");
    if (!wi) return wi.error();
    win_idx = *wi;
    win_cnt = *wi + 1;
    SIEVE_TRY(cuda_check(cudaMemset(win_idx, 0, 2 * sizeof(int32_t)), "memset"));
    window_splits = cuda::decode_splits(hp.n_head_kv, std::max(hp.sliding_window, 1), dev.n_sm, hp.head_dim);
  }
  auto pi = mem.alloc<int32_t>(n_pages, "page table");
  if (!pi) return pi.error();
  page_idx = *pi;
  {
    std::vector<int32_t> ix(n_pages);
    for (int32_t i = 0; i < n_pages; ++i) ix[i] = i;
    SIEVE_TRY(cuda_check(cudaMemcpy(page_idx, ix.data(), n_pages * sizeof(int32_t), cudaMemcpyHostToDevice),
                         "page table"));
    if (ring_pages > 0) {
      auto ri = mem.alloc<int32_t>(n_pages, "page table");
      if (!ri) return ri.error();
      ring_idx = *ri;
      for (int32_t i = 0; i < n_pages; ++i) ix[i] = i % ring_pages;
      SIEVE_TRY(cuda_check(cudaMemcpy(ring_idx, ix.data(), n_pages * sizeof(int32_t), cudaMemcpyHostToDevice),
                           "page table"));
    }
  }
  auto io = mem.alloc<int32_t>(io_words(), "step inputs");
  if (!io) return io.error();
  io_dev = *io;
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&io_host), io_words() * sizeof(int32_t)), "pinned memory"));
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&logits_host), hp.n_vocab * sizeof(float)), "pinned memory"));
  std::memset(io_host, 0, io_words() * sizeof(int32_t));
  if (pol.sparse) SIEVE_TRY(init_fused_select());
  if (pol.sparse && pol.selection_cache) SIEVE_TRY(init_selection_cache());
  SIEVE_TRY(choose_prefill_kernel());
  return cuda_check(cudaDeviceSynchronize(), "upload");
}

// y [n, out] = x [n, in] . W[out, in]^T (row-major), fp32 accumulation.
Status GpuSession::Impl::gemm(const bf16* w, int64_t out, int64_t in, const bf16* x, int32_t n, float* y) {
  const float one = 1.f, zero = 0.f;
  return cublas_check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), n, static_cast<int>(in),
                                   &one, w, CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
                                   static_cast<int>(in), &zero, y, CUDA_R_32F, static_cast<int>(out),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "gemm");
}

cuda::paged_kv GpuSession::Impl::kv_view(int il) const {
  cuda::paged_kv kv;
  kv.k = layers[il].k;
  kv.v = layers[il].v;
  kv.pages.indptr = indptr_dev();
  kv.pages.indices = ring(il) ? ring_idx : page_idx;
  kv.pages.last_page_len = last_dev();
  kv.pages.batch = 1;
  kv.pages.page_size = k_page;
  kv.n_kv_heads = hp.n_head_kv;
  kv.head_dim = hp.head_dim;
  kv.type = cuda::dtype::bf16;
  return kv;
}

Status GpuSession::Impl::attention(int il, int32_t n, bool sparse) {
  const cuda::launch_cfg lc{stream, true};
  if (n > 1) {
    cuda::prefill_params p;
    p.kv = kv_view(il);
    p.q = q;
    p.qo_indptr = qo_dev();
    p.n_q_heads = hp.n_head;
    p.max_q = n;
    p.total_q = n;
    p.scale = hp.attn_scale;
    p.o = o;
    p.n_splits = cuda::prefill_splits(p, k_prefill_splits);
    p.ws_o = ws_o;
    p.ws_ml = ws_ml;
    if (hp.layer_kind[il] == LayerKind::sliding) {  // each query its own last sliding_window keys
      p.set = window_set();
      p.causal_window = hp.sliding_window;
      return cuda::prefill_attention(p, lc);
    }
    if (!sparse && use_cudnn) {
      cuda::cudnn_prefill_args a;
      a.q = q;
      a.k = layers[il].k;
      a.v = layers[il].v;
      a.seq_q = cudnn_seq_q_dev();
      a.seq_kv = cudnn_seq_kv_dev();
      a.o = o;
      return cudnn->run(a);
    }
    if (sparse) {  // the chunk's mean query selects once for every query of the chunk
      cuda::sketch_query_params mq;
      mq.q = q;
      mq.type = cuda::dtype::bf16;
      mq.qo_indptr = qo_dev();
      mq.batch = 1;
      mq.n_q_heads = hp.n_head;
      mq.n_kv_heads = hp.n_head_kv;
      mq.head_dim = hp.head_dim;
      mq.n_sk_heads = hp.n_head_kv;
      mq.q_out = q_mean_f;
      mq.q_mean = q_mean;
      SIEVE_TRY(cuda::sketch_query(mq, lc));
      SIEVE_TRY(select_tokens(il, q_mean, pol.local + n, p.set));
    }
    return cuda::prefill_attention(p, lc);
  }
  cuda::decode_params a = decode_base(il, q);
  a.o = o;
  a.ws_o = ws_o;
  a.ws_ml = ws_ml;
  a.ws_counter = ws_cnt;
  if (hp.layer_kind[il] == LayerKind::sliding) {
    a.set = window_set();
    a.n_splits = window_splits;
    return cuda::decode_attention(a, lc);
  }
  if (!sparse) {
    a.n_splits = dense_splits;  // splits past the length are empty
    return cuda::decode_attention(a, lc);
  }
  SIEVE_TRY(select_tokens(il, q, pol.local + 1, a.set, true));
  a.n_splits = sparse_splits;
  return cuda::decode_attention(a, lc);
}

Status GpuSession::Impl::enqueue(int32_t n, bool sparse) {
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(io_dev, io_host, io_words() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                       "step inputs"));
  const cuda::launch_cfg lc{stream, true};
  const int32_t E = hp.n_embd, qd = hp.q_dim(), kvd = hp.kv_dim(), F = hp.n_ff;
  SIEVE_TRY(cuda_check(cuda::launch_embed(tok_embd, ids_dev(), n, E, hp.embd_scale, h, stream), "embed"));
  for (int il = 0; il < hp.n_layer; ++il) {
    const GpuLayer& L = layers[il];
    SIEVE_TRY(cuda_check(cuda::launch_rms_norm(h, L.attn_norm, hp.rms_eps, n, E, xb, true, stream), "norm"));
    SIEVE_TRY(gemm(L.wqkv, qd + 2 * kvd, E, xb, n, qkv));
    cuda::qkv_rope_params rp;
    rp.qkv = qkv;
    rp.pos = pos_dev();
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
    SIEVE_TRY(cuda_check(cuda::launch_qkv_rope(rp, n, stream), "qkv_rope"));
    cuda::kv_append_params ap;
    ap.k = L.k;
    ap.v = L.v;
    ap.k_new = k;
    ap.v_new = v;
    ap.slot = ring(il) ? ring_slot_dev() : slot_dev();
    ap.n_new = n;
    ap.n_kv_heads = hp.n_head_kv;
    ap.head_dim = hp.head_dim;
    ap.page_size = k_page;
    ap.type = cuda::dtype::bf16;
    SIEVE_TRY(cuda::kv_append(ap, lc));
    SIEVE_TRY(attention(il, n, sparse));
    SIEVE_TRY(gemm(L.wo, E, qd, o, n, tmp));
    SIEVE_TRY(cuda_check(cuda::launch_residual_add(h, tmp, L.post_attn, hp.rms_eps, n, E, stream), "residual"));
    SIEVE_TRY(cuda_check(cuda::launch_rms_norm(h, L.ffn_norm, hp.rms_eps, n, E, xb, true, stream), "norm"));
    SIEVE_TRY(gemm(L.wgu, 2 * int64_t{F}, E, xb, n, gu));
    SIEVE_TRY(cuda_check(cuda::launch_glu(gu, n, F, hp.act != FfnAct::silu, act, stream), "glu"));
    SIEVE_TRY(gemm(L.wdown, E, F, act, n, tmp));
    SIEVE_TRY(cuda_check(cuda::launch_residual_add(h, tmp, L.post_ffn, hp.rms_eps, n, E, stream), "residual"));
  }
  SIEVE_TRY(cuda_check(cuda::launch_rms_norm(h + int64_t{n - 1} * E, output_norm, hp.rms_eps, 1, E, xb, true, stream),
                       "norm"));
  SIEVE_TRY(gemm(output, hp.n_vocab, E, xb, 1, logits));
  if (cache_on && n == 1 && sparse) {
    SIEVE_TRY(cuda_check(cudaMemcpyAsync(hits_host, sc_hits, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream),
                         "selection cache hits"));
  }
  return cuda_check(cudaMemcpyAsync(logits_host, logits, hp.n_vocab * sizeof(float), cudaMemcpyDeviceToHost, stream),
                    "logits");
}

Status GpuSession::Impl::run(std::span<const int32_t> tokens, std::vector<float>& out, bool dense_chunk) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n <= 0) return make_error("gpu: empty step");
  if (n > max_chunk()) return make_error("gpu: a step of {} tokens exceeds the chunk of {}", n, max_chunk());
  SIEVE_TRY(fits(int64_t{n_tok} + n));
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) return make_error("gpu: token id {} is outside the vocabulary [0, {})", t, hp.n_vocab);
  }
  const int32_t len = n_tok + n;
  set_io_head(len, n);
  for (int32_t i = 0; i < n; ++i) {
    slot_host()[i] = n_tok + i;
    if (ring_pages > 0) {
      const int64_t page = (n_tok + i) / k_page;
      ring_slot_host()[i] = page % ring_pages * k_page + (n_tok + i) % k_page;
    }
    ids_host()[i] = tokens[i];
    pos_host()[i] = n_tok + i;
  }
  // TokenSelect selects once the tokens before the step exceed sinks + window + budget (the
  // CPU's threshold()), for a decode token and for a prefill chunk (prefill=chunk) alike.
  const bool selects = pol.sparse && int64_t{n_tok} - pol.sinks - pol.local > pol.top_k;
  const bool sparse = n == 1 && selects;
  if (n == 1) {  // decode: replay the step's graph (captured on first use)
    cudaGraphExec_t& g = graph[sparse];
    if (!g && !graph_failed[sparse]) {
      cudaGraph_t captured = nullptr;
      Status st = cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
      if (st) {
        st = enqueue(1, sparse);
        const cudaError_t e = cudaStreamEndCapture(stream, &captured);
        if (st && e != cudaSuccess) st = cuda_check(e, "capture");
      }
      if (st && captured) st = cuda_check(cudaGraphInstantiate(&g, captured, 0), "graph");
      if (captured) cudaGraphDestroy(captured);
      if (!st) {  // run without graphs from now on (the launches themselves are checked below)
        g = nullptr;
        graph_failed[sparse] = true;
        cudaGetLastError();
      }
    }
    if (g) {
      SIEVE_TRY(cuda_check(cudaGraphLaunch(g, stream), "graph launch"));
    } else {
      SIEVE_TRY(enqueue(1, sparse));
    }
  } else {
    const bool chunk_sparse = selects && pol.chunk_prefill && !dense_chunk;
    SIEVE_TRY(enqueue(n, chunk_sparse));
    if (chunk_sparse) stats.prefill_selections += n_full_layers();
  }
  SIEVE_TRY(cuda_check(cudaStreamSynchronize(stream), "forward"));
  if (n == 1) {
    const int32_t list = pol.top_k + pol.sinks + pol.local + 1;
    const int32_t L = n_full_layers();  // the sliding-window layers do not select
    stats.keys_total += double{1} * len * L;
    if (sparse) {
      stats.sparse_layer_steps += L;
      if (cache_on) {
        stats.cache_lookups += L;
        stats.cache_hits = *hits_host;  // counted on the device since the sequence began
      }
      stats.selected += double{1} * pol.top_k * L;
      stats.keys_read += double{1} * list * L;
    } else {
      stats.dense_layer_steps += L;
      stats.keys_read += double{1} * len * L;
    }
  }
  n_tok = len;
  ++stats.steps;
  out.assign(logits_host, logits_host + hp.n_vocab);
  return {};
}

GpuSession::GpuSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuSession::~GpuSession() = default;

Result<std::unique_ptr<GpuSession>> GpuSession::create(const Model& model, int32_t max_ctx, const GpuPolicy& policy) {
  auto impl = std::make_unique<Impl>();
  SIEVE_TRY(impl->init(model, max_ctx, policy));
  return std::unique_ptr<GpuSession>(new GpuSession(std::move(impl)));
}

void GpuSession::reset() {
  impl_->n_tok = 0;
  impl_->stats = {};
  if (Status st = impl_->clear_selection_cache(); !st) log_warn("gpu: {}", st.message());
}

Status GpuSession::step(std::span<const int32_t> tokens, std::vector<float>& logits) {
  return impl_->run(tokens, logits);
}

Status GpuSession::prefill(std::span<const int32_t> tokens, std::vector<float>& logits,
                           const std::function<void(int64_t, int64_t)>& progress) {
  if (tokens.empty()) return make_error("gpu: empty prompt");
  SIEVE_TRY(fits(static_cast<int64_t>(tokens.size())));
  const int64_t total = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < total; i += max_chunk()) {
    const int64_t n = std::min<int64_t>(max_chunk(), total - i);
    const bool tail = in_prefill_tail(impl_->pol.prefill_tail, i + n, total) || total < impl_->pol.chunk_from;
    SIEVE_TRY(impl_->run(tokens.subspan(i, n), logits, tail));
    if (progress) progress(i + n, total);
  }
  return {};
}

Status gpu_check_length(const GpuPolicy& pol, const ModelHParams& hp, int64_t len) {
  if (pol.sparse && pol.compact_beyond_train && len > hp.n_ctx_train) {
    return make_error(
        "the sequence would reach {} tokens, past the {} the model was trained with: tokenselect switches to "
        "compact positions there (positions=auto), which the CUDA backend does not run; use --set "
        "positions=original to keep original positions on the GPU, or --backend cpu",
        len, hp.n_ctx_train);
  }
  return {};
}

Status GpuSession::fits(int64_t n_more) const { return impl_->fits(impl_->n_tok + n_more); }
int32_t GpuSession::n_tokens() const { return impl_->n_tok; }
int32_t GpuSession::max_ctx() const { return impl_->max_ctx; }
int64_t GpuSession::kv_bytes_per_token() const {  // one more token: the layers that keep it all
  int64_t n = 0;
  for (int il = 0; il < impl_->hp.n_layer; ++il) n += impl_->ring(il) ? 0 : 1;
  return int64_t{impl_->hp.kv_dim()} * 2 * 2 * n;  // bf16 K and V
}
int64_t GpuSession::kv_bytes() const {
  int64_t t = 0;
  for (int il = 0; il < impl_->hp.n_layer; ++il) t += impl_->held_tokens(il, impl_->n_tok);
  return t * impl_->hp.kv_dim() * 2 * 2;
}
int64_t GpuSession::weight_bytes() const { return impl_->weight_bytes; }
const GpuStats& GpuSession::stats() const { return impl_->stats; }
const GpuPolicy& GpuSession::policy() const { return impl_->pol; }
std::string GpuSession::device_name() const { return impl_->prop.name; }
const std::string& GpuSession::prefill_kernel() const { return impl_->prefill_kernel; }

}  // namespace sieve
