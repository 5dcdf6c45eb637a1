// bench_cuda: times the CUDA sparse-attention kernels on model attention shapes, one layer,
// cold L2 (a 256 MB read before every timed run), CUDA events, median of N runs.
// Writes CSV rows (group,name,model,B,N,median_us,p10_us,p90_us,bytes,GBps,note) to --out;
// bench/cuda/report.py joins them with the PyTorch SDPA baseline of the same run.
//
//   bench_cuda --out ours.csv [--quick] [--filter SUBSTR] [--iters N]
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
#include "backend/cuda/tests/real_rows.h"

using namespace sieve::cuda;

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

namespace {

cudaStream_t g_stream;
void* g_flush = nullptr;
uint32_t* g_sink = nullptr;
constexpr size_t k_flush_bytes = 256u << 20;
FILE* g_csv = nullptr;
std::string g_filter;
int g_iters = 20;
bool g_quick = false;
int g_only_n = 0, g_only_b = 0;  // restrict the model-shape loops (profiling one case)
device_facts g_dev;
launch_cfg g_lc;

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

bool selected(const std::string& name) {
  return g_filter.empty() || name.find(g_filter) != std::string::npos;
}

// Times fn after a cold-L2 flush; `pre` (untimed) restores state before each run.
stats time_gpu(const std::function<void()>& fn, const std::function<void()>& pre = {},
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

void report(const char* group, const std::string& name, const char* model, int B, int N,
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

// Paged cache over shared K/V buffers: pages in shuffled order.
struct cache {
  int B = 0, N = 0, ps = 16, n_kv = 0, D = 0;
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
    std::shuffle(ix.begin(), ix.end(), rng);
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
select_budget step_budget(int n_q) {
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

step_plan make_plan(const cache& c, const shape& sh, const sparse_variant& var, buffers& bf,
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
step_params step_io(const cache& c, const step_plan& sp, const buffers& bf, int batch) {
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

void run_score(const step_plan& sp, const sparse_variant& var) {
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
sparse_variant resolve(sparse_variant v, const shape& sh) {
  if (v.n_sk < 0) v.n_sk = sh.n_kv;
  if (v.n_sq < 0) v.n_sq = v.n_sk == 1 ? std::min(sh.n_q, 32) : sh.n_q / sh.n_kv;
  return v;
}

void bench_dense_decode(const cache& c, const shape& sh, buffers& bf) {
  const std::string base = "decode_dense";
  if (!selected(base)) return;
  decode_params a;
  a.kv = c.view();
  a.q = bf.q;
  a.n_q_heads = sh.n_q;
  a.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
  a.o = bf.o;
  a.ws_o = bf.ws_o;
  a.ws_ml = bf.ws_ml;
  a.ws_counter = bf.ws_cnt;
  const int def = decode_splits(c.B * c.n_kv, c.N, g_dev.n_sm, sh.D);
  const double bytes = 2.0 * c.B * static_cast<double>(c.N) * c.n_kv * c.D * 2;
  stats best;
  int best_s = 0;
  for (int s : {def, std::max(1, def / 2), std::min(256, def * 2)}) {
    a.n_splits = s;
    const stats st = time_gpu([&] { SK(decode_attention(a, g_lc)); });
    if (s == def)
      report("decode", base, sh.name, c.B, c.N, st, bytes, "splits=" + std::to_string(s));
    if (best_s == 0 || st.med < best.med) {
      best = st;
      best_s = s;
    }
    if (g_quick) break;
  }
  if (!g_quick)
    report("decode", base + "_best", sh.name, c.B, c.N, best, bytes,
           "splits=" + std::to_string(best_s));
}

void bench_sparse_decode(const cache& c, const shape& sh, buffers& bf, const sparse_variant& var0) {
  const sparse_variant var = resolve(var0, sh);
  const std::string name = std::string("step_") + var.name;
  if (!selected(name)) return;
  step_plan sp = make_plan(c, sh, var, bf, bf.q, 1);
  const int G = sh.n_q / sh.n_kv;
  const double kv_token_bytes = static_cast<double>(c.n_kv) * c.D * 2;
  // bytes of the scoring read (the part that scales with N)
  double score_bytes = 0;
  if (var.exact)
    score_bytes = c.B * static_cast<double>(c.N) * kv_token_bytes + 2.0 * sp.rows * G * 4.0 * c.N;
  else
    score_bytes = c.B * static_cast<double>(c.N) * var.n_sk * 16 *
                  (var.sk_type == dtype::bf16 ? 2 : 1) * (sp.two_pass ? 2 : 1);
  const std::string note_pass = sp.two_pass ? "two-pass" : "one-pass";

  const stats s_score = time_gpu([&] { run_score(sp, var); });
  report("sparse", name + ".score", sh.name, c.B, c.N, s_score, score_bytes, note_pass);
  if (var.exact) {  // the two kernels of exact scoring, apart
    const double k_bytes = c.B * static_cast<double>(c.N) * kv_token_bytes;
    const stats s_qk = time_gpu([&] { SK(score_exact(sp.score, g_lc)); });
    report("sparse", name + ".score_qk", sh.name, c.B, c.N, s_qk, k_bytes,
           "K read; chunk=" + std::to_string(sp.score.chunk_tokens));
    const stats s_vote = time_gpu([&] { SK(soft_vote(sp.vote, g_lc)); });
    report("sparse", name + ".soft_vote", sh.name, c.B, c.N, s_vote, 1.25 * sp.rows * G * 4.0 * c.N,
           "");
  }

  // selection chain alone on the fused level-0 histogram: restore the header first
  run_score(sp, var);
  const size_t hdr = static_cast<size_t>(sp.rows) * select_ws_header_bytes();
  CK(cudaMemcpyAsync(bf.hdr_backup, bf.sel_ws, hdr, cudaMemcpyDeviceToDevice, g_stream));
  const stats s_sel = time_gpu(
      [&] { SK(select(sp.sel, true, g_lc)); },
      [&] {
        CK(cudaMemcpyAsync(bf.sel_ws, bf.hdr_backup, hdr, cudaMemcpyDeviceToDevice, g_stream));
      });
  report("sparse", name + ".select", sh.name, c.B, c.N, s_sel, 0,
         "rows=" + std::to_string(sp.rows));

  const double att_bytes = static_cast<double>(c.B) * c.n_kv * (k_budget + k_sink + k_window + 1) *
                           c.D * 2 * 2 * (sp.sel.rows_per_seq == 1 ? 1 : 1);
  const stats s_att = time_gpu([&] { SK(decode_attention(sp.attend, g_lc)); });
  report("sparse", name + ".attend", sh.name, c.B, c.N, s_att, att_bytes,
         "splits=" + std::to_string(sp.attend.n_splits));

  auto step = [&] {
    run_score(sp, var);
    SK(select(sp.sel, true, g_lc));
    SK(decode_attention(sp.attend, g_lc));
  };
  const stats s_eager = time_gpu(step);
  report("sparse", name + ".step_eager", sh.name, c.B, c.N, s_eager, 0, note_pass);
  graph_runner gr;
  gr.capture(step);
  const stats s_graph = time_gpu([&] { gr.run(); });
  report("sparse", name + ".step", sh.name, c.B, c.N, s_graph, 0,
         gr.exec ? "graph" : "eager(capture failed)");
  // how many tokens did it pick (sanity: the budget)
  std::vector<int32_t> cnt(sp.rows);
  CK(cudaMemcpy(cnt.data(), bf.sel_cnt, sp.rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
  if (cnt[0] != std::min(k_budget, c.N - k_sink - k_window - 1))
    std::fprintf(stderr, "warning: %s selected %d tokens in row 0\n", name.c_str(), cnt[0]);

  // The same step with the selection as the fused step's selection-only launch over the rows
  // the scorer wrote (one per KV head or sketch head: rows_per_seq), instead of the chain.
  if (sp.sel.rows_per_seq > 1 && sp.rows <= 64) {
    step_params fs = step_io(c, sp, bf, sp.rows);
    fs.score = false;
    fs.attend_on = false;
    fs.rows_per_seq = sp.sel.rows_per_seq;
    const std::string fname = name + "_fusedsel";
    const bool cl = sparse_step_mode(fs) == step_sync::cluster;
    run_score(sp, var);
    const auto probe = sparse_step(fs, g_lc);  // e.g. 64 rows of 1M exceed the grid's buffers
    if (!probe.ok()) {
      std::fprintf(stderr, "note: %s skipped: %s\n", fname.c_str(), probe.message().c_str());
      return;
    }
    const stats s_fsel = time_gpu([&] { SK(sparse_step(fs, g_lc)); });
    report("sparse", fname + ".select", sh.name, c.B, c.N, s_fsel, 0,
           "rows=" + std::to_string(sp.rows) + (cl ? " cluster" : " grid"));
    auto fstep = [&] {
      run_score(sp, var);
      SK(sparse_step(fs, g_lc));
      SK(decode_attention(sp.attend, g_lc));
    };
    graph_runner gf;
    gf.capture(fstep);
    const stats s_fstep = time_gpu([&] { gf.run(); });
    report("sparse", fname + ".step", sh.name, c.B, c.N, s_fstep, 0,
           std::string(gf.exec ? "graph" : "eager(capture failed)") + (cl ? " cluster" : " grid"));
    std::vector<int32_t> cnt2(sp.rows);
    CK(cudaMemcpy(cnt2.data(), bf.sel_cnt, sp.rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
    if (cnt2 != cnt)
      std::fprintf(stderr, "warning: %s counts differ from the chain's\n", fname.c_str());
  }
}

// The fused step (one cooperative launch) on the shared fp8 sketch with one query sketch:
// the same work as step_sketch_fp8_shared_raw1. Also times its selection-only mode on the
// scores that step wrote (".select": selection alone, one row per sequence).
void bench_fused_step(const cache& c, const shape& sh, buffers& bf) {
  const std::string name = "step_sketch_fused_fp8_shared_raw1";
  if (!selected(name)) return;
  const sparse_variant var = resolve(k_variants[5], sh);
  step_plan sp = make_plan(c, sh, var, bf, bf.q, 1);
  step_params st = step_io(c, sp, bf, c.B);
  st.sk = sp.sk.sk;
  st.q = bf.qsk;
  st.n_sq = 1;
  st.scale = sp.sk.scale;
  st.attend = sp.attend;
  {  // attention split count: the decode default against fewer, longer splits
    const int def = st.attend.n_splits;
    int best_s = def;
    double best_t = 1e30;
    for (int s : {def, std::max(1, def / 2), std::max(1, def / 4), std::min(256, def * 2)}) {
      step_params t = st;
      t.attend.n_splits = s;
      const stats r = time_gpu([&] { SK(sparse_step(t, g_lc)); });
      report("sparse", name + ".splits" + std::to_string(s), sh.name, c.B, c.N, r, 0,
             "attention splits sweep");
      if (r.med < best_t) {
        best_t = r.med;
        best_s = s;
      }
      if (g_quick) break;
    }
    st.attend.n_splits = best_s;
  }
  const stats s_eager = time_gpu([&] { SK(sparse_step(st, g_lc)); });
  report("sparse", name + ".step_eager", sh.name, c.B, c.N, s_eager, 0, "one launch");
  // where the time goes: CTA 0's %globaltimer stamps, median over cold-L2 runs
  auto phases = [&](step_params sp_t, const std::string& prefix, int n_ph) {
    uint64_t* d_ns = dalloc<uint64_t>(8);
    sp_t.phase_ns = d_ns;
    const char* names[7] = {"p0_hist", "p1_level1",  "p2_level2", "p3_counts",
                            "p4_emit", "p5_barrier", "p5_attend"};
    std::vector<std::vector<double>> d(n_ph);
    for (int it = 0; it < g_iters; ++it) {
      CK(launch_l2_flush_read(g_flush, k_flush_bytes, g_sink, g_stream));
      CK(cudaMemsetAsync(d_ns, 0, 64, g_stream));
      SK(sparse_step(sp_t, g_lc));
      uint64_t h[8];
      CK(cudaMemcpyAsync(h, d_ns, 64, cudaMemcpyDeviceToHost, g_stream));
      CK(cudaStreamSynchronize(g_stream));
      for (int i = 0; i < n_ph; ++i) d[i].push_back((h[i + 1] - h[i]) * 1e-3);
    }
    for (int i = 0; i < n_ph; ++i) {
      std::sort(d[i].begin(), d[i].end());
      const stats ph{d[i][d[i].size() / 2], d[i][d[i].size() / 10], d[i][(d[i].size() * 9) / 10]};
      report("phase", prefix + "." + names[i], sh.name, c.B, c.N, ph, 0, "CTA 0 globaltimer");
    }
    cudaFree(d_ns);
  };
  // selection alone needs every score in global memory: the step keeps them in shared memory,
  // so the separate scorer writes them once
  sketch_score_params p = sp.sk;
  p.mode = sketch_mode::raw;
  SK(sketch_score(p, g_lc));
  // The same step with the CTAs meeting in one cluster per sequence (the automatic choice where
  // the rows fit) and over the whole grid, side by side: the step in a graph, score + select,
  // selection alone (one launch, and per layer in a 16-layer graph) and its phases.
  for (step_sync sync : {step_sync::automatic, step_sync::grid, step_sync::cluster}) {
    const std::string nm = sync == step_sync::automatic ? name
                           : sync == step_sync::grid    ? name + "_grid"
                                                        : name + "_cluster";
    step_params sv = st;
    sv.sync = sync;
    if (sync == step_sync::cluster) {  // only where the automatic choice is the grid
      step_params probe = sv;
      probe.sync = step_sync::automatic;
      if (sparse_step_mode(probe) == step_sync::cluster) continue;
      probe.sync = step_sync::cluster;
      probe.attend_on = false;
      if (!sparse_step(probe, g_lc).ok()) continue;  // the rows do not fit a cluster
    }
    graph_runner gr;
    gr.capture([&] { SK(sparse_step(sv, g_lc)); });
    const stats s_graph = time_gpu([&] { gr.run(); });
    report("sparse", nm + ".step", sh.name, c.B, c.N, s_graph, 0,
           std::string(gr.exec ? "graph" : "eager(capture failed)") +
               " splits=" + std::to_string(sv.attend.n_splits));
    std::vector<int32_t> cnt(c.B);
    CK(cudaMemcpy(cnt.data(), bf.sel_cnt, c.B * sizeof(int32_t), cudaMemcpyDeviceToHost));
    if (cnt[0] != std::min(k_budget, c.N - k_sink - k_window - 1))
      std::fprintf(stderr, "warning: %s selected %d tokens in row 0\n", nm.c_str(), cnt[0]);
    step_params ss = sv;
    ss.attend_on = false;
    const stats s_ss = time_gpu([&] { SK(sparse_step(ss, g_lc)); });
    report("sparse", nm + ".score", sh.name, c.B, c.N, s_ss, 0, "score+select, no attention");
    ss.score = false;
    const stats s_sel = time_gpu([&] { SK(sparse_step(ss, g_lc)); });
    report("sparse", nm + ".select", sh.name, c.B, c.N, s_sel, 0,
           "rows=" + std::to_string(c.B) + " fused selection only");
    phases(ss, nm + ".select", 5);
    {  // per layer in a decode pipeline: 16 layers' selections back to back in one graph, each
       // over its own score buffer (cold L2 before the first): the launch latency that one
       // isolated launch pays is then paid once per graph, as in a captured decode step
      constexpr int L = 16;
      const size_t n = static_cast<size_t>(c.B) * ss.score_stride;
      std::vector<float*> bufs(L);
      for (auto& b : bufs) {
        b = dalloc<float>(n);
        CK(cudaMemcpy(b, ss.scores, n * sizeof(float), cudaMemcpyDeviceToDevice));
      }
      graph_runner gl;
      gl.capture([&] {
        for (int l = 0; l < L; ++l) {
          step_params sl = ss;
          sl.scores = bufs[l];
          SK(sparse_step(sl, g_lc));
        }
      });
      const stats s_l = time_gpu([&] { gl.run(); });
      report("sparse", nm + ".select_per_layer", sh.name, c.B, c.N,
             stats{s_l.med / L, s_l.p10 / L, s_l.p90 / L}, 0,
             "rows=" + std::to_string(c.B) + " 16 layers in one graph, time / 16" +
                 (gl.exec ? "" : " (eager: capture failed)"));
      for (auto* b : bufs) cudaFree(b);
    }
  }
  {  // the attention inside the persistent (grid) kernel (P5) instead of chained behind it,
     // and its phases with P5 stamped
    step_params in = st;
    in.attend_chained = false;
    graph_runner gi;
    gi.capture([&] { SK(sparse_step(in, g_lc)); });
    const stats s_in = time_gpu([&] { gi.run(); });
    report("sparse", name + ".step_inkernel", sh.name, c.B, c.N, s_in, 0,
           std::string(gi.exec ? "graph" : "eager(capture failed)") +
               " attention in the step kernel (P5)");
    phases(in, name + "_grid", 7);
  }
}

// Synthetic soft-vote-like score rows: sum over 4 heads of softmax(sd * z + spikes).
std::vector<float> softvote_rows(int rows, int n, float sd, std::mt19937& rng) {
  std::vector<float> out(static_cast<size_t>(rows) * n);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<double> l(n), acc(n);
  for (int r = 0; r < rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int h = 0; h < 4; ++h) {
      double mx = -1e300, z = 0;
      for (int i = 0; i < n; ++i) {
        double x = sd * nd(rng);
        if (i < 4) x += 3 * sd;              // sinks
        if (u(rng) < 0.001f) x += 2.5 * sd;  // scattered relevant tokens
        l[i] = x;
        mx = std::max(mx, x);
      }
      for (int i = 0; i < n; ++i) z += (l[i] = std::exp(l[i] - mx));
      for (int i = 0; i < n; ++i) acc[i] += l[i] / z;
    }
    for (int i = 0; i < n; ++i) out[static_cast<size_t>(r) * n + i] = static_cast<float>(acc[i]);
  }
  return out;
}

void bench_select_alone(buffers& bf, std::mt19937& rng, int max_n) {
  if (!selected("select")) return;
  const int Ns[] = {131072, 1048576};
  for (int N : Ns) {
    if (N > max_n) continue;
    const int64_t stride = score_row_stride(N);
    const int base_rows = 8;
    struct data_kind {
      const char* name;
      std::vector<float> rows;
    };
    std::vector<data_kind> kinds;
    kinds.push_back({"softvote_sd2.5", softvote_rows(base_rows, N, 2.5f, rng)});
    kinds.push_back({"softvote_sd1", softvote_rows(base_rows, N, 1.0f, rng)});
    {
      std::vector<float> u(static_cast<size_t>(base_rows) * N);
      std::uniform_real_distribution<float> ud(0.f, 1.f);
      for (auto& x : u) x = ud(rng);
      kinds.push_back({"uniform", std::move(u)});
    }
    {  // attention rows captured from SmolLM2 (sieve calibrate --dump-rows), tiled to N
      static const std::vector<test::real_row> real =
          test::load_real_rows(test::k_real_rows_fixture);
      if (real.empty()) {
        std::fprintf(stderr, "note: %s not found: real-row selection skipped\n",
                     test::k_real_rows_fixture);
      } else {
        std::vector<float> r(static_cast<size_t>(base_rows) * N);
        for (int b = 0; b < base_rows; ++b) {
          const std::vector<float> row = test::tile_real_row(real, b, N, 101 * b);
          std::copy(row.begin(), row.end(), r.begin() + static_cast<size_t>(b) * N);
        }
        kinds.push_back({"real_smollm2", std::move(r)});
      }
    }
    std::vector<int32_t> lens(64, N);
    int32_t* d_len = dupload(lens);
    for (auto& kd : kinds) {
      for (int B : {1, 8}) {
        const int rows = B * 8;
        for (int r = 0; r < rows; ++r)
          CK(cudaMemcpy(bf.scores + r * stride,
                        kd.rows.data() + static_cast<size_t>(r % base_rows) * N,
                        static_cast<size_t>(N) * 4, cudaMemcpyHostToDevice));
        struct budget_kind {
          const char* name;
          select_budget bu;
          int out_stride;
        };
        std::vector<budget_kind> budgets;
        budgets.push_back({"topk2048", step_budget(1), k_budget});
        for (float pp : {0.9f, 0.99f}) {
          select_budget b = step_budget(1);
          b.k_max = 131072;
          b.k_min = 128;
          b.top_p = pp;
          budgets.push_back({pp < 0.95f ? "topp0.9" : "topp0.99", b, 131072});
        }
        for (auto& bk : budgets) {
          select_params p;
          p.scores = bf.scores;
          p.score_stride = stride;
          p.seq_len = d_len;
          p.rows_per_seq = 8;
          p.n_rows = rows;
          p.budget = bk.bu;
          p.ws.base = bf.sel_ws;
          p.ws.n_rows = rows;
          p.ws.max_tiles = select_max_tiles(N);
          p.out_idx = bf.sel_idx;
          p.out_stride = bk.out_stride;
          p.out_count = bf.sel_cnt;
          const stats s_full = time_gpu([&] { SK(select(p, false, g_lc)); });
          std::vector<int32_t> cnt(rows);
          CK(cudaMemcpy(cnt.data(), bf.sel_cnt, rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
          const double mean_cnt = std::accumulate(cnt.begin(), cnt.end(), 0.0) / rows;
          char note[128];
          std::snprintf(note, sizeof note, "%s mean_selected=%.0f rows=%d", kd.name, mean_cnt,
                        rows);
          const double bytes = static_cast<double>(rows) * N * 4;
          report("select", std::string("select_") + bk.name + "_" + kd.name + ".full", "any", B, N,
                 s_full, bytes, note);
          // chain alone (histogram done, as when fused into the scorer)
          const size_t hdr = static_cast<size_t>(rows) * select_ws_header_bytes();
          CK(cudaMemcpyAsync(bf.hdr_backup, bf.sel_ws, hdr, cudaMemcpyDeviceToDevice, g_stream));
          // rebuild a pristine level-0 histogram: run full once, then keep only level 0
          // (the chain adds levels 1..3 and candidates; zero them in the backup copy)
          {
            std::vector<uint8_t> h(hdr);
            CK(cudaMemcpy(h.data(), bf.sel_ws, hdr, cudaMemcpyDeviceToHost));
            const size_t hb = select_ws_header_bytes();
            for (int r = 0; r < rows; ++r) {
              uint8_t* row = h.data() + r * hb;
              // layout: cnt[4][256] u32, mass[4][256] f32, then counters
              std::memset(row + 1024, 0, 3 * 1024);
              std::memset(row + 4096 + 1024, 0, 3 * 1024);
              std::memset(row + 8192, 0, hb - 8192);
            }
            CK(cudaMemcpy(bf.hdr_backup, h.data(), hdr, cudaMemcpyHostToDevice));
          }
          const stats s_chain = time_gpu([&] { SK(select(p, true, g_lc)); },
                                         [&] {
                                           CK(cudaMemcpyAsync(bf.sel_ws, bf.hdr_backup, hdr,
                                                              cudaMemcpyDeviceToDevice, g_stream));
                                         });
          report("select", std::string("select_") + bk.name + "_" + kd.name + ".chain", "any", B, N,
                 s_chain, bytes, note);
          {  // the fused step's selection-only mode (top-p: the cluster path): rows = sequences
            step_params st;
            st.score = false;
            st.attend_on = false;
            st.scores = bf.scores;
            st.score_stride = stride;
            st.seq_len = d_len;
            st.batch = rows;
            st.max_len = N;
            st.budget = bk.bu;
            st.out_idx = bf.sel_idx;
            st.out_stride = bk.out_stride;
            st.out_count = bf.sel_cnt;
            st.ws = bf.step_ws;
            const auto probe = sparse_step(st, g_lc);
            if (!probe.ok()) {
              std::printf("select fused B=%d N=%d skipped: %s\n", B, N, probe.message().c_str());
              continue;
            }
            const stats s_fused = time_gpu([&] { SK(sparse_step(st, g_lc)); });
            report("select", std::string("select_") + bk.name + "_" + kd.name + ".fused", "any", B,
                   N, s_fused, bytes, note);
          }
        }
      }
    }
    cudaFree(d_len);
  }
}

void bench_prefill(const cache& c, const shape& sh, buffers& bf) {
  const int n_q = 512;
  const int G = sh.n_q / sh.n_kv;
  std::vector<int32_t> qo = {0, n_q};
  int32_t* d_qo = dupload(qo);
  prefill_params p;
  p.kv = c.view();
  p.q = bf.q;
  p.qo_indptr = d_qo;
  p.n_q_heads = sh.n_q;
  p.max_q = n_q;
  p.total_q = n_q;
  p.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
  p.o = bf.o;
  p.ws_o = bf.ws_o;
  p.ws_ml = bf.ws_ml;
  if (selected("prefill_dense")) {
    const int ctas = ((n_q * G + 63) / 64) * sh.n_kv;
    p.n_splits = std::clamp(2 * g_dev.n_sm / ctas + 1, 1, 8);
    const stats s = time_gpu([&] { SK(prefill_attention(p, g_lc)); }, {}, g_quick ? 3 : 5);
    const double flop = 4.0 * n_q * sh.n_q * static_cast<double>(c.N) * sh.D;
    char note[96];
    std::snprintf(note, sizeof note, "TFLOPs=%.0f splits=%d", flop / (s.med * 1e-6) / 1e12,
                  p.n_splits);
    report("prefill", "prefill_dense", sh.name, c.B, c.N, s, 0, note);
  }
  // sparse chunk: mean query -> score -> select -> attend (sinks + selection + window + chunk)
  for (const sparse_variant& v0 : {k_variants[0], k_variants[2], k_variants[4], k_variants[5]}) {
    const sparse_variant var = resolve(v0, sh);
    const std::string name = std::string("prefill_sparse_") + var.name;
    if (!selected(name)) continue;
    step_plan sp = make_plan(c, sh, var, bf, bf.q_mean, n_q);
    sketch_query_params qp;
    qp.q = bf.q;
    qp.type = dtype::bf16;
    qp.qo_indptr = d_qo;
    qp.batch = 1;
    qp.n_q_heads = sh.n_q;
    qp.n_kv_heads = sh.n_kv;
    qp.head_dim = sh.D;
    qp.n_sk_heads = var.exact ? sh.n_kv : var.n_sk;
    qp.sk_dim = 16;
    qp.proj = var.exact ? nullptr : bf.proj;
    qp.q_out = var.exact ? nullptr : bf.qsk;
    qp.q_mean = bf.q_mean;
    // raw1 reads one query sketch per row (the first of the projected heads): a stand-in
    // of the same cost as a head-summed query, which is what a policy would pass.
    prefill_params ps = p;
    ps.n_splits = 1;
    ps.set.sel_idx = bf.sel_idx;
    ps.set.sel_count = bf.sel_cnt;
    ps.set.sel_stride = k_budget;
    ps.set.sel_heads = sp.sel.rows_per_seq;
    ps.set.n_sink = k_sink;
    ps.set.n_window = k_window;
    auto step = [&] {
      SK(sketch_query(qp, g_lc));
      run_score(sp, var);
      SK(select(sp.sel, true, g_lc));
      SK(prefill_attention(ps, g_lc));
    };
    graph_runner gr;
    step();
    gr.capture(step);
    const stats s = time_gpu([&] { gr.run(); });
    const stats sa = time_gpu([&] { SK(prefill_attention(ps, g_lc)); });
    report("prefill", name + ".step", sh.name, c.B, c.N, s, 0, gr.exec ? "graph" : "eager");
    report("prefill", name + ".attend", sh.name, c.B, c.N, sa, 0, "");
  }
  cudaFree(d_qo);
}

void bench_append(const shape& sh, buffers& bf, std::mt19937& rng) {
  if (!selected("append")) return;
  for (int n_new : {8, 512}) {
    std::vector<int64_t> slots(n_new);
    std::uniform_int_distribution<int64_t> ud(0, 1 << 20);
    for (auto& s : slots) s = ud(rng);
    int64_t* d_slot = dupload(slots);
    kv_append_params p;
    p.k = bf.k;
    p.v = bf.v;
    p.k_new = bf.q;
    p.v_new = bf.q;
    p.slot = d_slot;
    p.n_new = n_new;
    p.n_kv_heads = sh.n_kv;
    p.head_dim = sh.D;
    p.page_size = 16;
    p.type = dtype::bf16;
    p.sk_keys = bf.sk_shared;
    p.sk_type = dtype::fp8_e4m3;
    p.sk_scale = 1.f;
    p.n_sk_heads = 1;
    p.sk_dim = 16;
    p.proj = bf.proj;
    const stats s = time_gpu([&] { SK(kv_append(p, g_lc)); });
    report("append", "kv_append_shared_fp8_sketch", sh.name, 1, n_new, s, 0,
           "tokens=" + std::to_string(n_new));
    cudaFree(d_slot);
  }
}

// Cost of a grid barrier: cooperative launches crossing 0, 1 and 10 barriers.
void bench_barrier(buffers& bf) {
  if (!selected("barrier")) return;
  for (int per_sm : {1, 2}) {
    for (int n : {0, 1, 10}) {
      const stats s = time_gpu([&] { CK(launch_barrier_probe(bf.step_ws, n, per_sm, g_stream)); });
      report("barrier", "grid_barrier_x" + std::to_string(n), "any", per_sm, n, s, 0,
             std::to_string(per_sm) + " CTAs/SM of 128 threads");
    }
  }
}

void bench_copy() {
  if (!selected("copy")) return;
  const size_t bytes = size_t(2) << 30;
  void* a = dalloc<uint8_t>(bytes);
  void* b = dalloc<uint8_t>(bytes);
  CK(cudaMemset(a, 1, bytes));
  const stats s =
      time_gpu([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_stream)); });
  report("copy", "d2d_copy_2GiB", "any", 1, 0, s, 2.0 * bytes, "read+write");
  cudaFree(a);
  cudaFree(b);
}

}  // namespace

int main(int argc, char** argv) {
  const char* out = "bench_cuda.csv";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (a == "--filter" && i + 1 < argc)
      g_filter = argv[++i];
    else if (a == "--iters" && i + 1 < argc)
      g_iters = std::atoi(argv[++i]);
    else if (a == "--quick")
      g_quick = true;
    else if (a == "--only-n" && i + 1 < argc)
      g_only_n = std::atoi(argv[++i]);
    else if (a == "--only-b" && i + 1 < argc)
      g_only_b = std::atoi(argv[++i]);
    else {
      std::fprintf(
          stderr,
          "usage: bench_cuda [--out FILE] [--filter SUBSTR] [--iters N] [--quick] [--only-n N] "
          "[--only-b B]\n");
      return 1;
    }
  }
  auto dev = current_device();
  if (!dev) {
    std::fprintf(stderr, "bench_cuda: %s\n", dev.message().c_str());
    return 1;
  }
  g_dev = *dev;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  g_csv = std::fopen(out, "w");
  if (!g_csv) return 1;
  std::fprintf(g_csv, "# device=%s sm=%d l2=%lld\n", prop.name, g_dev.n_sm,
               static_cast<long long>(g_dev.l2_bytes));
  std::fprintf(g_csv, "group,name,model,B,N,median_us,p10_us,p90_us,bytes,GBps,note\n");
  std::printf("device %s, %d SMs, L2 %lld B\n", prop.name, g_dev.n_sm,
              static_cast<long long>(g_dev.l2_bytes));
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  g_lc.stream = g_stream;
  g_lc.pdl = std::getenv("SIEVE_NO_PDL") == nullptr;
  g_flush = dalloc<uint8_t>(k_flush_bytes);
  g_sink = dalloc<uint32_t>(1024);
  CK(cudaMemset(g_flush, 0x5a, k_flush_bytes));
  std::mt19937 rng(1234);

  bench_copy();

  // buffers for the largest case: 8 sequences x 1M tokens of the Llama shape
  const int max_b = 8, max_n = g_quick ? 131072 : 1048576;
  buffers bf;
  bf.max_tokens = static_cast<int64_t>(max_b) * max_n;
  const int64_t kv_elems = bf.max_tokens * 8 * 128 + 16 * 8 * 128;
  bf.k = dalloc<uint16_t>(kv_elems);
  bf.v = dalloc<uint16_t>(kv_elems);
  CK(launch_fill_random(bf.k, kv_elems, dtype::bf16, 1, 1.f, 0.f, g_stream));
  CK(launch_fill_random(bf.v, kv_elems, dtype::bf16, 2, 1.f, 0.f, g_stream));
  const int64_t sk_elems = bf.max_tokens * 8 * 16 + 16 * 8 * 16;
  bf.sk_bf16 = dalloc<uint16_t>(sk_elems);
  bf.sk_fp8 = dalloc<uint8_t>(sk_elems);
  bf.sk_int8 = dalloc<uint8_t>(sk_elems);
  bf.sk_shared = dalloc<uint8_t>(bf.max_tokens * 16 + 16 * 16);
  CK(launch_fill_random(bf.sk_bf16, sk_elems, dtype::bf16, 3, 1.f, 0.f, g_stream));
  CK(launch_fill_random(bf.sk_fp8, sk_elems, dtype::fp8_e4m3, 4, 1.f, 0.f, g_stream));
  CK(launch_fill_random(bf.sk_int8, sk_elems, dtype::int8, 5, 20.f, 0.f, g_stream));
  CK(launch_fill_random(bf.sk_shared, bf.max_tokens * 16 + 256, dtype::fp8_e4m3, 6, 1.f, 0.f,
                        g_stream));
  const int64_t stride = score_row_stride(max_n);
  bf.logits = dalloc<float>(static_cast<size_t>(64) * 4 * stride);
  bf.scores = dalloc<float>(static_cast<size_t>(64) * stride);
  bf.stats = dalloc<float>(static_cast<size_t>(64) * 8192 * 32 * 2 / 8);
  bf.qsk = dalloc<float>(static_cast<size_t>(8) * 32 * 32);
  CK(launch_fill_random(bf.qsk, 8 * 32 * 32, dtype::f32, 7, 1.f, 0.f, g_stream));
  bf.ws_o =
      dalloc<float>(static_cast<size_t>(32) << 20);  // >= splits x rows x head_dim of any case
  bf.ws_ml = dalloc<float>(static_cast<size_t>(1) << 20);
  bf.ws_cnt = dalloc<uint32_t>(512);
  CK(cudaMemset(bf.ws_cnt, 0, 512 * 4));
  bf.sel_ws = dalloc<uint8_t>(select_ws_bytes(64, max_n));
  bf.hdr_backup = dalloc<uint8_t>(64 * select_ws_header_bytes());
  bf.sel_idx = dalloc<int32_t>(static_cast<size_t>(64) * 131072);
  bf.sel_cnt = dalloc<int32_t>(64);
  bf.step_ws = dalloc<uint32_t>(step_ws_bytes(64) / 4);
  CK(cudaMemset(bf.step_ws, 0, step_ws_bytes(64)));
  bf.q = dalloc<uint16_t>(static_cast<size_t>(512) * 32 * 256);
  bf.o = dalloc<uint16_t>(static_cast<size_t>(512) * 32 * 256);
  bf.q_mean = dalloc<uint16_t>(static_cast<size_t>(8) * 32 * 256);
  CK(launch_fill_random(bf.q, 512 * 32 * 256, dtype::bf16, 8, 1.f, 0.f, g_stream));
  CK(launch_fill_random(bf.q_mean, 8 * 32 * 256, dtype::bf16, 9, 1.f, 0.f, g_stream));
  bf.proj = dalloc<float>(static_cast<size_t>(8) * 128 * 16 * 8);
  CK(launch_fill_random(bf.proj, 8 * 128 * 16 * 8, dtype::f32, 10, 0.03f, 0.f, g_stream));
  CK(cudaStreamSynchronize(g_stream));

  bench_barrier(bf);
  std::vector<int> Ns = {32768, 131072, 524288, 1048576};
  if (g_quick) Ns = {32768, 131072};
  if (g_only_n) Ns = {g_only_n};  // any length, not only the table's
  for (const shape& sh : {k_llama, k_smol, k_gemma}) {
    for (int N : Ns) {
      for (int B : {1, 8}) {
        if ((g_only_n && N != g_only_n) || (g_only_b && B != g_only_b)) continue;
        cache c;
        c.build(B, N, sh, bf.k, bf.v, rng);
        bench_dense_decode(c, sh, bf);
        const bool main_shape = sh.n_q == k_llama.n_q;
        for (const auto& var : k_variants) {
          if (!main_shape && !(var.exact || std::strcmp(var.name, "sketch_fp8_kvhead_vote") == 0))
            continue;
          if (!main_shape && N == 524288) continue;
          bench_sparse_decode(c, sh, bf, var);
        }
        if (main_shape) bench_fused_step(c, sh, bf);
        c.free_all();
      }
    }
  }
  // prefill chunk of 512 queries, Llama shape, batch 1
  for (int N : Ns) {
    if (N == 524288) continue;
    cache c;
    c.build(1, N, k_llama, bf.k, bf.v, rng);
    bench_prefill(c, k_llama, bf);
    c.free_all();
  }
  bench_append(k_llama, bf, rng);
  bench_select_alone(bf, rng, max_n);
  std::fclose(g_csv);
  std::printf("done\n");
  return 0;
}
