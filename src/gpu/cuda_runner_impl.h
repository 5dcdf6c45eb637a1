// CudaRunner's internals, shared by its source files: cuda_runner.cpp (creation, the step's
// host side: batch order, page tables, graphs), cuda_runner_forward.cpp (the launches of one
// step), cuda_runner_select.cpp (TokenSelect's selection and its cache), gpu_weights.cpp
// (the upload). Not for use outside src/gpu.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/qmatmul.h"
#include "gpu/cuda_runner.h"
#include "kv/kv_store.h"

namespace sieve {
namespace gpu_internal {

using bf16 = __nv_bfloat16;
// Split-K parts of a prefill chunk at most (the workspace is sized for it).
constexpr int32_t k_prefill_splits = 16;
// The selection's widest top_k (selection buffers are sized for it).
constexpr int32_t k_max_top_k = k_gpu_max_top_k;
// A selection-cache hit that would append more tokens than this re-selects.
constexpr int32_t k_max_gap = 1024;

inline Status cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return make_error("cuda: {}: {}", what, cudaGetErrorString(e));
}
inline Status cublas_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return make_error("cublas: {}: status {}", what, static_cast<int>(s));
}

// Device allocations freed together.
struct DevMem {
  std::vector<void*> ptrs;
  int64_t bytes = 0;
  DevMem() = default;
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <class T>
  Result<T*> alloc(int64_t n, const char* what) {
    void* p = nullptr;
    const int64_t b = std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T));
    const cudaError_t e = cudaMalloc(&p, b);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return make_error(
          "cuda: cannot allocate {} MiB for {} ({}); lower --ctx-size, --max-running or "
          "--gpu-mem-fraction's share of other processes",
          b >> 20, what, cudaGetErrorString(e));
    }
    ptrs.push_back(p);
    bytes += b;
    return static_cast<T*>(p);
  }
  template <class T>
  Status alloc_to(T*& dst, int64_t n, const char* what) {
    auto r = alloc<T>(n, what);
    if (!r) return r.error();
    dst = *r;
    return {};
  }
};

// One product of the forward pass: its matrices' rows stacked as bf16 (cuBLAS GEMM) and, when
// every part's GGUF type has a quantized GEMV, the parts' raw blocks as in the file. Steps of
// at most q_max_tok tokens read the blocks (decode reads every weight once; the blocks are
// 3.5x fewer bytes than bf16 for Q4_K), larger ones the bf16 copy; q_max_tok is chosen by
// timing both at start (choose_matmuls).
struct QPart {
  const void* w = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
};
struct MatGroup {
  bf16* bf = nullptr;  // [rows, cols]
  int64_t rows = 0, cols = 0;
  std::vector<QPart> q;           // empty: no quantized copy (a type without a GEMV)
  int32_t q_max_tok = 0;          // 0: always the bf16 GEMM
  std::string signature() const;  // types and shape: groups that time alike
};

struct GpuLayer {
  MatGroup qkv, wo, gu, down;
  float* bqkv = nullptr;  // [q_dim + 2 kv_dim] Q/K/V biases (qwen2), or null
  // [n_rot / 2] pair i's RoPE angle per position (RopeScaling::inv_freqs of the layer's base):
  // what qkv_rope and the selection cache's fingerprint rotate by
  double* rope_inv_freq = nullptr;
  float *attn_norm = nullptr, *ffn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float *post_attn = nullptr, *post_ffn = nullptr;
};

struct GpuWeights {
  bf16* tok_embd = nullptr;
  MatGroup output;
  float* output_norm = nullptr;
  std::vector<GpuLayer> layers;
  int64_t quant_bytes = 0;  // of the raw blocks kept beside the bf16 matrices
};

// Uploads the model's weights (matrices dequantized to bf16) into mem.
Status upload_weights(const Model& m, DevMem& mem, GpuWeights& w);

// One entry of a step in the runner's order: decodes first (dense, then selecting), then
// prefill chunks (dense, then selecting).
struct StepEntry {
  int32_t src = 0;  // index in the scheduler's batch; -1: a padding row of a graph's bucket
  int32_t row = 0;  // first row of the step's tokens
  int32_t n = 0;    // tokens
  int32_t len = 0;  // tokens held after the step (the query positions are len - n ..)
  bool decode = false;
  bool sparse = false;  // attends to a selection
  int32_t slot = -1;    // selection state (sparse policies)
  int32_t pol = -1;     // index into Impl::pols
  bool all_logits = false;
};

}  // namespace gpu_internal

struct CudaRunner::Impl {
  using bf16 = gpu_internal::bf16;
  using StepEntry = gpu_internal::StepEntry;
  ModelHParams hp;
  RunnerLimits lim;
  int32_t C = 0;  // tokens a step at most
  int32_t S = 0;  // sequences a step at most
  double mem_fraction = 0.9;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cuda::device_facts facts;
  cudaDeviceProp prop{};
  gpu_internal::DevMem mem;
  gpu_internal::GpuWeights w;
  int64_t weight_bytes = 0;
  int64_t kv_capacity = 0;
  CudaRunnerStats stats;

  // The store and its device pages: K and V [n_pages, page_size, n_kv, head_dim] bf16.
  KvStore* kv = nullptr;
  gpu_internal::DevMem kv_mem;
  bf16 *kv_k = nullptr, *kv_v = nullptr;
  int32_t page_size = 0, n_pages = 0, max_seq_pages = 0;
  int32_t scratch_page = 0;  // past the store's pages: where padding rows write

  // activations for up to C tokens
  float *h = nullptr, *qkv = nullptr, *tmp = nullptr, *gu = nullptr, *logits = nullptr;
  bf16 *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *act = nullptr,
       *xsel = nullptr;
  float* logits_host = nullptr;  // pinned [S, n_vocab]
  float *ws_o = nullptr, *ws_ml = nullptr;
  uint32_t* ws_cnt = nullptr;
  int32_t *win_idx = nullptr, *win_cnt = nullptr;  // [S] zeros: sliding layers' empty selections
  int32_t window_splits = 1, sparse_splits = 1;

  // Step inputs: one pinned host block copied to one device block per step.
  // Head (fixed offsets, int32 words): ids[C] pos[C] qo[S + 1] qo_local[2 S] seq_len[S]
  // then per stream indptr[S + 1] last[S]. Tail (offsets depend on the step's token count):
  // slots int64 [n_stream][n_tok], then the page ids every indptr points into.
  int32_t* io_host = nullptr;
  int32_t* io_dev = nullptr;
  int64_t io_words = 0;
  int64_t off_pos = 0, off_qo = 0, off_qo_local = 0, off_seq_len = 0, off_tables = 0,
          head_words = 0;
  int32_t n_stream = 0;
  int64_t indptr_off(int32_t s) const { return off_tables + int64_t{s} * (2 * S + 1); }
  int64_t last_off(int32_t s) const { return indptr_off(s) + S + 1; }
  int64_t slots_off(int32_t s, int32_t n_tok) const { return head_words + int64_t{2} * s * n_tok; }
  int64_t pages_off(int32_t n_tok) const { return head_words + int64_t{2} * n_stream * n_tok; }

  // TokenSelect: scratch shared by the step's selections (stream-ordered), and per-slot state
  // of the selection cache ([S][n_layer] rows).
  int64_t score_stride = 0;
  int32_t score_chunk = 512, score_chunks = 1;
  float *sc_logits = nullptr, *sc_stats = nullptr, *scores = nullptr;
  uint8_t* sel_ws = nullptr;
  uint32_t* step_ws = nullptr;  // the fused selection's workspace; null: the chain runs
  int32_t *sel_idx = nullptr, *sel_cnt = nullptr;
  bf16* q_mean = nullptr;
  float* q_mean_f = nullptr;
  float* sc_fp = nullptr;
  int32_t *sc_state = nullptr, *sc_idx = nullptr, *sc_cnt = nullptr, *sc_skip = nullptr;
  uint32_t* sc_hits = nullptr;
  uint32_t* hits_host = nullptr;  // pinned [S]
  float* sc_post = nullptr;       // [n_kv + 1, score_stride] rows between a scorer and the fold
  // Sketch keys (scorer=sketch): bf16 [n_pages, n_kv, page_size, sk_dim] beside the K/V pages
  // (the store's geometry sizes them), written at append once a sketch policy has uploaded its
  // projections sk_proj [n_layer, n_kv, head_dim, sk_dim] (the engine has one sketch spec).
  bf16* sk_pages = nullptr;
  float* sk_proj = nullptr;
  int32_t sk_dim = 0;
  float *sk_q = nullptr, *sk_stats = nullptr;  // query sketches, the stats pass's (max, sum)
  int32_t sk_chunk = 256, sk_chunks = 1;
  // Quest: the picked blocks per KV head and the block row's length.
  int32_t *quest_idx = nullptr, *quest_cnt = nullptr, *quest_nblk = nullptr;
  // aggregation=hard_vote: each query head's top-k, and the vote counts (zero at rest).
  int32_t *hv_idx = nullptr, *hv_cnt = nullptr, *hv_votes = nullptr;
  static constexpr int32_t sc_stride() {
    return gpu_internal::k_max_top_k + gpu_internal::k_max_gap;
  }
  struct Slot {
    KvSeqId seq = 0;
    bool used = false;
    uint32_t hits_seen = 0;
  };
  std::vector<Slot> slots;
  std::vector<GpuPolicy> pols;                  // interned: graph keys name a policy by index
  std::unordered_map<KvSeqId, int32_t> pol_of;  // a sequence's policy (ids are never reused)

  // Decode graphs by composition: {dense decodes padded to a power of two, then (slot, policy)
  // of each selecting one}.
  std::map<std::vector<int32_t>, cudaGraphExec_t> graphs;
  bool graphs_off = false;

  std::vector<StepEntry> order;
  std::vector<int32_t> out_row;  // per scheduler entry: its first logits row in logits_host

  ~Impl();
  Status init(const Model& m, const RunnerLimits& l, const CudaRunner::Options& opt);
  Status attach(KvStore& store);
  Status init_selection();
  Status run(std::span<const BatchEntry> batch, std::vector<float>& out);
  Status plan(std::span<const BatchEntry> batch, int32_t& n_tok, int32_t& n_rows);
  Status fill_tables(std::span<const BatchEntry> batch, int32_t n_tok, int64_t& words);
  int32_t slot_for(KvSeqId seq);
  void release_gone_slots();
  Status apply_row_copies();
  // Every launch of one step of n_tok tokens whose logits rows are n_rows (inputs on the device).
  Status enqueue(int32_t n_tok, int32_t n_rows);
  Status gemm(const bf16* w, int64_t out, int64_t in, const bf16* x, int32_t n, float* y);
  // y [n, g.rows] = x [n, g.cols] . W^T by the quantized GEMV or the bf16 GEMM (q_max_tok); with
  // batch invariance the first n_dec rows (the step's decode rows) and the rest are two
  // products whose per-row arithmetic does not depend on n (cuda_runner_matmul.cpp).
  Status matmul(const gpu_internal::MatGroup& g, const bf16* x, int32_t n, float* y, int32_t n_dec);
  // The quantized GEMV over n tokens, in slices of at most qgemv_max_tok.
  Status qgemv(const gpu_internal::MatGroup& g, const bf16* x, int32_t n, float* y);
  // Batch invariance: cuBLASLt with one split-free algorithm per (shape, path): path 0 decode
  // rows of a group without a quantized GEMV, path 1 prefill rows.
  bool invariant = true;
  int32_t step_dec = 0;  // decode rows at the front of the step being enqueued
  uint8_t* blas_ws = nullptr;
  int64_t blas_ws_bytes = 0;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t lt_desc = nullptr;
  struct LtLayouts {
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    void destroy();
  };
  std::map<std::tuple<int64_t, int64_t, int32_t>, LtLayouts> lt_layout_cache;
  std::map<std::pair<int64_t, int64_t>, std::array<cublasLtMatmulAlgo_t, 2>> lt_algos;
  Status init_invariant_gemm();
  Status lt_layouts(const gpu_internal::MatGroup& g, int32_t n, LtLayouts*& out);
  Status gemm_fixed(const gpu_internal::MatGroup& g, int path, const bf16* x, int32_t n, float* y);
  // Times both products for each distinct group signature at 1, 2, 4 and 8 tokens and sets
  // every group's q_max_tok (SIEVE_GPU_MATMUL=auto | bf16 | quant overrides).
  Status choose_matmuls();
  uint8_t* qws = nullptr;  // the quantized GEMV's activation workspace
  std::string matmul_choice;
  Status attention(int il, int32_t n_tok);
  cuda::paged_kv kv_view(int il, int32_t first, int32_t batch, int32_t n_tok) const;
  // TokenSelect's selection for entry order[b] of layer il from query qsel ([n_head, d]).
  Status select_tokens(int il, int32_t b, const bf16* qsel, int32_t n_tok, cuda::token_set& set);
  // The sketch pages of a store whose geometry keeps sketch keys (attach).
  Status attach_sketches(const KvGeometry& g);
  // Before a policy's first step: a sketch policy uploads its projections.
  Status prepare_policy(const PolicyConfig& p, const GpuPolicy& g);
  // kv_append writes layer il's sketch keys too, when there are any.
  void sketch_append(cuda::kv_append_params& ap, int il) const;
  // The scorer and aggregation of a selection into `rows` (the layer's summed row or one row
  // per KV head); hist_done: the level-0 histogram is built.
  Status score_rows(int il, int32_t b, const bf16* qsel, int32_t n_tok, const GpuPolicy& pol,
                    const cuda::select_budget& bu, bool fused, const int32_t* skip, float* rows,
                    bool& hist_done);
  Status select_quest(int il, int32_t b, const bf16* qsel, int32_t n_tok, float* out_rows,
                      cuda::token_set& set);
  cuda::step_params fused_select_params(const GpuPolicy& pol, const cuda::select_budget& bu,
                                        const int32_t* seq_len, int32_t* out_idx,
                                        int32_t out_stride, int32_t* out_count) const;
  const int32_t* dev(int64_t off) const { return io_dev + off; }
  bool sliding(int il) const { return hp.layer_kind[il] == LayerKind::sliding; }
};

}  // namespace sieve
