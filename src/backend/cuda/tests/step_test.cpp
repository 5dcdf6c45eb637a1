// The fused sparse decode step (one cooperative launch) against the separate kernels it
// replaces (sketch_score raw -> select -> decode_attention, each tested against float64 CPU
// references elsewhere): same selection, same attention output; and its selection-only mode
// against a CPU top-k on tie-heavy scores, repeated launches over one workspace, and the
// argument checks.
#include "backend/cuda/tests/real_rows.h"
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

struct step_case {
  std::vector<int32_t> lens;
  int n_q, n_kv, D;
  dtype type;
  int n_sq;
  int k, sinks, window;
};

void run_fused_vs_chain(const step_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int ps = 16;
  paged_cache kv;
  kv.build(c.lens, ps, c.n_kv, c.D, c.type, rng);
  const int B = kv.batch, G = c.n_q / c.n_kv;
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  // shared fp8 sketch keys on the same page table: [n_pages, 1, ps, 16]
  std::vector<uint8_t> sk(static_cast<size_t>(kv.n_pages) * ps * 16);
  for (auto& b : sk) {
    do b = static_cast<uint8_t>(rng() & 0xff);
    while ((b & 0x7f) == 0x7f || ((b >> 3) & 15) > 9);
  }
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> qsk(static_cast<size_t>(B) * c.n_sq * 16);
  for (auto& x : qsk) x = nd(rng);
  std::vector<uint16_t> q = random_half(static_cast<size_t>(B) * c.n_q * c.D, c.type, rng, 2.f);
  dbuf<uint8_t> d_sk(sk);
  dbuf<float> d_qsk(qsk);
  dbuf<uint16_t> d_q(q);
  const int64_t stride = score_row_stride(max_len);
  const int n_splits = decode_splits(B * c.n_kv, c.k + c.sinks + c.window + 1, 132, c.D);

  select_budget bu;
  bu.k_max = c.k;
  bu.lo = c.sinks;
  bu.tail = c.window + 1;
  sketch_keys keys;
  keys.keys = d_sk.p;
  keys.type = dtype::fp8_e4m3;
  keys.key_scale = 0.5f;
  keys.n_sk_heads = 1;
  keys.dim = 16;
  keys.pages = kv.table();

  // ---- the separate kernels
  dbuf<float> scores_a(static_cast<size_t>(B) * stride);
  dbuf<uint8_t> sel_ws(select_ws_bytes(B, max_len));
  dbuf<int32_t> idx_a(static_cast<size_t>(B) * c.k), cnt_a(B);
  dbuf<float> ws_o(decode_ws_o_floats(B, c.n_kv, n_splits, G, c.D)),
      ws_ml(decode_ws_ml_floats(B, c.n_kv, n_splits, G));
  dbuf<uint32_t> ws_cnt(B * c.n_kv);
  ws_cnt.zero();
  dbuf<uint16_t> o_a(static_cast<size_t>(B) * c.n_q * c.D), o_b(o_a.n);
  select_params sp;
  sp.scores = scores_a.p;
  sp.score_stride = stride;
  sp.seq_len = kv.d_lens.p;
  sp.n_rows = B;
  sp.budget = bu;
  sp.ws.base = sel_ws.p;
  sp.ws.n_rows = B;
  sp.ws.max_tiles = select_max_tiles(max_len);
  sp.out_idx = idx_a.p;
  sp.out_stride = c.k;
  sp.out_count = cnt_a.p;
  sketch_score_params ss;
  ss.sk = keys;
  ss.q = d_qsk.p;
  ss.n_sq = c.n_sq;
  ss.scale = 0.25f;
  ss.mode = sketch_mode::raw;
  ss.chunk_tokens = 1024;
  ss.n_chunks = (max_len + 1023) / 1024;
  ss.scores = scores_a.p;
  ss.score_stride = stride;
  ss.hist.ws = sp.ws;
  ss.hist.seq_len = kv.d_lens.p;
  ss.hist.budget = bu;
  ss.zero_ws = sel_ws.p;
  ss.zero_bytes = select_ws_header_bytes();
  decode_params a;
  a.kv = kv.view();
  a.q = d_q.p;
  a.n_q_heads = c.n_q;
  a.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  a.o = o_a.p;
  a.n_splits = n_splits;
  a.ws_o = ws_o.p;
  a.ws_ml = ws_ml.p;
  a.ws_counter = ws_cnt.p;
  a.set.sel_idx = idx_a.p;
  a.set.sel_count = cnt_a.p;
  a.set.sel_stride = c.k;
  a.set.n_sink = c.sinks;
  a.set.n_window = c.window;
  STATUS_OK(sketch_score(ss, launch_cfg{}));
  STATUS_OK(select(sp, true, launch_cfg{}));
  STATUS_OK(decode_attention(a, launch_cfg{}));

  // ---- fused
  dbuf<float> scores_b(static_cast<size_t>(B) * stride);
  dbuf<uint32_t> ws(step_ws_bytes(B) / 4);
  ws.zero();
  dbuf<int32_t> idx_b(static_cast<size_t>(B) * c.k), cnt_b(B);
  step_params st;
  st.sk = keys;
  st.q = d_qsk.p;
  st.n_sq = c.n_sq;
  st.scale = 0.25f;
  st.scores = scores_b.p;
  st.score_stride = stride;
  st.seq_len = kv.d_lens.p;
  st.batch = B;
  st.max_len = max_len;
  st.budget = bu;
  st.out_idx = idx_b.p;
  st.out_stride = c.k;
  st.out_count = cnt_b.p;
  st.ws = ws.p;
  st.attend = a;
  st.attend.o = o_b.p;
  st.attend.set.sel_idx = idx_b.p;
  st.attend.set.sel_count = cnt_b.p;
  // the attention chained behind the step (PDL) after each way of meeting (cluster or grid),
  // then inside the cooperative launch (P5); every launch after the first reuses the
  // workspace as left
  const std::pair<step_sync, bool> runs[] = {
      {step_sync::automatic, true}, {step_sync::cluster, true}, {step_sync::grid, true},
      {step_sync::cluster, true},   {step_sync::grid, false},   {step_sync::automatic, false}};
  for (int rep = 0; rep < 6; ++rep) {
    st.sync = runs[rep].first;
    st.attend_chained = runs[rep].second;
    idx_b.poison();
    o_b.poison();
    STATUS_OK(sparse_step(st, launch_cfg{}));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int32_t> ca = cnt_a.get(), cb = cnt_b.get(), ia = idx_a.get(),
                               ib = idx_b.get();
    for (int b = 0; b < B; ++b) {
      const int want = std::max(0, std::min(c.k, c.lens[b] - c.sinks - c.window - 1));
      ASSERT_EQ(ca[b], want) << "chain count, seq " << b;
      ASSERT_EQ(cb[b], ca[b]) << "seq " << b << " rep " << rep;
      for (int i = 0; i < cb[b]; ++i)
        ASSERT_EQ(ib[static_cast<size_t>(b) * c.k + i], ia[static_cast<size_t>(b) * c.k + i])
            << "seq " << b << " entry " << i << " rep " << rep;
    }
    const std::vector<uint16_t> oa = o_a.get(), ob = o_b.get();
    std::vector<double> ga, gb;
    for (size_t i = 0; i < oa.size(); ++i) {
      ga.push_back(from_half_bits(oa[i], c.type));
      gb.push_back(from_half_bits(ob[i], c.type));
    }
    EXPECT_LT(rel_err(gb, ga), 2e-3) << "rep " << rep;
  }
  // the workspace is left ready: the barrier counter at a whole unit (2^20), histograms zero
  const std::vector<uint32_t> w = ws.get();
  EXPECT_EQ(w[0] & 0xfffffu, 0u);
  EXPECT_NE(w[0] | w[1], 0u);
  for (int bb = 0; bb < B; ++bb) {
    const size_t h0 = static_cast<size_t>(step_ws_hist_word(bb));
    for (size_t i = h0; i < h0 + 3 * (2048 + 128); ++i)
      ASSERT_EQ(w[i], 0u) << "seq " << bb << " histogram word " << i;
  }
}

TEST(CudaSparseStep, LlamaShapeOneQueryMatchesChain) {
  SIEVE_REQUIRE_GPU();
  run_fused_vs_chain({{40000, 9000}, 32, 8, 128, dtype::bf16, 1, 512, 64, 128}, 71);
}
TEST(CudaSparseStep, SmolShapeManyQueriesF16) {
  SIEVE_REQUIRE_GPU();
  run_fused_vs_chain({{12345, 700, 3000}, 9, 3, 64, dtype::f16, 9, 256, 32, 64}, 72);
}
TEST(CudaSparseStep, OneSequenceBenchBudget) {
  SIEVE_REQUIRE_GPU();
  // one sequence: every CTA reaches the same state and skips the levels left once resolved
  run_fused_vs_chain({{90000}, 32, 8, 128, dtype::bf16, 1, 2048, 128, 512}, 75);
}
TEST(CudaSparseStep, GemmaShapeShortSequence) {
  SIEVE_REQUIRE_GPU();
  // the second sequence has no selectable range (len < sinks + window + 1)
  run_fused_vs_chain({{6000, 150}, 4, 1, 256, dtype::bf16, 4, 1024, 128, 64}, 73);
}

// Score rows on the device for the selection-only tests: rows[b] padded to the row stride.
struct score_rows {
  int max_len;
  int64_t stride;
  std::vector<float> host;  // [rows, stride]
  dbuf<float> dev;
  dbuf<int32_t> lens;  // per sequence
  score_rows(const std::vector<int32_t>& seq_lens, const std::vector<std::vector<float>>& rows)
      : max_len(*std::max_element(seq_lens.begin(), seq_lens.end())),
        stride(score_row_stride(max_len)),
        host(pad(rows, stride)),
        dev(host),
        lens(seq_lens) {}
  static std::vector<float> pad(const std::vector<std::vector<float>>& rows, int64_t stride) {
    std::vector<float> h(rows.size() * static_cast<size_t>(stride), 0.f);
    for (size_t b = 0; b < rows.size(); ++b)
      std::copy(rows[b].begin(), rows[b].end(), h.begin() + b * static_cast<size_t>(stride));
    return h;
  }
};

// The step's selection-only parameters over those rows (r per sequence).
step_params selection_only(const score_rows& sr, int n_rows, int r, const select_budget& bu,
                           int32_t* idx, int out_stride, int32_t* cnt, uint32_t* ws) {
  step_params st;
  st.score = false;
  st.attend_on = false;
  st.scores = sr.dev.p;
  st.score_stride = sr.stride;
  st.seq_len = sr.lens.p;
  st.batch = n_rows;
  st.rows_per_seq = r;
  st.max_len = sr.max_len;
  st.budget = bu;
  st.out_idx = idx;
  st.out_stride = out_stride;
  st.out_count = cnt;
  st.ws = ws;
  return st;
}

// Selection only over given score rows, r per sequence (row b holds lens[b / r] scores),
// checked against a sort-based top-k; every k runs twice on the given workspace (launches
// that skip level barriers, as a single sequence does once resolved, must leave it ready too).
void check_selection_only(const std::vector<int32_t>& seq_lens,
                          const std::vector<std::vector<float>>& rows, dbuf<uint32_t>& ws,
                          step_sync sync, int r = 1) {
  const int B = static_cast<int>(rows.size());
  std::vector<int32_t> lens(B);
  for (int b = 0; b < B; ++b) lens[b] = seq_lens[b / r];
  const score_rows sr(seq_lens, rows);
  const std::vector<float>& sc = sr.host;
  const int64_t stride = sr.stride;
  for (int k : {2048, 1, 0, 6000}) {
    select_budget bu;
    bu.k_max = k;
    bu.lo = 16;
    bu.tail = 33;
    const int out_stride = std::max(k, 1);
    dbuf<int32_t> idx(static_cast<size_t>(B) * out_stride), cnt(B);
    step_params st = selection_only(sr, B, r, bu, idx.p, out_stride, cnt.p, ws.p);
    st.sync = sync;
    for (int rep = 0; rep < 2; ++rep) {
      idx.poison();
      STATUS_OK(sparse_step(st, launch_cfg{}));
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<int32_t> o = idx.get(), c = cnt.get();
      for (int b = 0; b < B; ++b) {
        const int lo = std::min(bu.lo, lens[b]), hi = std::max(lens[b] - bu.tail, lo);
        const std::vector<int> want =
            ref_topk(sc.data() + static_cast<size_t>(b) * stride, lo, hi, k);
        ASSERT_EQ(c[b], static_cast<int>(want.size())) << "k " << k << " seq " << b << " of " << B;
        std::vector<int> got(o.begin() + static_cast<size_t>(b) * out_stride,
                             o.begin() + static_cast<size_t>(b) * out_stride + c[b]);
        ASSERT_EQ(got, want) << "k " << k << " seq " << b << " of " << B << " rep " << rep
                             << " sync " << static_cast<int>(sync);
      }
    }
  }
  const std::vector<uint32_t> w = ws.get();
  EXPECT_EQ(w[0] & 0xfffffu, 0u) << "barrier counter at a whole unit";
}

// Selection only, over given scores with heavy ties: top-k with ties to the lowest positions;
// the batch, then each sequence alone.
TEST(CudaSparseStep, SelectionOnlyTiesAndEdges) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(74);
  const std::vector<int32_t> lens = {300000, 5000, 40, 70000};
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::vector<float>> rows(lens.size());
  for (size_t b = 0; b < lens.size(); ++b)
    for (int t = 0; t < lens[b]; ++t) {
      float v = nd(rng);
      if (b == 1) v = std::round(v * 4.f) / 4.f;  // a handful of distinct values
      if (b == 3) v = std::round(v * 64.f) / 64.f;
      rows[b].push_back(v);
    }
  // one workspace for every batch size (its layout does not depend on the batch)
  dbuf<uint32_t> ws(step_ws_bytes(static_cast<int32_t>(lens.size())) / 4);
  ws.zero();
  for (step_sync sync : {step_sync::grid, step_sync::cluster}) {
    check_selection_only(lens, rows, ws, sync);
    for (size_t b = 0; b < lens.size(); ++b) check_selection_only({lens[b]}, {rows[b]}, ws, sync);
    check_selection_only(lens, rows, ws, sync);
  }
}

// Selection only over real score distributions: SmolLM2 attention rows (tiled), one per KV
// head of three sequences, in both ways of meeting.
TEST(CudaSparseStep, SelectionOnlyRealAttentionRows) {
  SIEVE_REQUIRE_GPU();
  const std::vector<real_row> real = load_real_rows(k_real_rows_fixture);
  ASSERT_FALSE(real.empty()) << "missing or malformed fixture " << k_real_rows_fixture;
  const std::vector<int32_t> seq_lens = {131072, 40000, 3000};
  const int r = 3;
  std::vector<std::vector<float>> rows(seq_lens.size() * r);
  for (size_t b = 0; b < rows.size(); ++b)
    rows[b] = tile_real_row(real, b, seq_lens[b / r], 37 * b);
  dbuf<uint32_t> ws(step_ws_bytes(static_cast<int32_t>(rows.size())) / 4);
  ws.zero();
  for (step_sync sync : {step_sync::grid, step_sync::cluster})
    check_selection_only(seq_lens, rows, ws, sync, r);
}

// Top-p selection alone (the cluster path) against a sort-based reference: the smallest set in
// (score desc, position asc) order whose mass reaches top_p of the row's, within [k_min, k_max].
// Float mass sums may move the boundary among near-equal masses (as for select()).
void check_topp(const std::vector<int32_t>& seq_lens, const std::vector<std::vector<float>>& rows,
                int r, const select_budget& bu) {
  const int B = static_cast<int>(rows.size());
  const score_rows sr(seq_lens, rows);
  const std::vector<float>& sc = sr.host;
  const int64_t stride = sr.stride;
  dbuf<int32_t> idx(static_cast<size_t>(B) * bu.k_max), cnt(B);
  dbuf<uint32_t> ws(step_ws_bytes(B) / 4);
  ws.zero();
  const step_params st = selection_only(sr, B, r, bu, idx.p, bu.k_max, cnt.p, ws.p);
  ASSERT_EQ(sparse_step_mode(st), step_sync::cluster);
  for (int rep = 0; rep < 2; ++rep) {
    idx.poison();
    STATUS_OK(sparse_step(st, launch_cfg{}));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int32_t> o = idx.get(), c = cnt.get();
    for (int b = 0; b < B; ++b) {
      const int len = seq_lens[b / r];
      const int lo = std::min(bu.lo, len), hi = std::max(len - bu.tail, lo);
      const float* s = sc.data() + static_cast<size_t>(b) * stride;
      std::vector<int> order;
      for (int t = lo; t < hi; ++t) order.push_back(t);
      std::stable_sort(order.begin(), order.end(),
                       [&](int x, int y) { return float_key_host(s[x]) > float_key_host(s[y]); });
      double total = 0, cum = 0;
      for (int t : order) total += s[t];
      const int n = static_cast<int>(order.size());
      int rp = n;
      for (int i = 0; i < n; ++i)
        if ((cum += s[order[i]]) >= bu.top_p * total) {
          rp = i + 1;
          break;
        }
      const int k_max = std::min(bu.k_max, n);
      const int want_n = std::min(k_max, std::max(std::min(bu.k_min, k_max), rp));
      ASSERT_LE(std::abs(c[b] - want_n), 2 + want_n / 1000)
          << "row " << b << " of " << B << " p " << bu.top_p << " want " << want_n;
      ASSERT_LE(c[b], k_max);
      std::vector<int> want(order.begin(), order.begin() + std::max(c[b], 0));
      std::sort(want.begin(), want.end());
      std::vector<int> got(o.begin() + static_cast<size_t>(b) * bu.k_max,
                           o.begin() + static_cast<size_t>(b) * bu.k_max + c[b]);
      ASSERT_EQ(got, want) << "row " << b << " p " << bu.top_p << " rep " << rep;
    }
  }
}

TEST(CudaSparseStep, SelectionOnlyTopP) {
  SIEVE_REQUIRE_GPU();
  const std::vector<real_row> real = load_real_rows(k_real_rows_fixture);
  ASSERT_FALSE(real.empty()) << "missing or malformed fixture " << k_real_rows_fixture;
  std::mt19937 rng(78);
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::vector<int32_t> seq_lens = {131072, 20000, 700};
  const int r = 2;
  std::vector<std::vector<float>> real_rows(seq_lens.size() * r), vote_rows(seq_lens.size() * r);
  for (size_t b = 0; b < real_rows.size(); ++b) {
    real_rows[b] = tile_real_row(real, b, seq_lens[b / r], 53 * b);
    for (int t = 0; t < seq_lens[b / r]; ++t)  // exp of Gaussian logits: a soft-vote-like row
      vote_rows[b].push_back(std::exp(2.5f * nd(rng)));
  }
  for (const auto* rows : {&real_rows, &vote_rows}) {
    check_topp(seq_lens, *rows, r, topp(0.9f, 131072, 16));
    check_topp(seq_lens, *rows, r, topp(0.5f, 4096, 128, 128, 513));
    check_topp(seq_lens, *rows, r, topp(0.99f, 65536, 0, 4, 64));
  }
}

// Several rows per sequence (one per KV head, as TokenSelect selects): row b has the length
// of sequence b / r; both ways of meeting; and the argument checks that go with it.
TEST(CudaSparseStep, SelectionOnlyRowsPerSequence) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(77);
  const std::vector<int32_t> seq_lens = {20000, 7000, 100};
  const int r = 4;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::vector<float>> rows(seq_lens.size() * r);
  for (size_t b = 0; b < rows.size(); ++b)
    for (int t = 0; t < seq_lens[b / r]; ++t)
      rows[b].push_back(b % 2 ? std::round(nd(rng) * 8.f) / 8.f : nd(rng));
  dbuf<uint32_t> ws(step_ws_bytes(static_cast<int32_t>(rows.size())) / 4);
  ws.zero();
  for (step_sync sync : {step_sync::grid, step_sync::cluster})
    check_selection_only(seq_lens, rows, ws, sync, r);

  step_params st;  // argument checks (no launch)
  st.batch = 6;
  st.rows_per_seq = 4;
  st.score = false;
  st.attend_on = false;
  int32_t fake = 0;
  st.scores = reinterpret_cast<float*>(&fake);
  st.seq_len = st.out_idx = st.out_count = &fake;
  st.ws = reinterpret_cast<uint32_t*>(&fake);
  st.max_len = 64;
  Status s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a multiple of rows_per_seq"), std::string::npos) << s.message();
  st.batch = 8;
  st.attend_on = true;
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("selection alone"), std::string::npos) << s.message();
}

// Rows longer than one cluster's shared memory: a forced cluster step refuses them with a
// clear error, the automatic choice runs them on the cooperative grid.
TEST(CudaSparseStep, LongRowsLeaveTheCluster) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(76);
  const std::vector<int32_t> lens = {1500000};
  std::vector<std::vector<float>> rows(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int t = 0; t < lens[0]; ++t) rows[0].push_back(std::round(nd(rng) * 256.f) / 256.f);
  dbuf<uint32_t> ws(step_ws_bytes(1) / 4);
  ws.zero();
  check_selection_only(lens, rows, ws, step_sync::automatic);
  const score_rows sr(lens, rows);
  dbuf<int32_t> idx(2048), cnt(1);
  step_params st = selection_only(sr, 1, 1, topk(2048), idx.p, 2048, cnt.p, ws.p);
  EXPECT_EQ(sparse_step_mode(st), step_sync::grid);
  st.max_len = 40000;  // 2.5K scores per CTA of a 16-CTA cluster
  EXPECT_EQ(sparse_step_mode(st), step_sync::cluster);
  st.max_len = 400000;  // selection alone: the cluster wherever the rows fit
  EXPECT_EQ(sparse_step_mode(st), step_sync::cluster);
  st.score = true;  // scoring 25K keys per CTA: the grid reads them faster
  st.sk.pages.page_size = 16;
  EXPECT_EQ(sparse_step_mode(st), step_sync::grid);
  st.score = false;
  st.max_len = lens[0];
  st.sync = step_sync::cluster;
  const Status s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max_len = 1500000"), std::string::npos) << s.message();
}

TEST(CudaSparseStep, RejectsWhatItDoesNotDo) {
  // argument checks run before any launch: no device needed
  step_params st;
  st.batch = 1;
  st.score = false;
  st.attend_on = false;
  int32_t fake = 0;
  st.scores = reinterpret_cast<float*>(&fake);
  st.seq_len = &fake;
  st.out_idx = &fake;
  st.out_count = &fake;
  st.ws = reinterpret_cast<uint32_t*>(&fake);
  st.budget.k_max = 4;
  st.out_stride = 4;
  st.budget.top_p = 0.9f;
  st.sync = step_sync::grid;  // top-p runs in the cluster path only
  auto s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster path only"), std::string::npos) << s.message();
  st.sync = step_sync::automatic;
  st.score = true;  // top-p over raw sketch logits: refused
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no distribution"), std::string::npos) << s.message();
  st.score = false;
  st.budget.top_p = 0.f;
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("must be > 0"), std::string::npos) << s.message();
  st.budget.top_p = 2.f;
  s = sparse_step(st, launch_cfg{});  // max_len left 0
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("max_len"), std::string::npos) << s.message();
  st.max_len = 64;
  st.score = true;
  st.sk.pages.indptr = st.sk.pages.indices = st.sk.pages.last_page_len = &fake;
  st.sk.pages.batch = 1;
  st.sk.pages.page_size = 16;
  st.sk.n_sk_heads = 8;
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shared sketch head"), std::string::npos) << s.message();
  st.sk.n_sk_heads = 1;
  st.sk.type = dtype::bf16;
  st.sk.dim = 16;
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fp8_e4m3 with d_s 16"), std::string::npos) << s.message();
  st.sk.pages.page_size = 12;
  s = sparse_step(st, launch_cfg{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("power of two"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sieve::cuda::test
