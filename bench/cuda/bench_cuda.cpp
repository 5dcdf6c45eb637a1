// bench_cuda: times the CUDA sparse-attention kernels on model attention shapes, one layer,
// cold L2 (a 256 MB read before every timed run), CUDA events, median of N runs.
// Writes CSV rows (group,name,model,B,N,median_us,p10_us,p90_us,bytes,GBps,note) to --out;
// bench/cuda/report.py joins them with the PyTorch SDPA baseline of the same run.
//
//   bench_cuda --out ours.csv [--quick] [--filter SUBSTR] [--iters N]
#include <chrono>

#include "backend/cuda/cudnn_attention.h"
#include "bench/cuda/bench_common.h"

using namespace sieve::cuda;
using namespace sieve::cuda::bench;

namespace {

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

// Where a decode attention launch spends its time: every CTA's %globaltimer stamps
// (decode_params::phase_ns) over cold-L2 runs. Rows (median over runs): the spread of the
// CTAs' starts, then per phase the median over CTAs of its duration, and the time from the
// first CTA's start to the last output.
void attend_phases(decode_params a, const shape& sh, int B, int N, const std::string& name) {
  const int n_cta = B * sh.n_kv * a.n_splits;
  uint64_t* d_ns = dalloc<uint64_t>(static_cast<size_t>(n_cta) * decode_n_stamps);
  a.phase_ns = d_ns;
  const char* names[decode_n_stamps] = {"entry_spread", "ready",   "issued",  "first_tile",
                                        "tiles",        "partial", "counted", "merged"};
  std::vector<std::vector<double>> d(decode_n_stamps + 1);
  std::vector<uint64_t> h(static_cast<size_t>(n_cta) * decode_n_stamps);
  for (int it = 0; it < g_iters; ++it) {
    CK(launch_l2_flush_read(g_flush, k_flush_bytes, g_sink, g_stream));
    CK(cudaMemsetAsync(d_ns, 0, h.size() * 8, g_stream));
    SK(decode_attention(a, g_lc));
    CK(cudaMemcpyAsync(h.data(), d_ns, h.size() * 8, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    uint64_t t0 = ~0ull, t_last_entry = 0, t_end = 0;
    std::vector<std::vector<double>> per(decode_n_stamps);
    for (int c = 0; c < n_cta; ++c) {
      const uint64_t* t = h.data() + static_cast<size_t>(c) * decode_n_stamps;
      t0 = std::min(t0, t[ds_entry]);
      t_last_entry = std::max(t_last_entry, t[ds_entry]);
      for (int i = ds_ready; i < decode_n_stamps; ++i) {
        int j = i - 1;  // the last stamp this CTA reached before i
        while (j > ds_entry && t[j] == 0) --j;
        if (t[i] != 0) {
          per[i].push_back((t[i] - t[j]) * 1e-3);
          t_end = std::max(t_end, t[i]);
        }
      }
    }
    d[ds_entry].push_back((t_last_entry - t0) * 1e-3);
    for (int i = ds_ready; i < decode_n_stamps; ++i) {
      auto& v = per[i];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      d[i].push_back(v[v.size() / 2]);
    }
    d[decode_n_stamps].push_back((t_end - t0) * 1e-3);
  }
  for (int i = 0; i <= decode_n_stamps; ++i) {
    auto& v = d[i];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const stats ph{v[v.size() / 2], v[v.size() / 10], v[(v.size() * 9) / 10]};
    report("phase", name + "." + (i < decode_n_stamps ? names[i] : "first_start_to_end"), sh.name,
           B, N, ph, 0, "median over CTAs; splits=" + std::to_string(a.n_splits));
  }
  cudaFree(d_ns);
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
  if (!var.exact && var.n_sk == 1 && var.mode == sketch_mode::raw)
    attend_phases(sp.attend, sh, c.B, c.N, name + ".attend");

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

// The fused step (one launch: cluster or grid) on the shared fp8 sketch with one query sketch:
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
    {  // per layer in a decode pipeline (selection_per_layer)
      std::string how;
      const stats s_l = selection_per_layer(ss, static_cast<size_t>(c.B) * ss.score_stride, how);
      report("sparse", nm + ".select_per_layer", sh.name, c.B, c.N, s_l, 0,
             "rows=" + std::to_string(c.B) + how);
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

// cuDNN's fused attention (the frontend's SDPA, cudnn_attention.h) on the same chunk: over the
// K/V as one contiguous run (the pages in order, as the GPU session holds them) and through the
// shuffled page table; the plan's build time goes in the note.
void bench_prefill_cudnn(const cache& c, const shape& sh, buffers& bf, int n_q) {
  std::vector<int32_t> lens(8, 0);
  lens[0] = n_q;
  lens[4] = c.N;
  int32_t* d_lens = dupload(lens);
  for (bool paged : {false, true}) {
    const std::string name = paged ? "prefill_cudnn_paged" : "prefill_cudnn";
    if (!selected(name)) continue;
    cudnn_prefill_shape cs;
    cs.n_q_heads = sh.n_q;
    cs.n_kv_heads = sh.n_kv;
    cs.head_dim = sh.D;
    cs.max_q = n_q;
    cs.max_kv = c.N;
    cs.page_size = c.ps;
    cs.n_pages = (c.N + c.ps - 1) / c.ps;
    cs.paged = paged;
    cs.scale = 1.f / std::sqrt(static_cast<float>(sh.D));
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = CudnnPrefill::create(cs, g_stream);
    const double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!plan) {
      std::printf("skip %s %s N=%d: %s\n", name.c_str(), sh.name, c.N, plan.message().c_str());
      continue;
    }
    cudnn_prefill_args a;
    a.q = bf.q;
    a.k = c.k;
    a.v = c.v;
    a.page_list = c.indices;
    a.seq_q = d_lens;
    a.seq_kv = d_lens + 4;
    a.o = bf.o;
    const stats s = time_gpu([&] { SK((*plan)->run(a)); }, {}, g_quick ? 3 : 5);
    const double flop = 4.0 * n_q * sh.n_q * static_cast<double>(c.N) * sh.D;
    char note[128];
    std::snprintf(note, sizeof note, "TFLOPs=%.0f plan_build_ms=%.0f ws_MiB=%lld",
                  flop / (s.med * 1e-6) / 1e12, build_ms,
                  static_cast<long long>((*plan)->workspace_bytes() >> 20));
    report("prefill", name, sh.name, c.B, c.N, s, 0, note);
  }
  cudaFree(d_lens);
}

void bench_prefill(const cache& c, const shape& sh, buffers& bf) {
  const int n_q = 512;
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
  // dense chunk: the launcher's CTA shape, then each shape forced (tile_rows)
  for (int rows : {0, 64, 128}) {
    const std::string name = rows ? "prefill_dense_rows" + std::to_string(rows) : "prefill_dense";
    if (!selected(name)) continue;
    p.tile_rows = rows;
    p.n_splits = prefill_splits(p, 8);
    const stats s = time_gpu([&] { SK(prefill_attention(p, g_lc)); }, {}, g_quick ? 3 : 5);
    const double flop = 4.0 * n_q * sh.n_q * static_cast<double>(c.N) * sh.D;
    char note[96];
    std::snprintf(note, sizeof note, "TFLOPs=%.0f splits=%d", flop / (s.med * 1e-6) / 1e12,
                  p.n_splits);
    report("prefill", name, sh.name, c.B, c.N, s, 0, note);
  }
  p.tile_rows = 0;
  bench_prefill_cudnn(c, sh, bf, n_q);
  // sparse chunk (the Llama shape only): mean query -> score -> select -> attend (sinks +
  // selection + window + chunk)
  for (const sparse_variant& v0 : {k_variants[0], k_variants[2], k_variants[4], k_variants[5]}) {
    const sparse_variant var = resolve(v0, sh);
    const std::string name = std::string("prefill_sparse_") + var.name;
    if (sh.n_q != k_llama.n_q || !selected(name)) continue;
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
    ps.n_splits = prefill_splits(ps, 8);  // as the model does: the list is short, the rows few
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
    else if (a == "--page-size" && i + 1 < argc)
      g_page_size = std::atoi(argv[++i]);
    else if (a == "--pages-in-order")
      g_shuffle_pages = false;
    else {
      std::fprintf(
          stderr,
          "usage: bench_cuda [--out FILE] [--filter SUBSTR] [--iters N] [--quick] [--only-n N] "
          "[--only-b B] [--page-size P] [--pages-in-order]\n");
      return 1;
    }
  }
  if (g_page_size < 1 || g_page_size > 1024 || (g_page_size & (g_page_size - 1)) != 0) {
    std::fprintf(stderr, "bench_cuda: --page-size must be a power of two in 1..1024, not %d\n",
                 g_page_size);
    return 1;
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
  // prefill chunk of 512 queries, batch 1: every shape dense, the Llama shape also sparse
  for (const shape& sh : {k_llama, k_smol, k_gemma}) {
    for (int N : Ns) {
      if (N == 524288 || (g_only_n && N != g_only_n)) continue;
      cache c;
      c.build(1, N, sh, bf.k, bf.v, rng);
      bench_prefill(c, sh, bf);
      c.free_all();
    }
  }
  bench_append(k_llama, bf, rng);
  bench_select_alone(bf, rng, max_n);
  std::fclose(g_csv);
  std::printf("done\n");
  return 0;
}
