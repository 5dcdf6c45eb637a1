// Prefill-chunk attention (dense causal, and sinks + selection + window-and-chunk), with
// and without split-K, against a float64 CPU reference.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

struct prefill_case {
  std::vector<int32_t> lens;  // total tokens per sequence (chunk included)
  std::vector<int32_t> n_q;   // chunk size per sequence
  int page_size, n_qh, n_kv, D;
  dtype type;
  int splits;
  bool sparse = false;
  int n_sink = 0, n_window = 0, sel_heads = 1;
  int causal_window = 0;  // > 0: sliding window (query p sees keys k with p - k < it)
  int tile_rows = 0;      // 0: the launcher's CTA shape; 64 or 128 forced
};

void run_prefill(const prefill_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  paged_cache kv;
  kv.build(c.lens, c.page_size, c.n_kv, c.D, c.type, rng);
  const int B = kv.batch, G = c.n_qh / c.n_kv, D = c.D;
  std::vector<int32_t> qo(1, 0);
  for (int n : c.n_q) qo.push_back(qo.back() + n);
  const int total_q = qo.back();
  const int max_q = *std::max_element(c.n_q.begin(), c.n_q.end());
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<uint16_t> q = random_half(static_cast<size_t>(total_q) * c.n_qh * D, c.type, rng);

  const int sel_stride = 200;
  const int n_sel_rows = B * c.sel_heads;
  std::vector<int32_t> sel(static_cast<size_t>(n_sel_rows) * sel_stride, -1), sel_n(n_sel_rows, 0);
  if (c.sparse) {
    for (int b = 0; b < B; ++b) {
      const int len = c.lens[b], q_start = len - c.n_q[b];
      const int lo = std::min(c.n_sink, len), hi = std::max(q_start - c.n_window, lo);
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
  dbuf<uint16_t> d_q(q), d_o(static_cast<size_t>(total_q) * c.n_qh * D);
  dbuf<int32_t> d_qo(qo), d_sel(sel), d_seln(sel_n);
  dbuf<float> ws_o(static_cast<size_t>(c.splits) * total_q * c.n_qh * D),
      ws_ml(static_cast<size_t>(c.splits) * total_q * c.n_qh * 2);
  d_o.poison();
  prefill_params p;
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
  p.qo_indptr = d_qo.p;
  p.n_q_heads = c.n_qh;
  p.max_q = max_q;
  p.total_q = total_q;
  p.scale = scale;
  p.causal_window = c.causal_window;
  p.o = d_o.p;
  p.n_splits = c.splits;
  p.ws_o = ws_o.p;
  p.ws_ml = ws_ml.p;
  p.tile_rows = c.tile_rows;
  STATUS_OK(prefill_attention(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> o = d_o.get();

  std::vector<double> got, want;
  for (int b = 0; b < B; ++b) {
    const int len = c.lens[b], nq = c.n_q[b], q_start = len - nq;
    for (int g = 0; g < c.n_kv; ++g) {
      std::vector<int> toks;
      if (!c.sparse) {
        for (int i = 0; i < len; ++i) toks.push_back(i);
      } else {
        const int row = b * c.sel_heads + (c.sel_heads == 1 ? 0 : g);
        const int n_sink = std::min(c.n_sink, len);
        const int w_start = std::max(q_start - c.n_window, n_sink);
        for (int i = 0; i < n_sink; ++i) toks.push_back(i);
        for (int i = 0; i < sel_n[row]; ++i)
          toks.push_back(sel[static_cast<size_t>(row) * sel_stride + i]);
        for (int i = w_start; i < len; ++i) toks.push_back(i);
      }
      for (int qi = 0; qi < nq; ++qi) {
        const int qpos = q_start + qi;
        for (int hh = 0; hh < G; ++hh) {
          const int h = g * G + hh;
          const size_t qrow = static_cast<size_t>(qo[b] + qi) * c.n_qh + h;
          std::vector<double> s;
          std::vector<int> tk;
          double mx = -INFINITY;
          for (int t : toks) {
            if (t > qpos || (c.causal_window > 0 && qpos - t >= c.causal_window)) continue;
            double acc = 0;
            for (int d = 0; d < D; ++d)
              acc +=
                  static_cast<double>(from_half_bits(q[qrow * D + d], c.type)) * kv.kf(b, t, g, d);
            s.push_back(acc * scale);
            tk.push_back(t);
            mx = std::max(mx, s.back());
          }
          double sum = 0;
          for (auto& x : s) sum += (x = std::exp(x - mx));
          for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (size_t i = 0; i < s.size(); ++i) acc += s[i] * kv.vf(b, tk[i], g, d);
            want.push_back(acc / sum);
            got.push_back(from_half_bits(o[qrow * D + d], c.type));
          }
        }
      }
    }
  }
  EXPECT_LT(rel_err(got, want), 1e-2);
}

// Each dense case runs with both CTA shapes (64 rows = one m-tile per warp, 128 = two).
TEST(CudaPrefill, DenseCausalLlamaShape) {
  SIEVE_REQUIRE_GPU();
  for (int rows : {64, 128}) {
    prefill_case c{{700, 333}, {130, 333}, 16, 32, 8, 128, dtype::bf16, 1};
    c.tile_rows = rows;
    run_prefill(c, 61);
  }
}
TEST(CudaPrefill, DenseSplitK) {
  SIEVE_REQUIRE_GPU();
  for (int rows : {64, 128}) {
    prefill_case c{{2100}, {77}, 16, 8, 2, 128, dtype::bf16, 3};
    c.tile_rows = rows;
    run_prefill(c, 62);
  }
}
TEST(CudaPrefill, DenseHead64ThreeHeadsPerGroupF16) {
  SIEVE_REQUIRE_GPU();
  for (int rows : {64, 128}) {
    prefill_case c{{500, 90}, {45, 90}, 32, 9, 3, 64, dtype::f16, 1};
    c.tile_rows = rows;
    run_prefill(c, 63);
  }
}
// Long history behind a short chunk: most tiles are visible to every row (the unmasked path),
// the chunk's own tiles are masked; splits end mid-history.
TEST(CudaPrefill, DenseLongHistoryUnmaskedTiles) {
  SIEVE_REQUIRE_GPU();
  for (int rows : {64, 128}) {
    prefill_case c{{5000, 3333}, {200, 1}, 16, 9, 3, 64, dtype::bf16, 5};
    c.tile_rows = rows;
    run_prefill(c, 69);
  }
}
TEST(CudaPrefill, BadTileRowsIsAnError) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(1);
  paged_cache kv;
  kv.build({64}, 16, 1, 256, dtype::bf16, rng);
  dbuf<uint16_t> q(std::vector<uint16_t>(256)), o(256);
  dbuf<int32_t> qo(std::vector<int32_t>{0, 1});
  prefill_params p;
  p.kv = kv.view();
  p.q = q.p;
  p.o = o.p;
  p.qo_indptr = qo.p;
  p.n_q_heads = 1;
  p.max_q = p.total_q = 1;
  for (int rows : {96, 256, -64}) {
    p.tile_rows = rows;
    const Status s = prefill_attention(p, launch_cfg{});
    ASSERT_FALSE(s.ok()) << rows;
    EXPECT_NE(s.message().find("tile_rows"), std::string::npos) << s.message();
  }
}
TEST(CudaPrefill, DenseHead256) {
  SIEVE_REQUIRE_GPU();
  for (int rows : {64, 128}) {
    prefill_case c{{400}, {70}, 16, 4, 1, 256, dtype::bf16, 2};
    c.tile_rows = rows;
    run_prefill(c, 64);
  }
}
TEST(CudaPrefill, SparseChunkPerSequenceSelection) {
  SIEVE_REQUIRE_GPU();
  prefill_case c{{3000, 1500}, {100, 64}, 16, 32, 8, 128, dtype::bf16, 1};
  c.sparse = true;
  c.n_sink = 8;
  c.n_window = 50;
  run_prefill(c, 65);
}
TEST(CudaPrefill, SparseChunkPerKvHeadSplit) {
  SIEVE_REQUIRE_GPU();
  prefill_case c{{2000}, {33}, 8, 16, 4, 128, dtype::bf16, 2};
  c.sparse = true;
  c.n_sink = 16;
  c.n_window = 20;
  c.sel_heads = 4;
  run_prefill(c, 66);
}
// Sliding windows (Gemma 3's local layers): the chunk's queries each see their own last
// `causal_window` keys - dense lists (whole tiles masked, split-K) and a window token set.
TEST(CudaPrefill, SlidingWindowDenseListSplitK) {
  SIEVE_REQUIRE_GPU();
  prefill_case c{{900, 300}, {300, 300}, 16, 4, 1, 256, dtype::bf16, 2};
  c.causal_window = 128;
  run_prefill(c, 67);
}
TEST(CudaPrefill, SlidingWindowTwoMTilesSplitK) {
  SIEVE_REQUIRE_GPU();
  prefill_case c{{1500, 700}, {600, 700}, 16, 8, 2, 128, dtype::bf16, 3};
  c.causal_window = 200;
  c.tile_rows = 128;
  run_prefill(c, 70);
}
TEST(CudaPrefill, SlidingWindowTokenSet) {
  SIEVE_REQUIRE_GPU();
  prefill_case c{{1400}, {512}, 16, 4, 1, 256, dtype::bf16, 1};
  c.sparse = true;
  c.n_window = 511;
  c.causal_window = 512;
  run_prefill(c, 68);
}

}  // namespace
}  // namespace sieve::cuda::test
