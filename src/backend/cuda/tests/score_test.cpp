// Exact paged q.K scoring + head soft vote, and sketch scoring (bf16 / fp8 / int8 keys,
// d_s 8..32, stats+vote and raw modes), against float64 CPU references; the fused
// level-0 histogram is checked by running the selection on the fused chain.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

struct sel_bufs {
  dbuf<uint8_t> ws;
  dbuf<int32_t> out, cnt;
  select_params p;
  void init(int n_rows, int max_len, const float* scores, int64_t stride, const int32_t* seq_len,
            int rows_per_seq, select_budget bu) {
    ws.alloc(select_ws_bytes(n_rows, max_len));
    ws.poison(0x33);
    out.alloc(static_cast<size_t>(n_rows) * bu.k_max);
    cnt.alloc(n_rows);
    p.scores = scores;
    p.score_stride = stride;
    p.seq_len = seq_len;
    p.rows_per_seq = rows_per_seq;
    p.n_rows = n_rows;
    p.budget = bu;
    p.ws.base = ws.p;
    p.ws.n_rows = n_rows;
    p.ws.max_tiles = select_max_tiles(max_len);
    p.out_idx = out.p;
    p.out_stride = bu.k_max;
    p.out_count = cnt.p;
  }
  hist_sink sink() const {
    hist_sink h;
    h.ws = p.ws;
    h.seq_len = p.seq_len;
    h.rows_per_seq = p.rows_per_seq;
    h.budget = p.budget;
    h.want_mass = p.budget.top_p < 1.f;
    return h;
  }
  void check(const std::vector<float>& scores, const std::vector<int32_t>& lens) {
    const std::vector<int32_t> o = out.get(), c = cnt.get();
    for (int r = 0; r < p.n_rows; ++r) {
      const int len = lens[r / p.rows_per_seq];
      const int lo = std::min(p.budget.lo, len), hi = std::max(len - p.budget.tail, lo);
      const std::vector<int> want =
          ref_topk(scores.data() + r * p.score_stride, lo, hi, p.budget.k_max);
      ASSERT_EQ(c[r], static_cast<int>(want.size())) << "row " << r;
      std::vector<int> got(o.begin() + static_cast<size_t>(r) * p.out_stride,
                           o.begin() + static_cast<size_t>(r) * p.out_stride + c[r]);
      ASSERT_EQ(got, want) << "row " << r;
    }
  }
};

// stats_lo / stats_tail: each head's softmax normalised over [stats_lo, len - stats_tail) only
void run_exact(std::vector<int32_t> lens, int ps, int n_q, int n_kv, int D, dtype t, int chunk,
               uint32_t seed, int stats_lo = 0, int stats_tail = 0) {
  std::mt19937 rng(seed);
  paged_cache kv;
  kv.build(lens, ps, n_kv, D, t, rng);
  const int B = kv.batch, G = n_q / n_kv, rows = B * n_kv;
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const int n_chunks = (max_len + chunk - 1) / chunk;
  const int64_t stride = score_row_stride(max_len);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<uint16_t> q = random_half(static_cast<size_t>(B) * n_q * D, t, rng, 2.f);
  dbuf<uint16_t> d_q(q);
  dbuf<float> logits(static_cast<size_t>(rows) * G * stride),
      stats(static_cast<size_t>(rows) * n_chunks * G * 2);
  dbuf<float> scores(static_cast<size_t>(rows) * stride);
  logits.poison();
  scores.poison();
  sel_bufs sel;
  select_budget bu;
  bu.k_max = 64;
  bu.lo = 4;
  bu.tail = 16;
  sel.init(rows, max_len, scores.p, stride, kv.d_lens.p, n_kv, bu);

  decode_params p;
  p.kv = kv.view();
  p.q = d_q.p;
  p.n_q_heads = n_q;
  p.scale = scale;
  p.logits = logits.p;
  p.logit_stride = stride;
  p.stats = stats.p;
  p.chunk_tokens = chunk;
  p.n_splits = n_chunks;
  p.zero_ws = sel.ws.p;
  p.zero_bytes = select_ws_header_bytes();
  p.stats_lo = stats_lo;
  p.stats_tail = stats_tail;
  STATUS_OK(score_exact(p, launch_cfg{}));
  soft_vote_params v;
  v.logits = logits.p;
  v.logit_stride = stride;
  v.stats = stats.p;
  v.n_chunks = n_chunks;
  v.G = G;
  v.n_rows = rows;
  v.max_len = max_len;
  v.scores = scores.p;
  v.score_stride = stride;
  v.hist = sel.sink();
  STATUS_OK(soft_vote(v, launch_cfg{}));
  STATUS_OK(select(sel.p, true, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> lg = logits.get(), sc = scores.get();

  std::vector<double> got_l, want_l, got_s, want_s;
  for (int b = 0; b < B; ++b) {
    for (int g = 0; g < n_kv; ++g) {
      const int row = b * n_kv + g;
      const int L = lens[b];
      std::vector<double> score(L, 0.0);
      for (int hh = 0; hh < G; ++hh) {
        const int h = g * G + hh;
        std::vector<double> l(L);
        double mx = -INFINITY;
        for (int tt = 0; tt < L; ++tt) {
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += static_cast<double>(
                       from_half_bits(q[(static_cast<size_t>(b) * n_q + h) * D + d], t)) *
                   kv.kf(b, tt, g, d);
          l[tt] = acc * scale * 1.4426950408889634;
          if (tt >= stats_lo && tt < L - stats_tail) mx = std::max(mx, l[tt]);
          want_l.push_back(l[tt]);
          got_l.push_back(lg[(static_cast<size_t>(row) * G + hh) * stride + tt]);
        }
        double z = 0;
        for (int tt = stats_lo; tt < L - stats_tail; ++tt) z += std::exp2(l[tt] - mx);
        for (int tt = 0; tt < L; ++tt) score[tt] += std::exp2(l[tt] - mx) / z;
      }
      for (int tt = 0; tt < L; ++tt) {
        want_s.push_back(score[tt]);
        got_s.push_back(sc[static_cast<size_t>(row) * stride + tt]);
      }
    }
  }
  EXPECT_LT(rel_err(got_l, want_l), 1e-5);
  EXPECT_LT(rel_err(got_s, want_s), 1e-4);
  sel.check(sc, lens);

  // fold = n_kv: a sequence's heads vote into one row in one launch (scope=layer), equal to the
  // sum of its KV groups' rows above; then top-k over those rows
  dbuf<float> folded(static_cast<size_t>(B) * stride);
  folded.poison();
  sel_bufs fsel;
  fsel.init(B, max_len, folded.p, stride, kv.d_lens.p, 1, bu);
  soft_vote_params vf = v;
  vf.fold = n_kv;
  vf.scores = folded.p;
  vf.hist = fsel.sink();
  // the fused histogram accumulates into zeroed row headers (score_exact zeroed sel's above)
  CUDA_OK(cudaMemset(fsel.ws.p, 0, B * select_ws_header_bytes()));
  STATUS_OK(soft_vote(vf, launch_cfg{}));
  STATUS_OK(select(fsel.p, true, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> fs = folded.get();
  std::vector<double> got_f, want_f;
  for (int b = 0; b < B; ++b) {
    for (int tt = 0; tt < lens[b]; ++tt) {
      double sum = 0;
      for (int g = 0; g < n_kv; ++g) sum += sc[static_cast<size_t>(b * n_kv + g) * stride + tt];
      want_f.push_back(sum);
      got_f.push_back(fs[static_cast<size_t>(b) * stride + tt]);
    }
  }
  EXPECT_LT(rel_err(got_f, want_f), 1e-5);
  fsel.check(fs, lens);
  vf.fold = 0;  // at least one row
  EXPECT_FALSE(soft_vote(vf, launch_cfg{}).ok());
}

TEST(CudaScoreExact, LlamaShapeSoftVote) {
  SIEVE_REQUIRE_GPU();
  run_exact({3001, 700, 64}, 16, 32, 8, 128, dtype::bf16, 256, 31);
}
TEST(CudaScoreExact, Head64F16) {
  SIEVE_REQUIRE_GPU();
  run_exact({1999}, 32, 9, 3, 64, dtype::f16, 512, 32);
}
TEST(CudaScoreExact, StatsOverTheSelectableRange) {
  SIEVE_REQUIRE_GPU();
  run_exact({1999, 300}, 16, 9, 3, 64, dtype::bf16, 256, 34, 16, 65);
}
TEST(CudaScoreExact, Head256OddPage) {
  SIEVE_REQUIRE_GPU();
  run_exact({777, 1500}, 12, 4, 1, 256, dtype::bf16, 320, 33);
}

// ---- sketch scoring

struct sketch_case {
  std::vector<int32_t> lens;
  int ps, n_sk, n_sq, ds;
  dtype type;
  float key_scale;
  sketch_mode mode;  // vote (runs stats first) or raw
  int chunk;
};

void run_sketch(const sketch_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int B = static_cast<int>(c.lens.size());
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  // page table shared with a (virtual) K cache: build one with 1-dim heads and keep its table
  paged_cache pc;
  pc.build(c.lens, c.ps, 1, 8, dtype::bf16, rng, 2);
  const int n_pages = pc.n_pages;
  const size_t n_elem = static_cast<size_t>(n_pages) * c.n_sk * c.ps * c.ds;
  const int esz = c.type == dtype::bf16 ? 2 : 1;
  std::vector<uint8_t> raw(n_elem * esz);
  std::vector<float> val(n_elem);  // dequantised (before key_scale)
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < n_elem; ++i) {
    if (c.type == dtype::bf16) {
      const uint16_t h = f32_to_bf16(nd(rng));
      std::memcpy(&raw[2 * i], &h, 2);
      val[i] = bf16_to_f32(h);
    } else if (c.type == dtype::fp8_e4m3) {
      uint8_t b;
      do b = static_cast<uint8_t>(rng() & 0xff);
      while ((b & 0x7f) == 0x7f || ((b >> 3) & 15) > 9);  // finite, |x| < ~8
      raw[i] = b;
      val[i] = fp8_e4m3_to_f32(b);
    } else {
      const int8_t x = static_cast<int8_t>(std::uniform_int_distribution<int>(-127, 127)(rng));
      raw[i] = static_cast<uint8_t>(x);
      val[i] = x;
    }
  }
  const int rows = B * c.n_sk;
  std::vector<float> q(static_cast<size_t>(rows) * c.n_sq * c.ds);
  for (auto& x : q) x = nd(rng) * (c.type == dtype::int8 ? 0.02f : 1.f);
  const int n_chunks = (max_len + c.chunk - 1) / c.chunk;
  const int64_t stride = score_row_stride(max_len);
  dbuf<uint8_t> d_keys(raw);
  dbuf<float> d_q(q), stats(static_cast<size_t>(rows) * n_chunks * c.n_sq * 2),
      scores(static_cast<size_t>(rows) * stride);
  scores.poison();
  sel_bufs sel;
  select_budget bu;
  bu.k_max = 100;
  bu.lo = 2;
  bu.tail = 7;
  sel.init(rows, max_len, scores.p, stride, pc.d_lens.p, c.n_sk, bu);

  sketch_score_params p;
  p.sk.keys = d_keys.p;
  p.sk.type = c.type;
  p.sk.key_scale = c.key_scale;
  p.sk.n_sk_heads = c.n_sk;
  p.sk.dim = c.ds;
  p.sk.pages = pc.table();
  p.q = d_q.p;
  p.n_sq = c.n_sq;
  p.scale = 0.25f;
  p.chunk_tokens = c.chunk;
  p.n_chunks = n_chunks;
  p.stats = stats.p;
  p.scores = scores.p;
  p.score_stride = stride;
  p.zero_ws = sel.ws.p;
  p.zero_bytes = select_ws_header_bytes();
  if (c.mode == sketch_mode::vote) {
    p.mode = sketch_mode::stats;
    STATUS_OK(sketch_score(p, launch_cfg{}));
  }
  p.mode = c.mode;
  p.hist = sel.sink();
  STATUS_OK(sketch_score(p, launch_cfg{}));
  STATUS_OK(select(sel.p, true, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> sc = scores.get();

  std::vector<double> got, want;
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < c.n_sk; ++s) {
      const int row = b * c.n_sk + s;
      const int L = c.lens[b];
      std::vector<double> score(L, 0.0);
      for (int h = 0; h < c.n_sq; ++h) {
        std::vector<double> l(L);
        double mx = -INFINITY;
        for (int t = 0; t < L; ++t) {
          const int page = pc.indices[pc.indptr[b] + t / c.ps];
          const size_t base = ((static_cast<size_t>(page) * c.n_sk + s) * c.ps + t % c.ps) * c.ds;
          double acc = 0;
          for (int j = 0; j < c.ds; ++j)
            acc += static_cast<double>(q[(static_cast<size_t>(row) * c.n_sq + h) * c.ds + j]) *
                   val[base + j];
          l[t] = acc * c.key_scale * 0.25;
          mx = std::max(mx, l[t]);
        }
        if (c.mode == sketch_mode::raw) {
          for (int t = 0; t < L; ++t) score[t] += l[t];
        } else {
          double z = 0;
          for (int t = 0; t < L; ++t) z += std::exp(l[t] - mx);
          for (int t = 0; t < L; ++t) score[t] += std::exp(l[t] - mx) / z;
        }
      }
      for (int t = 0; t < L; ++t) {
        want.push_back(score[t]);
        got.push_back(sc[static_cast<size_t>(row) * stride + t]);
      }
    }
  }
  EXPECT_LT(rel_err(got, want), 1e-4);
  sel.check(sc, c.lens);
}

// The scorers' chunking fills at most one wave of resident CTAs (3 per SM exact, 2 per SM
// sketch): 400 CTAs for 396 slots (8 rows at 1M) left 4 CTAs to a second wave that cost
// ~30% of the exact scorer's time. Host-only: runs without a GPU.
TEST(CudaScoreChunks, OneWave) {
  for (int n_sm : {132, 114, 1}) {
    for (int rows : {1, 3, 8, 24, 64, 200, 1000}) {
      for (int len : {1, 600, 4096, 100000, 131072, 1048576, 2000003}) {
        const int ce = score_chunk_tokens(rows, len, n_sm);
        const int cs = sketch_chunk_tokens(rows, len, n_sm);
        ASSERT_EQ(ce % 64, 0);
        ASSERT_GE(ce, 512);
        ASSERT_EQ(cs % 1024, 0);
        const int64_t ctas_e = static_cast<int64_t>(rows) * ((len + ce - 1) / ce);
        const int64_t ctas_s = static_cast<int64_t>(rows) * ((len + cs - 1) / cs);
        // one wave, or one CTA per row when the rows alone exceed it
        EXPECT_LE(ctas_e, std::max<int64_t>(3 * n_sm, rows)) << rows << " x " << len;
        EXPECT_LE(ctas_s, std::max<int64_t>(2 * n_sm, rows)) << rows << " x " << len;
      }
    }
  }
  // and it still spreads a long row: 8 rows at 1M on 132 SMs use >= 90% of the 396 slots
  const int c = score_chunk_tokens(8, 1 << 20, 132);
  EXPECT_GE(8 * (((1 << 20) + c - 1) / c), 356);
}

TEST(CudaSketch, Bf16Dim16PerKvHeadVote) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{5000, 1234}, 16, 8, 4, 16, dtype::bf16, 1.f, sketch_mode::vote, 512}, 41);
}
TEST(CudaSketch, Fp8Dim16SharedSketchVote32Heads) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{7001, 300}, 16, 1, 32, 16, dtype::fp8_e4m3, 0.5f, sketch_mode::vote, 1024}, 42);
}
TEST(CudaSketch, Int8Dim32Vote) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{4097}, 8, 2, 3, 32, dtype::int8, 0.05f, sketch_mode::vote, 256}, 43);
}
TEST(CudaSketch, Fp8Dim8RawOddPage) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{3000, 99, 1}, 12, 4, 1, 8, dtype::fp8_e4m3, 1.f, sketch_mode::raw, 512}, 44);
}
TEST(CudaSketch, Bf16Dim32RawManyQueries) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{2500}, 16, 1, 8, 32, dtype::bf16, 1.f, sketch_mode::raw, 256}, 45);
}
TEST(CudaSketch, Int8Dim8Vote) {
  SIEVE_REQUIRE_GPU();
  run_sketch({{1800, 2200}, 32, 8, 4, 8, dtype::int8, 0.1f, sketch_mode::vote, 768}, 46);
}

TEST(CudaSketch, RejectsBadDim) {
  sketch_score_params p;
  p.sk.dim = 12;
  EXPECT_FALSE(sketch_score(p, launch_cfg{}).ok());
}

}  // namespace
}  // namespace sieve::cuda::test
