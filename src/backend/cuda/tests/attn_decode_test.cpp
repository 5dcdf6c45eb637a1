// Decode attention (dense split-KV and sparse sink+selection+window) against a float64
// CPU reference on random paged caches with awkward lengths.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

struct decode_case {
  std::vector<int32_t> lens;
  int page_size, n_q, n_kv, D;
  dtype type;
  int splits;
  bool sparse = false;
  int n_sink = 0, n_window = 0, sel_heads = 1;
};

// Token positions of the sparse list of (b, g), like make_token_list.
std::vector<int> ref_tokens(const decode_case& c, int len, const std::vector<int32_t>& sel,
                            int sel_n) {
  std::vector<int> t;
  if (!c.sparse) {
    for (int i = 0; i < len; ++i) t.push_back(i);
    return t;
  }
  const int n_sink = std::min(c.n_sink, len);
  const int q_start = len - 1;
  const int w_start = std::max(q_start - c.n_window, n_sink);
  for (int i = 0; i < n_sink; ++i) t.push_back(i);
  for (int i = 0; i < sel_n; ++i) t.push_back(sel[i]);
  for (int i = w_start; i < len; ++i) t.push_back(i);
  return t;
}

void run_case(const decode_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  paged_cache kv;
  kv.build(c.lens, c.page_size, c.n_kv, c.D, c.type, rng);
  const int B = kv.batch, G = c.n_q / c.n_kv, D = c.D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<uint16_t> q = random_half(static_cast<size_t>(B) * c.n_q * D, c.type, rng);

  // selections: random ascending subsets of [n_sink, q_start - n_window)
  const int sel_stride = 300;
  const int n_sel_rows = B * c.sel_heads;
  std::vector<int32_t> sel(static_cast<size_t>(n_sel_rows) * sel_stride, -1), sel_n(n_sel_rows, 0);
  if (c.sparse) {
    for (int b = 0; b < B; ++b) {
      const int len = c.lens[b];
      const int lo = std::min(c.n_sink, len), hi = std::max(len - 1 - c.n_window, lo);
      for (int r = 0; r < c.sel_heads; ++r) {
        std::vector<int> pool;
        for (int i = lo; i < hi; ++i) pool.push_back(i);
        std::shuffle(pool.begin(), pool.end(), rng);
        const int n = std::min<int>(static_cast<int>(pool.size()),
                                    std::uniform_int_distribution<int>(0, sel_stride)(rng));
        std::sort(pool.begin(), pool.begin() + n);
        const int row = b * c.sel_heads + r;
        sel_n[row] = n;
        for (int i = 0; i < n; ++i) sel[static_cast<size_t>(row) * sel_stride + i] = pool[i];
      }
    }
  }

  dbuf<uint16_t> d_q(q), d_o(static_cast<size_t>(B) * c.n_q * D);
  dbuf<float> d_lse(static_cast<size_t>(B) * c.n_q);
  dbuf<int32_t> d_sel(sel), d_seln(sel_n);
  dbuf<float> ws_o(decode_ws_o_floats(B, c.n_kv, c.splits, G, D));
  dbuf<float> ws_ml(decode_ws_ml_floats(B, c.n_kv, c.splits, G));
  dbuf<uint32_t> ws_cnt(static_cast<size_t>(B) * c.n_kv);
  ws_cnt.zero();

  decode_params p;
  p.kv = kv.view();
  if (c.sparse) {
    p.set.sel_idx = d_sel.p;
    p.set.sel_count = d_seln.p;
    p.set.sel_stride = sel_stride;
    p.set.sel_heads = c.sel_heads;
    p.set.n_sink = c.n_sink;
    p.set.n_window = c.n_window;
  }
  p.q = d_q.p;
  p.n_q_heads = c.n_q;
  p.scale = scale;
  p.o = d_o.p;
  p.lse = d_lse.p;
  p.n_splits = c.splits;
  p.ws_o = ws_o.p;
  p.ws_ml = ws_ml.p;
  p.ws_counter = ws_cnt.p;

  // Twice: the second launch checks that the split counters were left at zero.
  for (int rep = 0; rep < 2; ++rep) {
    d_o.poison();
    d_lse.poison();
    STATUS_OK(decode_attention(p, launch_cfg{}));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> o = d_o.get();
    const std::vector<float> lse = d_lse.get();

    std::vector<double> got, want, got_lse, want_lse;
    for (int b = 0; b < B; ++b) {
      for (int g = 0; g < c.n_kv; ++g) {
        const int row = b * c.sel_heads + (c.sel_heads == 1 ? 0 : g);
        std::vector<int32_t> srow(sel.begin() + static_cast<size_t>(row) * sel_stride,
                                  sel.begin() + static_cast<size_t>(row + 1) * sel_stride);
        const std::vector<int> toks = ref_tokens(c, c.lens[b], srow, sel_n[row]);
        for (int hh = 0; hh < G; ++hh) {
          const int h = g * G + hh;
          std::vector<double> s(toks.size());
          double mx = -INFINITY;
          for (size_t i = 0; i < toks.size(); ++i) {
            double acc = 0;
            for (int d = 0; d < D; ++d)
              acc += static_cast<double>(
                         from_half_bits(q[(static_cast<size_t>(b) * c.n_q + h) * D + d], c.type)) *
                     kv.kf(b, toks[i], g, d);
            s[i] = acc * scale;
            mx = std::max(mx, s[i]);
          }
          double sum = 0;
          for (auto& x : s) sum += (x = std::exp(x - mx));
          for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (size_t i = 0; i < toks.size(); ++i) acc += s[i] * kv.vf(b, toks[i], g, d);
            want.push_back(toks.empty() ? 0.0 : acc / sum);
            got.push_back(from_half_bits(o[(static_cast<size_t>(b) * c.n_q + h) * D + d], c.type));
          }
          want_lse.push_back(toks.empty() ? 0.0 : mx + std::log(sum));
          got_lse.push_back(lse[static_cast<size_t>(b) * c.n_q + h]);
        }
      }
    }
    EXPECT_LT(rel_err(got, want), 1e-2) << "output, rep " << rep;
    for (size_t i = 0; i < got_lse.size(); ++i)
      ASSERT_NEAR(got_lse[i], want_lse[i], 2e-3 * (1 + std::fabs(want_lse[i])));
    p.n_splits = std::max(1, c.splits / 2);  // second round: a different split count
  }
}

TEST(CudaDecode, DenseLlamaShapeSplits) {
  SIEVE_REQUIRE_GPU();
  run_case({{97, 1000, 5003}, 16, 32, 8, 128, dtype::bf16, 7}, 1);
}
TEST(CudaDecode, DenseOneSplit) {
  SIEVE_REQUIRE_GPU();
  run_case({{300, 1}, 16, 8, 2, 128, dtype::bf16, 1}, 2);
}
TEST(CudaDecode, DenseSmolShapeHead64F16) {
  SIEVE_REQUIRE_GPU();
  run_case({{2049, 77}, 32, 9, 3, 64, dtype::f16, 5}, 3);
}
TEST(CudaDecode, DenseGemmaShapeHead256OddPages) {
  SIEVE_REQUIRE_GPU();
  run_case({{1500, 640}, 24, 4, 1, 256, dtype::bf16, 4}, 4);
}
TEST(CudaDecode, SparsePerSequenceSelection) {
  SIEVE_REQUIRE_GPU();
  decode_case c{{3001, 900, 130}, 16, 32, 8, 128, dtype::bf16, 6};
  c.sparse = true;
  c.n_sink = 4;
  c.n_window = 64;
  c.sel_heads = 1;
  run_case(c, 5);
}
TEST(CudaDecode, SparsePerKvHeadSelection) {
  SIEVE_REQUIRE_GPU();
  decode_case c{{2500, 700}, 8, 16, 4, 128, dtype::bf16, 3};
  c.sparse = true;
  c.n_sink = 128;
  c.n_window = 100;
  c.sel_heads = 4;
  run_case(c, 6);
}
TEST(CudaDecode, SparseHead64AndShortSequences) {
  SIEVE_REQUIRE_GPU();
  decode_case c{{50, 9, 1200}, 16, 9, 3, 64, dtype::bf16, 2};
  c.sparse = true;
  c.n_sink = 16;
  c.n_window = 32;
  c.sel_heads = 3;
  run_case(c, 7);
}

TEST(CudaDecode, RejectsBadArguments) {
  decode_params p;
  p.n_q_heads = 32;
  auto s = decode_attention(p, launch_cfg{});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("decode_attention"), std::string::npos);
}

}  // namespace
}  // namespace sieve::cuda::test
