#include "gpu/gpu_session.h"

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
namespace {

using bf16 = __nv_bfloat16;
constexpr int32_t k_page = 16;
// Split-K parts of a prefill chunk at most (a 512-token chunk of a model with few KV heads
// fills the GPU only when split; the workspace is sized for it).
constexpr int32_t k_prefill_splits = 16;
// auto's chunk prefill starts here on the GPU (SmolLM2: 1.07x dense at 64K, 1.73x at 128K).
constexpr int32_t k_gpu_auto_chunk_from = 65536;

Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return make_error("cuda: {}: {}", what, cudaGetErrorString(e));
}
Status cublas_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return make_error("cublas: {}: status {}", what, static_cast<int>(s));
}

// Device allocation freed with the session.
struct DevMem {
  std::vector<void*> ptrs;
  int64_t bytes = 0;
  ~DevMem() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <class T>
  Result<T*> alloc(int64_t n, const char* what) {
    void* p = nullptr;
    const int64_t b = std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T));
    const cudaError_t e = cudaMalloc(&p, b);
    if (e != cudaSuccess) {
      return make_error("cuda: cannot allocate {} MiB for {} ({}); use a smaller --ctx-size",
                        b >> 20, what, cudaGetErrorString(e));
    }
    ptrs.push_back(p);
    bytes += b;
    return static_cast<T*>(p);
  }
};

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

struct GpuLayer {
  bf16 *wqkv = nullptr, *wo = nullptr, *wgu = nullptr, *wdown = nullptr;
  float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float *post_attn = nullptr, *post_ffn = nullptr;
  bf16 *k = nullptr, *v = nullptr;  // [n_pages, k_page, n_kv, d]
};

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
      p.raw_logits || p.positions == PositionMode::compact || p.evicts() || p.drops_prefill() ||
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

struct GpuSession::Impl {
  ModelHParams hp;
  GpuPolicy pol;
  int32_t max_ctx = 0, n_pages = 0, n_tok = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cuda::device_facts dev;
  cudaDeviceProp prop{};
  DevMem mem;
  int64_t weight_bytes = 0;
  GpuStats stats;

  bf16* tok_embd = nullptr;
  bf16* output = nullptr;
  float* output_norm = nullptr;
  std::vector<GpuLayer> layers;

  // activations for up to max_chunk() tokens
  float *h = nullptr, *qkv = nullptr, *tmp = nullptr, *gu = nullptr, *logits = nullptr;
  bf16 *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *act = nullptr;
  // attention workspaces
  float *ws_o = nullptr, *ws_ml = nullptr;
  uint32_t* ws_cnt = nullptr;
  float *sc_logits = nullptr, *sc_stats = nullptr, *scores = nullptr;
  uint8_t* sel_ws = nullptr;
  // the fused selection (sparse_step, selection alone: one launch instead of the chain's six)
  // and its workspace; null when the device cannot run it for this shape (the chain then runs)
  uint32_t* step_ws = nullptr;
  int32_t *sel_idx = nullptr, *sel_cnt = nullptr;
  int64_t score_stride = 0;
  // per-step inputs: one pinned host block copied to one device block
  // layout (int32 words): indptr[2] last[1] seq_len[1] qo[2] pad[2] | n pad[3] seq_len pad[3]
  // (cuDNN's 16-byte aligned lengths) | slot int64[C] | ring slot int64[C] | ids[C] | pos[C]
  int32_t* io_host = nullptr;
  int32_t* io_dev = nullptr;
  int32_t* page_idx = nullptr;
  // Sliding-window layers keep their last ring_pages pages only (a ring: logical page i is
  // physical page i % ring_pages, ring_idx); 0 = no sliding layers, or the context fits anyway.
  int32_t ring_pages = 0;
  int32_t* ring_idx = nullptr;
  float* logits_host = nullptr;

  static constexpr int64_t k_io_head = 16;
  static constexpr int64_t io_words() { return k_io_head + 4 * max_chunk() + 2 * max_chunk(); }
  int64_t* slot_host() { return reinterpret_cast<int64_t*>(io_host + k_io_head); }
  int64_t* ring_slot_host() { return reinterpret_cast<int64_t*>(io_host + k_io_head + 2 * max_chunk()); }
  int32_t* ids_host() { return io_host + k_io_head + 4 * max_chunk(); }
  int32_t* pos_host() { return ids_host() + max_chunk(); }
  const int32_t* indptr_dev() const { return io_dev; }
  const int32_t* last_dev() const { return io_dev + 2; }
  const int32_t* seqlen_dev() const { return io_dev + 3; }
  const int32_t* qo_dev() const { return io_dev + 4; }
  const int32_t* cudnn_seq_q_dev() const { return io_dev + 8; }
  const int32_t* cudnn_seq_kv_dev() const { return io_dev + 12; }
  const int64_t* slot_dev() const { return reinterpret_cast<const int64_t*>(io_dev + k_io_head); }
  const int64_t* ring_slot_dev() const {
    return reinterpret_cast<const int64_t*>(io_dev + k_io_head + 2 * max_chunk());
  }
  const int32_t* ids_dev() const { return io_dev + k_io_head + 4 * max_chunk(); }
  bool ring(int il) const { return ring_pages > 0 && hp.layer_kind[il] == LayerKind::sliding; }
  // tokens whose K/V layer il holds for a sequence of n tokens
  int64_t held_tokens(int il, int64_t n) const { return ring(il) ? std::min<int64_t>(n, int64_t{ring_pages} * k_page) : n; }
  const int32_t* pos_dev() const { return ids_dev() + max_chunk(); }

  ~Impl() {
    for (cudaGraphExec_t g : graph) {
      if (g) cudaGraphExecDestroy(g);
    }
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
    if (io_host) cudaFreeHost(io_host);
    if (logits_host) cudaFreeHost(logits_host);
    if (hits_host) cudaFreeHost(hits_host);
  }

  Status init(const Model& m, int32_t ctx, const GpuPolicy& p);
  Status gemm(const bf16* w, int64_t out, int64_t in, const bf16* x, int32_t n, float* y);
  // Attention of the n newest tokens of layer il into o. Decode (n == 1) launches use shapes
  // fixed for max_ctx (lengths are read on the device), so one captured graph serves every step.
  Status attention(int il, int32_t n, bool sparse);
  // TokenSelect's selection for query `qsel` ([n_head, d] bf16; a decode query or a chunk's
  // mean query) over the first len - tail tokens: sel_idx / sel_cnt, per layer or per KV head.
  // decode: with the selection cache on, the layer's cached selection (the probe decides on the
  // device whether the scorer and the selection run at all).
  Status select_tokens(int il, const bf16* qsel, int32_t tail, cuda::token_set& set, bool decode = false);
  // TokenSelect's Selection Cache (decode, scope=layer, over the fused selection): per layer the
  // fingerprint, its state, the selection row (top_k + k_max_gap wide) and the skip flag.
  static constexpr int32_t k_max_gap = 1024;
  bool cache_on = false;
  float* sc_fp = nullptr;
  int32_t *sc_state = nullptr, *sc_idx = nullptr, *sc_cnt = nullptr, *sc_skip = nullptr;
  uint32_t* sc_hits = nullptr;
  uint32_t* hits_host = nullptr;
  int32_t sc_stride() const { return pol.top_k + k_max_gap; }
  Status init_selection_cache();
  Status clear_selection_cache();
  Status init_fused_select();
  // Dense prefill chunks of the full-attention layers: cuDNN's fused attention when it is
  // faster than our kernel on this model's shape (timed once here), else ours.
  Status choose_prefill_kernel();
  Status time_prefill(bool with_cudnn, int32_t n, float& us);
  std::unique_ptr<cuda::CudnnPrefill> cudnn;
  bool use_cudnn = false;
  std::string prefill_kernel;
  cuda::step_params fused_select_params(const cuda::select_budget& bu, int32_t* out_idx = nullptr,
                                        int32_t out_stride = 0, int32_t* out_count = nullptr) const;
  bf16* q_mean = nullptr;
  float* q_mean_f = nullptr;
  // Sliding-window layers read an empty selection + the window: [1] index, [1] zero count.
  int32_t *win_idx = nullptr, *win_cnt = nullptr;
  int32_t window_splits = 1;
  int32_t n_full_layers() const {
    return static_cast<int32_t>(std::count(hp.layer_kind.begin(), hp.layer_kind.end(), LayerKind::full));
  }
  cuda::token_set window_set() const {
    cuda::token_set w;
    w.sel_idx = win_idx;
    w.sel_count = win_cnt;
    w.sel_stride = 1;
    w.sel_heads = 1;
    w.n_sink = 0;
    w.n_window = hp.sliding_window - 1;  // + the query itself: sliding_window tokens
    return w;
  }
  // Every launch of one forward step of n tokens (inputs already in io_host), logits copied to
  // logits_host; no synchronisation.
  Status enqueue(int32_t n, bool sparse);
  // dense_chunk: a prefill chunk attends densely whatever the policy (prefill_tail).
  Status run(std::span<const int32_t> tokens, std::vector<float>& logits, bool dense_chunk = false);
  // Whether the sequence may grow to len tokens: the context, and TokenSelect's positions=auto,
  // which the CPU turns into compact positions past the trained context (not on the GPU).
  Status fits(int64_t len) const {
    if (len > max_ctx) {
      return make_error("the sequence would hold {} tokens, more than the context of {}; use a larger --ctx-size",
                        len, max_ctx);
    }
    return gpu_check_length(pol, hp, len);
  }
  cuda::paged_kv kv_view(int il) const;
  // One query per head against layer il's paged KV (decode attention or the exact scorer).
  cuda::decode_params decode_base(int il, const bf16* query) const {
    cuda::decode_params d;
    d.kv = kv_view(il);
    d.q = query;
    d.n_q_heads = hp.n_head;
    d.scale = hp.attn_scale;
    return d;
  }
  // Decode-step graphs, [0] dense and [1] sparse; null until first used (or when capture failed).
  cudaGraphExec_t graph[2] = {nullptr, nullptr};
  bool graph_failed[2] = {false, false};
  int32_t dense_splits = 1, sparse_splits = 1, score_chunk = 512, score_chunks = 1;
};

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

// One chunk of n queries against n keys of the first full layer (zeroed: timing only), best of 3.
Status GpuSession::Impl::time_prefill(bool with_cudnn, int32_t n, float& us) {
  int il = 0;
  while (hp.layer_kind[il] != LayerKind::full) ++il;
  const int32_t q_rows = std::min(n, max_chunk());
  io_host[0] = 0;
  io_host[1] = (n + k_page - 1) / k_page;
  io_host[2] = n - (io_host[1] - 1) * k_page;
  io_host[3] = n;
  io_host[4] = 0;
  io_host[5] = q_rows;
  io_host[8] = q_rows;
  io_host[12] = n;
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(io_dev, io_host, k_io_head * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                       "copy"));
  const bool keep = use_cudnn;
  use_cudnn = with_cudnn;
  cudaEvent_t ev[2];
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[0]), "event"));
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[1]), "event"));
  Status st;
  us = 1e30f;
  for (int rep = 0; rep < 4 && st; ++rep) {  // the first run warms up
    float ms = 0;
    st = cuda_check(cudaEventRecord(ev[0], stream), "event");
    if (st) st = attention(il, q_rows, false);
    if (st) st = cuda_check(cudaEventRecord(ev[1], stream), "event");
    if (st) st = cuda_check(cudaEventSynchronize(ev[1]), "prefill probe");
    if (st) st = cuda_check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "event");
    if (st && rep > 0) us = std::min(us, ms * 1000.f);
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  use_cudnn = keep;
  return st;
}

// SIEVE_GPU_PREFILL=auto (or unset) | sieve | cudnn; like vLLM's VLLM_ATTENTION_BACKEND.
Status GpuSession::Impl::choose_prefill_kernel() {
  const char* env = std::getenv("SIEVE_GPU_PREFILL");
  const std::string want = env ? env : "auto";
  if (want != "auto" && want != "sieve" && want != "cudnn") {
    return make_error("SIEVE_GPU_PREFILL={}: use auto (time both), sieve or cudnn", want);
  }
  prefill_kernel = want == "sieve" ? "sieve (SIEVE_GPU_PREFILL=sieve)" : "sieve";
  if (want == "sieve" || n_full_layers() == 0 || (pol.sparse && pol.chunk_prefill && pol.prefill_tail == 0)) {
    return {};
  }
  cuda::cudnn_prefill_shape sh;
  sh.n_q_heads = hp.n_head;
  sh.n_kv_heads = hp.n_head_kv;
  sh.head_dim = hp.head_dim;
  sh.max_q = max_chunk();
  sh.max_kv = std::max(max_ctx, max_chunk());
  sh.scale = hp.attn_scale;
  auto plan = cuda::CudnnPrefill::create(sh, stream);
  if (!plan && want == "cudnn") return make_error("SIEVE_GPU_PREFILL=cudnn: {}", plan.message());
  if (!plan) {
    prefill_kernel = fmt::format("sieve (cuDNN unavailable: {})", plan.message());
    return {};
  }
  cudnn = std::move(*plan);
  if (want == "cudnn") {
    use_cudnn = true;
    prefill_kernel = "cuDNN (SIEVE_GPU_PREFILL=cudnn)";
    return {};
  }
  // A chunk that sees 16K keys (or the whole context): zeroed K/V, queries and their lengths.
  const int32_t n = std::min(max_ctx, 16384);
  int il = 0;
  while (hp.layer_kind[il] != LayerKind::full) ++il;
  const size_t kv_bytes = static_cast<size_t>(n) * hp.kv_dim() * sizeof(bf16);
  SIEVE_TRY(cuda_check(cudaMemsetAsync(layers[il].k, 0, kv_bytes, stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(layers[il].v, 0, kv_bytes, stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(q, 0, static_cast<size_t>(max_chunk()) * hp.q_dim() * sizeof(bf16), stream),
                       "memset"));
  float ours = 0, theirs = 0;
  SIEVE_TRY(time_prefill(false, n, ours));
  const Status timed = time_prefill(true, n, theirs);
  if (!timed) {  // cuDNN failed on this device: keep ours and say why
    (void)cudaGetLastError();
    cudnn.reset();
    prefill_kernel = fmt::format("sieve (cuDNN failed: {})", timed.message());
    return {};
  }
  use_cudnn = theirs < 0.95f * ours;  // ours unless cuDNN is clearly faster
  if (!use_cudnn) cudnn.reset();
  auto version = cuda::cudnn_version();
  prefill_kernel = fmt::format("{} ({}-query chunk over {} keys: sieve {:.0f} us, cuDNN {} {:.0f} us)",
                               use_cudnn ? "cuDNN" : "sieve", std::min(n, max_chunk()), n, ours,
                               version ? *version : "?", theirs);
  return {};
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

cuda::step_params GpuSession::Impl::fused_select_params(const cuda::select_budget& bu, int32_t* out_idx,
                                                        int32_t out_stride, int32_t* out_count) const {
  const int32_t rows = pol.layer_vote ? 1 : hp.n_head_kv;
  cuda::step_params st;
  st.score = false;
  st.attend_on = false;
  st.scores = pol.layer_vote ? scores + int64_t{hp.n_head_kv} * score_stride : scores;
  st.score_stride = score_stride;
  st.seq_len = seqlen_dev();
  st.batch = rows;
  st.rows_per_seq = rows;
  st.max_len = max_ctx;
  st.budget = bu;
  st.out_idx = out_idx ? out_idx : sel_idx;
  st.out_stride = out_idx ? out_stride : pol.top_k;
  st.out_count = out_count ? out_count : sel_cnt;
  st.ws = step_ws;
  return st;
}

// One selection over zero scores at the longest length decides whether the fused selection
// runs here (shared memory, cluster or grid residency for this shape); the chain otherwise.
Status GpuSession::Impl::init_fused_select() {
  const int32_t rows = pol.layer_vote ? 1 : hp.n_head_kv;
  auto ws = mem.alloc<uint8_t>(cuda::step_ws_bytes(rows), "selection workspace");
  if (!ws) return ws.error();
  step_ws = reinterpret_cast<uint32_t*>(*ws);
  SIEVE_TRY(cuda_check(cudaMemsetAsync(step_ws, 0, cuda::step_ws_bytes(rows), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(scores, 0, (hp.n_head_kv + 1) * score_stride * sizeof(float), stream), "memset"));
  io_host[3] = max_ctx;  // the probe's length
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(io_dev, io_host, k_io_head * sizeof(int32_t), cudaMemcpyHostToDevice, stream), "copy"));
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = pol.local + 1;
  const Status probe = cuda::sparse_step(fused_select_params(bu), cuda::launch_cfg{stream, true});
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!probe.ok() || e != cudaSuccess) {
    (void)cudaGetLastError();  // a refused launch leaves no sticky error; clear the last one
    step_ws = nullptr;
  }
  return {};
}

Status GpuSession::Impl::init_selection_cache() {
  if (step_ws == nullptr) {  // the probe's skip reaches the fused selection only
    log_warn("gpu: the fused selection does not run for this shape, so the selection cache is off");
    return {};
  }
  const int32_t L = hp.n_layer;
  auto fp = mem.alloc<float>(int64_t{L} * hp.head_dim, "selection cache");
  auto st = mem.alloc<int32_t>(4 * L, "selection cache");
  auto ix = mem.alloc<int32_t>(int64_t{L} * sc_stride(), "selection cache");
  auto ct = mem.alloc<int32_t>(L, "selection cache");
  auto sk = mem.alloc<int32_t>(L, "selection cache");
  auto hi = mem.alloc<uint32_t>(1, "selection cache");
  if (!fp || !st || !ix || !ct || !sk || !hi) return make_error("cuda: cannot allocate the selection cache");
  sc_fp = *fp;
  sc_state = *st;
  sc_idx = *ix;
  sc_cnt = *ct;
  sc_skip = *sk;
  sc_hits = *hi;
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&hits_host), sizeof(uint32_t)), "pinned memory"));
  cache_on = true;
  return clear_selection_cache();
}

// A new sequence: no layer has a fingerprint, no hits counted.
Status GpuSession::Impl::clear_selection_cache() {
  if (!cache_on) return {};
  *hits_host = 0;
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_state, 0, 4 * hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_cnt, 0, hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_skip, 0, hp.n_layer * sizeof(int32_t), stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(sc_hits, 0, sizeof(uint32_t), stream), "memset"));
  return cuda_check(cudaStreamSynchronize(stream), "selection cache reset");
}

Status GpuSession::Impl::select_tokens(int il, const bf16* qsel, int32_t tail, cuda::token_set& set, bool decode) {
  const cuda::launch_cfg lc{stream, true};
  const bool cached = decode && cache_on;
  int32_t* const c_idx = cached ? sc_idx + int64_t{il} * sc_stride() : nullptr;
  int32_t* const c_cnt = cached ? sc_cnt + il : nullptr;
  const int32_t* const skip = cached ? sc_skip + il : nullptr;
  if (cached) {
    cuda::sel_cache_params cp;
    cp.q = qsel;
    cp.pos = pos_dev();
    cp.seq_len = seqlen_dev();
    cp.n_q_heads = hp.n_head;
    cp.head_dim = hp.head_dim;
    cp.n_rot = hp.n_rot;
    cp.rope_base = hp.rope_base[il];
    cp.neox = hp.rope_mode == RopeMode::neox;
    cp.theta = pol.theta;
    cp.n_sink = pol.sinks;
    cp.n_window = pol.local;
    cp.fp = sc_fp + int64_t{il} * hp.head_dim;
    cp.state = sc_state + 4 * il;
    cp.sel_idx = c_idx;
    cp.sel_count = c_cnt;
    cp.max_gap = k_max_gap;
    cp.skip = sc_skip + il;
    cp.hits = sc_hits;
    SIEVE_TRY(cuda::selection_cache_probe(cp, lc));
  }
  const int32_t G = hp.n_gqa();
  const int32_t rows = hp.n_head_kv;
  const int32_t sel_rows = pol.layer_vote ? 1 : rows;
  cuda::select_budget bu;
  bu.k_max = pol.top_k;
  bu.lo = pol.sinks;
  bu.tail = tail;
  cuda::select_params sel;
  sel.score_stride = score_stride;
  sel.seq_len = seqlen_dev();
  sel.rows_per_seq = sel_rows;
  sel.n_rows = sel_rows;
  sel.budget = bu;
  sel.ws.base = sel_ws;
  sel.ws.n_rows = rows;
  sel.ws.max_tiles = cuda::select_max_tiles(max_ctx);
  sel.out_idx = sel_idx;
  sel.out_stride = pol.top_k;
  sel.out_count = sel_cnt;
  // exact paged q.K (chunks past the length are empty) -> per-head softmax summed -> top-k
  cuda::decode_params s = decode_base(il, qsel);
  s.logits = sc_logits;
  s.logit_stride = score_stride;
  s.stats = sc_stats;
  s.chunk_tokens = score_chunk;
  s.n_splits = score_chunks;
  s.zero_ws = pol.layer_vote || step_ws ? nullptr : sel_ws;
  s.zero_bytes = cuda::select_ws_header_bytes();
  s.skip = skip;
  SIEVE_TRY(cuda::score_exact(s, lc));
  cuda::soft_vote_params vt;
  vt.logits = sc_logits;
  vt.logit_stride = score_stride;
  vt.stats = sc_stats;
  vt.n_chunks = score_chunks;
  vt.G = G;
  vt.n_rows = rows;
  vt.max_len = max_ctx;
  // scope=layer: every head of the layer votes into one row (scores' last), in the same launch
  float* summed = scores + int64_t{rows} * score_stride;
  vt.fold = pol.layer_vote ? rows : 1;
  vt.scores = pol.layer_vote ? summed : scores;
  vt.score_stride = score_stride;
  vt.hist.seq_len = seqlen_dev();
  vt.hist.rows_per_seq = sel_rows;
  vt.hist.budget = bu;
  if (!pol.layer_vote && !step_ws) vt.hist.ws = sel.ws;
  vt.skip = skip;
  SIEVE_TRY(cuda::soft_vote(vt, lc));
  if (pol.layer_vote) sel.scores = summed;
  if (cached) {  // cache_on implies the fused selection
    cuda::step_params st = fused_select_params(bu, c_idx, sc_stride(), c_cnt);
    st.skip = skip;
    SIEVE_TRY(cuda::sparse_step(st, lc));
    set.sel_idx = c_idx;
    set.sel_count = c_cnt;
    set.sel_stride = sc_stride();
    set.sel_heads = 1;
    set.n_sink = pol.sinks;
    set.n_window = pol.local;
    return {};
  }
  if (step_ws) {
    SIEVE_TRY(cuda::sparse_step(fused_select_params(bu), lc));
  } else if (pol.layer_vote) {
    SIEVE_TRY(cuda::select(sel, false, lc));
  } else {
    sel.scores = scores;
    SIEVE_TRY(cuda::select(sel, true, lc));
  }
  set.sel_idx = sel_idx;
  set.sel_count = sel_cnt;
  set.sel_stride = pol.top_k;
  set.sel_heads = sel_rows;
  set.n_sink = pol.sinks;
  set.n_window = pol.local;
  return {};
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
  io_host[0] = 0;
  io_host[1] = (len + k_page - 1) / k_page;
  io_host[2] = len - (io_host[1] - 1) * k_page;
  io_host[3] = len;
  io_host[4] = 0;
  io_host[5] = n;
  io_host[8] = n;
  io_host[12] = len;
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
