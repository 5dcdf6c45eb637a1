// cuDNN's fused prefill attention (cudnn_attention.h) against our prefill kernel (itself
// checked against a float64 reference in attn_prefill_test.cpp): paged and contiguous K/V,
// one plan reused for chunks of different lengths. Skips without a GPU or without cuDNN.
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

#define SIEVE_REQUIRE_CUDNN()                                         \
  do {                                                                \
    SIEVE_REQUIRE_GPU();                                              \
    if (auto v_ = cudnn_version(); !v_) GTEST_SKIP() << v_.message(); \
  } while (0)

struct cudnn_case {
  int n_qh, n_kv, D;
  bool paged;
  int max_q, max_kv;
  std::vector<std::pair<int, int>> chunks;  // (queries, keys seen) per call of one plan
};

void run_case(const cudnn_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  constexpr int ps = 16;
  paged_cache kv;
  kv.build({c.max_kv}, ps, c.n_kv, c.D, dtype::bf16, rng);
  if (!c.paged) {  // pages in order from 0: one contiguous run of rows
    std::iota(kv.indices.begin(), kv.indices.end(), 0);
    kv.upload();
  }
  cudnn_prefill_shape sh;
  sh.n_q_heads = c.n_qh;
  sh.n_kv_heads = c.n_kv;
  sh.head_dim = c.D;
  sh.max_q = c.max_q;
  sh.max_kv = c.max_kv;
  sh.page_size = ps;
  sh.n_pages = kv.n_pages;
  sh.paged = c.paged;
  sh.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  auto plan = CudnnPrefill::create(sh, stream);
  ASSERT_TRUE(plan.ok()) << plan.message();

  const size_t q_elems = static_cast<size_t>(c.max_q) * c.n_qh * c.D;
  for (auto [n, len] : c.chunks) {
    SCOPED_TRACE(testing::Message() << "chunk of " << n << " queries, " << len << " keys");
    std::vector<uint16_t> q = random_half(q_elems, dtype::bf16, rng);
    dbuf<uint16_t> d_q(q), d_ours(q_elems), d_theirs(q_elems);
    d_ours.poison();
    d_theirs.poison();
    // our kernel reads the first len tokens of the sequence: lengths through its page table
    const int np = (len + ps - 1) / ps;
    std::vector<int32_t> indptr = {0, np}, last = {len - (np - 1) * ps}, qo = {0, n};
    std::vector<int32_t> lens(8, 0);  // seq_q at word 0, seq_kv at word 4 (16-byte aligned)
    lens[0] = n;
    lens[4] = len;
    dbuf<int32_t> d_indptr(indptr), d_last(last), d_qo(qo), d_lens(lens);
    dbuf<float> ws_o(static_cast<size_t>(n) * c.n_qh * c.D),
        ws_ml(static_cast<size_t>(n) * c.n_qh * 2);
    prefill_params p;
    p.kv = kv.view();
    p.kv.pages.indptr = d_indptr.p;
    p.kv.pages.last_page_len = d_last.p;
    p.kv.pages.batch = 1;
    p.q = d_q.p;
    p.qo_indptr = d_qo.p;
    p.n_q_heads = c.n_qh;
    p.max_q = n;
    p.total_q = n;
    p.scale = sh.scale;
    p.o = d_ours.p;
    p.ws_o = ws_o.p;
    p.ws_ml = ws_ml.p;
    STATUS_OK(prefill_attention(p, launch_cfg{stream}));
    cudnn_prefill_args a;
    a.q = d_q.p;
    a.k = kv.d_k.p;
    a.v = kv.d_v.p;
    a.page_list = kv.d_indices.p;
    a.seq_q = d_lens.p;
    a.seq_kv = d_lens.p + 4;
    a.o = d_theirs.p;
    STATUS_OK((*plan)->run(a));
    CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> ours = d_ours.get(), theirs = d_theirs.get();
    std::vector<double> x, y;
    for (size_t i = 0; i < static_cast<size_t>(n) * c.n_qh * c.D; ++i) {
      x.push_back(from_half_bits(theirs[i], dtype::bf16));
      y.push_back(from_half_bits(ours[i], dtype::bf16));
    }
    EXPECT_LT(rel_err(x, y), 1e-2);
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(CudnnPrefill, ContiguousLlamaShape) {
  SIEVE_REQUIRE_CUDNN();
  run_case({8, 2, 128, false, 128, 2048, {{128, 2048}, {37, 900}, {1, 513}, {128, 128}}}, 1);
}
TEST(CudnnPrefill, PagedLlamaShape) {
  SIEVE_REQUIRE_CUDNN();
  run_case({8, 2, 128, true, 128, 2048, {{128, 2048}, {37, 900}, {64, 64}}}, 2);
}
TEST(CudnnPrefill, SmolLM2AndGemmaShapes) {
  SIEVE_REQUIRE_CUDNN();
  run_case({9, 3, 64, false, 64, 1024, {{64, 1024}, {20, 333}}}, 3);
  run_case({4, 1, 256, false, 64, 1024, {{64, 1000}, {17, 17}}}, 4);
}

TEST(CudnnPrefill, BadShapeIsAnError) {
  SIEVE_REQUIRE_CUDNN();
  cudnn_prefill_shape sh;
  sh.n_q_heads = 9;
  sh.n_kv_heads = 2;  // not a divisor
  sh.head_dim = 64;
  sh.max_q = 16;
  sh.max_kv = 64;
  auto plan = CudnnPrefill::create(sh, nullptr);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("bad prefill shape"), std::string::npos);
}

// Without the frontend headers or cuDNN the error says what is missing (runs on every machine).
TEST(CudnnPrefill, VersionOrReason) {
  auto v = cudnn_version();
  if (v) {
    EXPECT_EQ(v->substr(0, 2), "9.");
  } else {
    EXPECT_TRUE(v.message().find("cuDNN") != std::string::npos) << v.message();
  }
}

}  // namespace
}  // namespace sieve::cuda::test
