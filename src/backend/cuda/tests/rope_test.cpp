// The fused QKV split + RoPE kernel (launch_qkv_rope) against the CPU's rope_qk: plain RoPE,
// linear scaling and YaRN (Qwen2.5's x4 over 32768), NORM and NEOX pairs, positions up to 128K,
// with the pair frequencies the host computes once (RopeScaling::inv_freqs) as the runner
// passes them. V passes through unrotated.
#include <cuda_bf16.h>

#include "backend/cpu/ops.h"
#include "backend/cuda/model_ops.h"
#include "backend/cuda/tests/test_util.h"
#include "core/rope_mode.h"

namespace sieve::cuda::test {
namespace {

struct RopeCase {
  const char* name;
  RopeScaling scaling;
  RopeMode mode;
  int head_dim, n_rot;
  float base;
};

RopeScaling yarn4() {
  RopeScaling s;
  s.type = RopeScalingType::yarn;
  s.factor = 4.0f;
  s.n_ctx_orig = 32768;
  s.ext_factor = 1.0f;
  return s;
}

RopeScaling linear2() {
  RopeScaling s;
  s.type = RopeScalingType::linear;
  s.factor = 2.0f;
  return s;
}

void check_case(const RopeCase& c) {
  SCOPED_TRACE(c.name);
  const int n_head = 6, n_kv = 2, d = c.head_dim;
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 32767, 65536, 100003, 131071};
  const int n_tok = static_cast<int>(pos.size());
  const int row = (n_head + 2 * n_kv) * d;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> qkv(static_cast<size_t>(n_tok) * row);
  for (float& x : qkv) x = nd(rng);

  // host reference: q and k rotated by the CPU op (fp32), v as it came
  std::vector<float> q(static_cast<size_t>(n_tok) * n_head * d),
      k(static_cast<size_t>(n_tok) * n_kv * d);
  for (int t = 0; t < n_tok; ++t) {
    std::copy_n(qkv.begin() + t * row, n_head * d, q.begin() + t * n_head * d);
    std::copy_n(qkv.begin() + t * row + n_head * d, n_kv * d, k.begin() + t * n_kv * d);
  }
  std::vector<float> q_plain = q;
  rope_qk(q.data(), n_head, k.data(), n_kv, pos.data(), n_tok, d, c.n_rot, c.base, c.mode,
          c.scaling);
  rope(q_plain.data(), pos.data(), n_tok, n_head, d, c.n_rot, c.base, c.mode);

  std::vector<double> inv(c.n_rot / 2);
  c.scaling.inv_freqs(c.n_rot, c.base, inv.data());
  dbuf<float> d_qkv(qkv);
  dbuf<int32_t> d_pos(pos);
  dbuf<double> d_inv(inv);
  dbuf<uint16_t> d_q(q.size()), d_k(k.size()), d_v(k.size());
  d_q.poison();
  d_k.poison();
  d_v.poison();
  qkv_rope_params p;
  p.qkv = d_qkv.p;
  p.pos = d_pos.p;
  p.n_head = n_head;
  p.n_kv = n_kv;
  p.head_dim = d;
  p.n_rot = c.n_rot;
  p.inv_freq = d_inv.p;
  p.neox = c.mode == RopeMode::neox;
  p.q = reinterpret_cast<__nv_bfloat16*>(d_q.p);
  p.k = reinterpret_cast<__nv_bfloat16*>(d_k.p);
  p.v = reinterpret_cast<__nv_bfloat16*>(d_v.p);
  CUDA_OK(launch_qkv_rope(p, n_tok, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> gq = d_q.get(), gk = d_k.get(), gv = d_v.get();
  // bf16 output of the same fp32 rotation: within one bf16 rounding (2^-8 relative) and an
  // fp32 ulp or two (FMA contraction)
  auto near = [](float got, float want) {
    return std::fabs(got - want) <= 0.0079f * std::fabs(want) + 1e-5f;
  };
  float plain_gap = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const float g = bf16_to_f32(gq[i]);
    ASSERT_TRUE(near(g, q[i])) << "q element " << i << ": " << g << " vs " << q[i];
    plain_gap = std::max(plain_gap, std::fabs(g - q_plain[i]));
  }
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_TRUE(near(bf16_to_f32(gk[i]), k[i])) << "k element " << i;
  }
  for (int t = 0; t < n_tok; ++t) {
    for (int j = 0; j < n_kv * d; ++j) {
      const float want = qkv[t * row + (n_head + n_kv) * d + j];
      ASSERT_EQ(gv[t * n_kv * d + j], f32_to_bf16(want)) << "v element " << j;
    }
  }
  // the scaling really turned the pairs: far positions differ from plain RoPE
  if (c.scaling.active()) {
    EXPECT_GT(plain_gap, 0.5f);
  } else {
    EXPECT_LT(plain_gap, 0.05f);
  }
}

TEST(QkvRope, PlainNeoxMatchesTheCpu) {
  SIEVE_REQUIRE_GPU();
  check_case({"plain neox", RopeScaling{}, RopeMode::neox, 64, 64, 10000.f});
}

TEST(QkvRope, YarnNeoxMatchesTheCpu) {
  SIEVE_REQUIRE_GPU();
  check_case({"yarn x4 neox d64", yarn4(), RopeMode::neox, 64, 64, 1000000.f});
  check_case({"yarn x4 neox d128", yarn4(), RopeMode::neox, 128, 128, 1000000.f});
}

TEST(QkvRope, YarnNormPartialRotationMatchesTheCpu) {
  SIEVE_REQUIRE_GPU();
  check_case({"yarn x4 norm, n_rot 64 of 128", yarn4(), RopeMode::norm, 128, 64, 10000.f});
}

TEST(QkvRope, LinearScalingMatchesTheCpu) {
  SIEVE_REQUIRE_GPU();
  check_case({"linear x2 norm", linear2(), RopeMode::norm, 64, 64, 10000.f});
}

TEST(QkvRope, MissingFrequenciesAreAnError) {
  qkv_rope_params p;
  p.n_rot = 64;
  EXPECT_EQ(launch_qkv_rope(p, 1, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace sieve::cuda::test
