// bench_cuda's selection-alone timings: top-k and top-p over synthetic and real (captured
// SmolLM2) score rows, through the select chain and the fused step's selection-only launch.
#include "backend/cuda/tests/real_rows.h"
#include "bench/cuda/bench_common.h"

namespace sieve::cuda::bench {
namespace {
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

}  // namespace

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
            if (B == 1 && bk.bu.top_p >= 1.f) {  // per layer, as the one-row step reports it
              std::string how;
              const stats s_l = selection_per_layer(st, static_cast<size_t>(rows) * stride, how);
              report("select",
                     std::string("select_") + bk.name + "_" + kd.name + ".fused_per_layer", "any",
                     B, N, s_l, 0, std::string(note) + how);
            }
          }
        }
      }
    }
    cudaFree(d_len);
  }
}

}  // namespace sieve::cuda::bench
