// GpuSession's internals, shared by its source files: gpu_session.cpp (upload, forward pass,
// public API), gpu_session_select.cpp (TokenSelect's selection and its cache on the device),
// gpu_session_prefill.cpp (the dense prefill kernel's choice). Not for use outside src/gpu.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cudnn_attention.h"
#include "gpu/gpu_session.h"

namespace sieve {
namespace gpu_internal {

using bf16 = __nv_bfloat16;
constexpr int32_t k_page = 16;
// Split-K parts of a prefill chunk at most (a 512-token chunk of a model with few KV heads
// fills the GPU only when split; the workspace is sized for it).
constexpr int32_t k_prefill_splits = 16;
// auto's chunk prefill starts here on the GPU (SmolLM2: 1.07x dense at 64K, 1.73x at 128K).
constexpr int32_t k_gpu_auto_chunk_from = 65536;

inline Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return make_error("cuda: {}: {}", what, cudaGetErrorString(e));
}
inline Status cublas_check(cublasStatus_t s, const char* what) {
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

struct GpuLayer {
  bf16 *wqkv = nullptr, *wo = nullptr, *wgu = nullptr, *wdown = nullptr;
  float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float *post_attn = nullptr, *post_ffn = nullptr;
  bf16 *k = nullptr, *v = nullptr;  // [n_pages, k_page, n_kv, d]
};

}  // namespace gpu_internal

struct GpuSession::Impl {
  using bf16 = gpu_internal::bf16;
  using DevMem = gpu_internal::DevMem;
  using GpuLayer = gpu_internal::GpuLayer;
  static constexpr int32_t k_page = gpu_internal::k_page;
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
  // The step's header for a sequence of len tokens whose last n are the step's queries.
  void set_io_head(int32_t len, int32_t n) {
    io_host[0] = 0;
    io_host[1] = (len + k_page - 1) / k_page;
    io_host[2] = len - (io_host[1] - 1) * k_page;
    io_host[3] = len;
    io_host[4] = 0;
    io_host[5] = n;
    io_host[8] = n;
    io_host[12] = len;
  }
  int first_full_layer() const {
    return static_cast<int>(std::find(hp.layer_kind.begin(), hp.layer_kind.end(), LayerKind::full) -
                            hp.layer_kind.begin());
  }
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
  cuda::step_params fused_select_params(const cuda::select_budget& bu, int32_t* out_idx, int32_t out_stride,
                                        int32_t* out_count) const;
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

}  // namespace sieve
