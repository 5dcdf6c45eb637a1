// Shared pieces of bench_cuda: timing on a cold L2, CSV rows, the model shapes, the paged
// cache and buffers, the sparse step plans (bench_cuda.cpp runs them; bench_select.cpp times
// the selection alone).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch/l2_flush.h"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)
#define SK(x)                                                                       \
  do {                                                                              \
    auto s_ = (x);                                                                  \
    if (!s_.ok()) {                                                                 \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s_.message().c_str()); \
      std::exit(2);                                                                 \
    }                                                                               \
  } while (0)

namespace sieve::cuda::bench {

inline cudaStream_t g_stream;
inline void* g_flush = nullptr;
inline uint32_t* g_sink = nullptr;
constexpr size_t k_flush_bytes = 256u << 20;
inline FILE* g_csv = nullptr;
inline std::string g_filter;
inline int g_iters = 20;
inline bool g_quick = false;
inline int g_only_n = 0, g_only_b = 0;  // restrict the model-shape loops (profiling one case)
inline int g_page_size = 16;            // tokens per KV (and sketch) page of the model-shape cases
inline bool g_shuffle_pages = true;     // false: each sequence's pages in order (a fresh pool)
inline device_facts g_dev;
inline launch_cfg g_lc;

struct stats {
  double med = 0, p10 = 0, p90 = 0;
};

template <class T>
T* dalloc(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}
template <class T>
T* dupload(const std::vector<T>& h) {
  T* p = dalloc<T>(h.size());
  CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

inline bool selected(const std::string& name) {
  return g_filter.empty() || name.find(g_filter) != std::string::npos;
}

// Times fn after a cold-L2 flush; `pre` (untimed) restores state before each run.
inline stats time_gpu(const std::function<void()>& fn, const std::function<void()>& pre = {},
                      int iters = 0) {
  if (iters <= 0) iters = g_iters;
  for (int i = 0; i < 2; ++i) {
    if (pre) pre();
    fn();
  }
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CK(launch_l2_flush_read(g_flush, k_flush_bytes, g_sink, g_stream));
    if (pre) pre();
    CK(cudaEventRecord(ev[2 * i], g_stream));
    fn();
    CK(cudaEventRecord(ev[2 * i + 1], g_stream));
  }
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1000.0;
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return {t[iters / 2], t[iters / 10], t[(iters * 9) / 10]};
}

inline void report(const char* group, const std::string& name, const char* model, int B, int N,
                   const stats& s, double bytes, const std::string& note = "") {
  const double gbps = bytes > 0 ? bytes / (s.med * 1e-6) / 1e9 : 0.0;
  std::fprintf(g_csv, "%s,%s,%s,%d,%d,%.2f,%.2f,%.2f,%.0f,%.1f,%s\n", group, name.c_str(), model, B,
               N, s.med, s.p10, s.p90, bytes, gbps, note.c_str());
  std::fflush(g_csv);
  std::printf("%-8s %-34s %-11s B=%d N=%-8d %10.2f us  %8.1f GB/s  %s\n", group, name.c_str(),
              model, B, N, s.med, gbps, note.c_str());
  std::fflush(stdout);
}

struct shape {
  const char* name;
  int n_q, n_kv, D;
};

// Paged cache over shared K/V buffers: pages in shuffled order (--pages-in-order: in order).
struct cache {
  int B = 0, N = 0, ps = g_page_size, n_kv = 0, D = 0;
  int32_t *indptr = nullptr, *indices = nullptr, *last = nullptr, *lens = nullptr;
  void *k = nullptr, *v = nullptr;
  void build(int b, int n, const shape& sh, void* kbuf, void* vbuf, std::mt19937& rng) {
    B = b;
    N = n;
    n_kv = sh.n_kv;
    D = sh.D;
    k = kbuf;
    v = vbuf;
    const int per = (N + ps - 1) / ps;
    std::vector<int32_t> ip(B + 1), ix(static_cast<size_t>(B) * per), la(B, N - (per - 1) * ps),
        ln(B, N);
    for (int i = 0; i <= B; ++i) ip[i] = i * per;
    std::iota(ix.begin(), ix.end(), 0);
    if (g_shuffle_pages) std::shuffle(ix.begin(), ix.end(), rng);
    indptr = dupload(ip);
    indices = dupload(ix);
    last = dupload(la);
    lens = dupload(ln);
  }
  void free_all() {
    cudaFree(indptr);
    cudaFree(indices);
    cudaFree(last);
    cudaFree(lens);
  }
  page_table table() const {
    page_table pt;
    pt.indptr = indptr;
    pt.indices = indices;
    pt.last_page_len = last;
    pt.batch = B;
    pt.page_size = ps;
    return pt;
  }
  paged_kv view() const {
    paged_kv kv;
    kv.k = k;
    kv.v = v;
    kv.pages = table();
    kv.n_kv_heads = n_kv;
    kv.head_dim = D;
    kv.type = dtype::bf16;
    return kv;
  }
};

// Shared device buffers sized for the largest case.
struct buffers {
  void *k = nullptr, *v = nullptr;
  void *sk_bf16 = nullptr, *sk_fp8 = nullptr, *sk_int8 = nullptr, *sk_shared = nullptr;
  float *logits = nullptr, *scores = nullptr, *stats = nullptr, *qsk = nullptr;
  float *ws_o = nullptr, *ws_ml = nullptr;
  uint32_t* ws_cnt = nullptr;
  uint8_t *sel_ws = nullptr, *hdr_backup = nullptr;
  int32_t *sel_idx = nullptr, *sel_cnt = nullptr;
  void *q = nullptr, *o = nullptr, *q_mean = nullptr;
  float* proj = nullptr;
  uint32_t* step_ws = nullptr;  // fused step workspace (zero at rest)
  int64_t max_tokens = 0;
};

constexpr int k_budget = 2048, k_sink = 128, k_window = 512;

// Budget for a decode step (1 query) or a chunk of n_q queries.
inline select_budget step_budget(int n_q) {
  select_budget bu;
  bu.k_max = k_budget;
  bu.lo = k_sink;
  bu.tail = k_window + n_q;
  return bu;
}

struct sparse_variant {
  const char* name;
  bool exact;
  dtype sk_type;
  int n_sk;  // sketch heads: n_kv or 1 (shared)
  int n_sq;  // query heads per sketch head
  sketch_mode mode;
};

// Everything one sparse step needs, set up for (cache, variant, n_queries).
struct step_plan {
  decode_params score;  // exact scorer
  soft_vote_params vote;
  sketch_score_params sk;  // sketch scorer (stats pass; vote pass uses mode)
  select_params sel;
  decode_params attend;
  prefill_params prefill;
  bool exact = false, two_pass = false;
  int rows = 0;
};

inline step_plan make_plan(const cache& c, const shape& sh, const sparse_variant& var, buffers& bf,
                           const void* q_score, int n_q) {
  step_plan sp;
  const int G = sh.n_q / sh.n_kv;
  const int64_t stride = score_row_stride(c.N);
  sp.exact = var.exact;
  sp.rows = var.exact ? c.B * c.n_kv : c.B * var.n_sk;
  const int rows_per_seq = var.exact ? c.n_kv : var.n_sk;
  const select_budget bu = step_budget(n_q);

  sp.sel.scores = bf.scores;
  sp.sel.score_stride = stride;
  sp.sel.seq_len = c.lens;
  sp.sel.rows_per_seq = rows_per_seq;
  sp.sel.n_rows = sp.rows;
  sp.sel.budget = bu;
  sp.sel.ws.base = bf.sel_ws;
  sp.sel.ws.n_rows = sp.rows;
  sp.sel.ws.max_tiles = select_max_tiles(c.N);
  sp.sel.out_idx = bf.sel_idx;
  sp.sel.out_stride = k_budget;
  sp.sel.out_count = bf.sel_cnt;
  hist_sink hs;
  hs.ws = sp.sel.ws;
  hs.seq_len = c.lens;
  hs.rows_per_seq = rows_per_seq;
  hs.budget = bu;

  if (var.exact) {
    const int chunk = score_chunk_tokens(sp.rows, c.N, g_dev.n_sm);
    const int n_chunks = (c.N + chunk - 1) / chunk;
    decode_params& p = sp.score;
    p.kv = c.view();
    p.q = q_score;
    p.n_q_heads = sh.n_q;
    p.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
    p.logits = bf.logits;
    p.logit_stride = stride;
    p.stats = bf.stats;
    p.chunk_tokens = chunk;
    p.n_splits = n_chunks;
    p.zero_ws = bf.sel_ws;
    p.zero_bytes = select_ws_header_bytes();
    soft_vote_params& v = sp.vote;
    v.logits = bf.logits;
    v.logit_stride = stride;
    v.stats = bf.stats;
    v.n_chunks = n_chunks;
    v.G = G;
    v.n_rows = sp.rows;
    v.max_len = c.N;
    v.scores = bf.scores;
    v.score_stride = stride;
    v.hist = hs;
  } else {
    sketch_score_params& p = sp.sk;
    p.sk.keys = var.n_sk == 1 ? bf.sk_shared
                              : (var.sk_type == dtype::bf16
                                     ? bf.sk_bf16
                                     : (var.sk_type == dtype::int8 ? bf.sk_int8 : bf.sk_fp8));
    p.sk.type = var.sk_type;
    p.sk.key_scale = var.sk_type == dtype::int8 ? 0.05f : 1.f;
    p.sk.n_sk_heads = var.n_sk;
    p.sk.dim = 16;
    p.sk.pages = c.table();
    p.q = bf.qsk;
    p.n_sq = var.n_sq;
    p.scale = 0.25f;
    p.chunk_tokens = sketch_chunk_tokens(sp.rows, c.N, g_dev.n_sm);
    p.n_chunks = (c.N + p.chunk_tokens - 1) / p.chunk_tokens;
    p.stats = bf.stats;
    p.scores = bf.scores;
    p.score_stride = stride;
    p.zero_ws = bf.sel_ws;
    p.zero_bytes = select_ws_header_bytes();
    p.hist = hs;
    sp.two_pass = var.mode == sketch_mode::vote;
  }
  token_set ts;
  ts.sel_idx = bf.sel_idx;
  ts.sel_count = bf.sel_cnt;
  ts.sel_stride = k_budget;
  ts.sel_heads = rows_per_seq;
  ts.n_sink = k_sink;
  ts.n_window = k_window;
  if (n_q == 1) {
    decode_params& a = sp.attend;
    a.kv = c.view();
    a.set = ts;
    a.q = bf.q;
    a.n_q_heads = sh.n_q;
    a.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
    a.o = bf.o;
    a.n_splits = decode_splits(c.B * c.n_kv, k_budget + k_sink + k_window + 1, g_dev.n_sm, sh.D);
    a.ws_o = bf.ws_o;
    a.ws_ml = bf.ws_ml;
    a.ws_counter = bf.ws_cnt;
  }
  return sp;
}

// The fused step's inputs and outputs for `batch` rows over the plan's scores and selection.
inline step_params step_io(const cache& c, const step_plan& sp, const buffers& bf, int batch) {
  step_params st;
  st.scores = bf.scores;
  st.score_stride = sp.sel.score_stride;
  st.seq_len = c.lens;
  st.batch = batch;
  st.max_len = c.N;
  st.budget = sp.sel.budget;
  st.out_idx = bf.sel_idx;
  st.out_stride = k_budget;
  st.out_count = bf.sel_cnt;
  st.ws = bf.step_ws;
  return st;
}

inline void run_score(const step_plan& sp, const sparse_variant& var) {
  if (sp.exact) {
    SK(score_exact(sp.score, g_lc));
    SK(soft_vote(sp.vote, g_lc));
  } else if (sp.two_pass) {
    sketch_score_params p = sp.sk;
    p.mode = sketch_mode::stats;
    SK(sketch_score(p, g_lc));
    p.mode = sketch_mode::vote;
    SK(sketch_score(p, g_lc));
  } else {
    sketch_score_params p = sp.sk;
    p.mode = var.mode;
    SK(sketch_score(p, g_lc));
  }
}

// Graph of a step (falls back to eager launches when capture fails).
struct graph_runner {
  cudaGraphExec_t exec = nullptr;
  std::function<void()> eager;
  void capture(const std::function<void()>& fn) {
    eager = fn;
    cudaGraph_t g = nullptr;
    if (cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return;
    fn();
    if (cudaStreamEndCapture(g_stream, &g) != cudaSuccess || g == nullptr) {
      cudaGetLastError();
      return;
    }
    if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
      cudaGetLastError();
      exec = nullptr;
    }
    cudaGraphDestroy(g);
  }
  void run() {
    if (exec)
      CK(cudaGraphLaunch(exec, g_stream));
    else
      eager();
  }
  ~graph_runner() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// Selection alone per layer in a decode pipeline: L = 16 layers' selections (st with
// score = false) back to back in one graph, each over its own copy of st's score rows
// (n_floats of them; cold L2 before the first). The launch latency an isolated launch pays is
// then paid once per graph, as in a captured decode step. Returns the time / L; `note` gets
// what was run.
inline stats selection_per_layer(const step_params& st, size_t n_floats, std::string& note) {
  constexpr int L = 16;
  std::vector<float*> bufs(L);
  for (auto& b : bufs) {
    b = dalloc<float>(n_floats);
    CK(cudaMemcpy(b, st.scores, n_floats * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  graph_runner gl;
  gl.capture([&] {
    for (int l = 0; l < L; ++l) {
      step_params sl = st;
      sl.scores = bufs[l];
      SK(sparse_step(sl, g_lc));
    }
  });
  const stats s = time_gpu([&] { gl.run(); });
  for (auto* b : bufs) cudaFree(b);
  note = std::string(" 16 layers in one graph, time / 16") +
         (gl.exec ? "" : " (eager: capture failed)");
  return stats{s.med / L, s.p10 / L, s.p90 / L};
}

const shape k_llama{"llama3-8b", 32, 8, 128};
const shape k_smol{"smollm2", 9, 3, 64};
const shape k_gemma{"gemma3-270m", 4, 1, 256};

const sparse_variant k_variants[] = {
    {"exact_qk", true, dtype::bf16, 0, 0, sketch_mode::vote},
    {"sketch_bf16_kvhead_vote", false, dtype::bf16, -1, -1, sketch_mode::vote},
    {"sketch_fp8_kvhead_vote", false, dtype::fp8_e4m3, -1, -1, sketch_mode::vote},
    {"sketch_int8_kvhead_vote", false, dtype::int8, -1, -1, sketch_mode::vote},
    {"sketch_fp8_shared_vote", false, dtype::fp8_e4m3, 1, -1, sketch_mode::vote},
    {"sketch_fp8_shared_raw1", false, dtype::fp8_e4m3, 1, 1, sketch_mode::raw},
};

// Resolve -1 placeholders: per-kv-head sketch = n_kv heads with G queries; shared = 1 head
// with all query heads.
inline sparse_variant resolve(sparse_variant v, const shape& sh) {
  if (v.n_sk < 0) v.n_sk = sh.n_kv;
  if (v.n_sq < 0) v.n_sq = v.n_sk == 1 ? std::min(sh.n_q, 32) : sh.n_q / sh.n_kv;
  return v;
}

void bench_select_alone(buffers& bf, std::mt19937& rng, int max_n);

}  // namespace sieve::cuda::bench
