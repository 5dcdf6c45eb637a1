// The Selection Cache probe (selection_cache_probe) against a host reference: the fingerprint
// is the query rotated back to position 0 and averaged over heads (both RoPE pair layouts, and
// under YaRN at positions past 64K with the host's pair frequencies); the same query at a later
// position hits, appends the tokens that left the window and tells the selection launches to
// skip; a different query, a cosine under theta or a gap over max_gap misses and stores the new
// fingerprint.
#include "backend/cpu/ops.h"
#include "backend/cuda/tests/test_util.h"
#include "core/rope_mode.h"

namespace sieve::cuda::test {
namespace {

// q_h = RoPE(u_h, pos) in bf16 (the CPU's rotation), as the model's qkv_rope kernel writes it.
std::vector<uint16_t> rotated(const std::vector<float>& u, int H, int d, int n_rot, bool neox,
                              int pos, float base, const RopeScaling& scaling) {
  std::vector<float> q = u;
  rope(q.data(), &pos, 1, H, d, n_rot, base, neox ? RopeMode::neox : RopeMode::norm, scaling);
  std::vector<uint16_t> out(q.size());
  for (size_t i = 0; i < q.size(); ++i) out[i] = to_half_bits(q[i], dtype::bf16);
  return out;
}

struct probe_run {
  int skip = -1, count = -1;
  std::vector<int32_t> state, idx;
  std::vector<float> fp;
};

// p0: the first query's position is p0 + 100.
void run_probe(bool neox, const RopeScaling& scaling = {}, float base = 10000.f, int p0 = 0) {
  std::mt19937 rng(neox ? 7 : 3);
  std::normal_distribution<float> nd;
  const int H = 9, d = 64, n_rot = 64, sinks = 4, window = 16, top_k = 8, max_gap = 32;
  std::vector<double> inv(n_rot / 2);
  scaling.inv_freqs(n_rot, base, inv.data());
  dbuf<double> d_inv(inv);
  std::vector<float> u(H * d), w(H * d);
  for (auto& x : u) x = nd(rng);
  for (auto& x : w) x = nd(rng);
  dbuf<uint16_t> d_q(static_cast<size_t>(H) * d);
  dbuf<int32_t> d_pos(1), d_len(1), d_state(std::vector<int32_t>(4, 0)), d_idx(top_k + max_gap),
      d_cnt(1), d_skip(1);
  dbuf<float> d_fp(std::vector<float>(d, 0.f));
  dbuf<uint32_t> d_hits(std::vector<uint32_t>(1, 0));
  auto probe = [&](const std::vector<float>& v, int pos, float theta) {
    const std::vector<uint16_t> q = rotated(v, H, d, n_rot, neox, pos, base, scaling);
    CUDA_OK(cudaMemcpy(d_q.p, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    const int32_t len = pos + 1;
    CUDA_OK(cudaMemcpy(d_pos.p, &pos, 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_len.p, &len, 4, cudaMemcpyHostToDevice));
    sel_cache_params p;
    p.q = d_q.p;
    p.pos = d_pos.p;
    p.seq_len = d_len.p;
    p.n_q_heads = H;
    p.head_dim = d;
    p.n_rot = n_rot;
    p.inv_freq = d_inv.p;
    p.neox = neox;
    p.theta = theta;
    p.n_sink = sinks;
    p.n_window = window;
    p.fp = d_fp.p;
    p.state = d_state.p;
    p.sel_idx = d_idx.p;
    p.sel_count = d_cnt.p;
    p.max_gap = max_gap;
    p.skip = d_skip.p;
    p.hits = d_hits.p;
    STATUS_OK(selection_cache_probe(p, launch_cfg{}));
    CUDA_OK(cudaDeviceSynchronize());
  };
  auto read = [&] {
    probe_run r;
    r.skip = d_skip.get()[0];
    r.count = d_cnt.get()[0];
    r.state = d_state.get();
    r.idx = d_idx.get();
    r.fp = d_fp.get();
    return r;
  };
  // 1. no fingerprint yet: a miss that stores the mean pre-RoPE query
  probe(u, p0 + 100, 0.9f);
  probe_run r = read();
  EXPECT_EQ(r.skip, 0);
  EXPECT_EQ(r.state[0], 1);
  EXPECT_EQ(r.state[1], p0 + 100 - window);  // pick end: len - 1 - window
  for (int c = 0; c < d; ++c) {
    float m = 0;
    for (int h = 0; h < H; ++h) m += u[h * d + c] / H;
    ASSERT_NEAR(r.fp[c], m, 0.02f) << "dim " << c;
  }
  // the selection launch would now write its picks: fake 5 of them below the pick end
  const std::vector<int32_t> picks = {4, 9, 30, 50, 83};
  CUDA_OK(cudaMemcpy(d_idx.p, picks.data(), picks.size() * 4, cudaMemcpyHostToDevice));
  const int32_t five = 5;
  CUDA_OK(cudaMemcpy(d_cnt.p, &five, 4, cudaMemcpyHostToDevice));
  // 2. the same query three tokens later: a hit, the three tokens that left the window appended
  probe(u, p0 + 103, 0.9f);
  r = read();
  EXPECT_EQ(r.skip, 1);
  EXPECT_EQ(r.count, 8);
  EXPECT_EQ(std::vector<int32_t>(r.idx.begin(), r.idx.begin() + 8),
            (std::vector<int32_t>{4, 9, 30, 50, 83, p0 + 84, p0 + 85, p0 + 86}));
  // 3. one more: the list grows by one from the same base
  probe(u, p0 + 104, 0.9f);
  r = read();
  EXPECT_EQ(r.skip, 1);
  EXPECT_EQ(r.count, 9);
  EXPECT_EQ(r.idx[8], p0 + 87);
  EXPECT_EQ(d_hits.get()[0], 2u);
  // 4. an unrelated query misses and replaces the fingerprint
  probe(w, p0 + 105, 0.9f);
  r = read();
  EXPECT_EQ(r.skip, 0);
  EXPECT_EQ(r.state[1], p0 + 105 - window);
  EXPECT_EQ(r.state[2], 0);
  // 5. theta -1 always hits, until the gap passes max_gap
  CUDA_OK(cudaMemcpy(d_cnt.p, &five, 4, cudaMemcpyHostToDevice));
  probe(u, p0 + 105 + max_gap, -1.f);
  EXPECT_EQ(read().skip, 1);
  EXPECT_EQ(read().count, 5 + max_gap);
  probe(u, p0 + 106 + max_gap, -1.f);
  EXPECT_EQ(read().skip, 0) << "a gap over max_gap re-selects";
}

TEST(SelectionCache, ProbeNormalRope) {
  SIEVE_REQUIRE_GPU();
  run_probe(false);
}
TEST(SelectionCache, ProbeNeoxRope) {
  SIEVE_REQUIRE_GPU();
  run_probe(true);
}
// Qwen2.5's YaRN x4 over 32768 at positions past 100K: the fingerprint turns back by the
// scaled pair frequencies (plain base^(-2i/n_rot) would leave the low-frequency pairs turned).
TEST(SelectionCache, ProbeYarnNeoxRopeFarPositions) {
  SIEVE_REQUIRE_GPU();
  RopeScaling s;
  s.type = RopeScalingType::yarn;
  s.factor = 4.0f;
  s.n_ctx_orig = 32768;
  s.ext_factor = 1.0f;
  run_probe(true, s, 1000000.f, 100000);
}
TEST(SelectionCache, BadArgumentsAreErrors) {
  sel_cache_params p;  // nothing set
  const Status st = selection_cache_probe(p, launch_cfg{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("must be set"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sieve::cuda::test
