// The qwen2 loader on the real Qwen2.5-Coder-0.5B file (skipped when it is not in the model
// cache: `sieve pull qwen2.5-coder-0.5b`), and RoPE scaling on its hyperparameters.
#include <gtest/gtest.h>

#include <cmath>

#include "gguf/test_models.h"
#include "model/model.h"

namespace sieve {
namespace {

TEST(Qwen2, LoadsHyperparametersAndBiases) {
  const std::string path = test_model_path("qwen2.5-coder-0.5b.gguf");
  if (path.empty())
    GTEST_SKIP() << "qwen2.5-coder-0.5b.gguf not found (sieve pull qwen2.5-coder-0.5b)";
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  ModelHParams& hp = (*m)->hp;
  EXPECT_EQ(hp.arch, "qwen2");
  EXPECT_EQ(hp.n_layer, 24);
  EXPECT_EQ(hp.n_embd, 896);
  EXPECT_EQ(hp.n_head, 14);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_EQ(hp.n_rot, 64);
  EXPECT_EQ(hp.n_ff, 4864);
  EXPECT_EQ(hp.n_vocab, 151936);
  EXPECT_EQ(hp.n_ctx_train, 32768);
  EXPECT_EQ(hp.rope_mode, RopeMode::neox);
  EXPECT_FLOAT_EQ(hp.rope_base[0], 1e6f);
  EXPECT_NEAR(hp.rms_eps, 1e-6f, 1e-12f);
  EXPECT_FALSE(hp.qk_norm);
  EXPECT_FALSE(hp.tied_output);  // this file carries output.weight
  EXPECT_FALSE(hp.rope_scaling.active());
  EXPECT_FLOAT_EQ(hp.attn_scale, 0.125f);
  for (const LayerWeights& L : (*m)->w.layers) {
    ASSERT_NE(L.bq, nullptr);
    ASSERT_NE(L.bk, nullptr);
    ASSERT_NE(L.bv, nullptr);
  }

  // YaRN x4 from 32768 (what --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768 sets):
  // 128K of context, q.k scaled by mscale^2; turning it off restores the plain scale.
  RopeScaling s;
  s.type = RopeScalingType::yarn;
  s.factor = 4;
  s.n_ctx_orig = 32768;
  s.ext_factor = 1;
  ASSERT_TRUE(set_rope_scaling(hp, s).ok());
  EXPECT_EQ(hp.n_ctx_max(), 131072);
  const double ms = 1.0 + 0.1 * std::log(4.0);
  EXPECT_NEAR(hp.attn_scale, 0.125 * ms * ms, 1e-6);
  ASSERT_TRUE(set_rope_scaling(hp, RopeScaling{}).ok());
  EXPECT_FLOAT_EQ(hp.attn_scale, 0.125f);
  EXPECT_EQ(hp.n_ctx_max(), 32768);
  s.n_ctx_orig = 0;
  EXPECT_FALSE(set_rope_scaling(hp, s).ok());
  s.n_ctx_orig = 32768;
  s.factor = -1;
  EXPECT_FALSE(set_rope_scaling(hp, s).ok());
}

}  // namespace
}  // namespace sieve
