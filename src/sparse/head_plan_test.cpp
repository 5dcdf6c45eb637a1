// HeadPlan: JSON round trip, validation errors that name the fault, KV-group mapping.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include "sparse/head_plan.h"

namespace sieve {
namespace {

using nlohmann::json;

HeadPlan sample_plan(bool with_indexer) {
  HeadPlan p = HeadPlan::empty(HeadShape{3, 6, 2, 8});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& s : p.scores) s = u(rng);
  choose_retrieval_heads(p, 0.25f);
  p.seed = 42;
  p.samples = 4;
  p.ctx = 2048;
  p.model_name = "tiny";
  p.model_arch = "llama";
  p.score_method = "test";
  if (with_indexer) {
    p.d_idx = 2;
    p.recall_k = 64;
    p.recall_of = 256;
    p.w_q.assign(18, {});
    p.w_k.assign(6, {});
    p.fit.assign(18, IndexerFit{});
    for (int32_t l = 0; l < 3; ++l) {
      for (int32_t h = 0; h < 6; ++h) {
        if (!p.is_retrieval(l, h)) continue;
        std::vector<float> w(16);
        for (float& x : w) x = u(rng) - 0.5f;
        p.w_q[l * 6 + h] = w;
        p.fit[l * 6 + h] = IndexerFit{1.5, 0.25, 0.5, 0.875};
        std::vector<float>& wk = p.w_k[l * 2 + h / 3];
        if (wk.empty()) {
          wk.resize(16);
          for (float& x : wk) x = u(rng) * 1e-3f + 0.1f;
        }
      }
    }
  }
  return p;
}

TEST(HeadPlan, JsonRoundTripIsExact) {
  for (bool ix : {false, true}) {
    const HeadPlan p = sample_plan(ix);
    ASSERT_TRUE(validate_head_plan(p)) << validate_head_plan(p).message();
    auto q = head_plan_from_json(head_plan_to_json(p));
    ASSERT_TRUE(q) << q.message();
    EXPECT_EQ(q->shape, p.shape);
    EXPECT_EQ(q->retrieval, p.retrieval);
    EXPECT_EQ(q->scores, p.scores);  // floats survive bit-exactly
    EXPECT_EQ(q->ratio, p.ratio);
    EXPECT_EQ(q->seed, p.seed);
    EXPECT_EQ(q->model_name, "tiny");
    EXPECT_EQ(q->ctx, 2048);
    EXPECT_EQ(q->d_idx, p.d_idx);
    EXPECT_EQ(q->w_q, p.w_q);
    EXPECT_EQ(q->w_k, p.w_k);
    if (ix) {
      EXPECT_EQ(q->fit[0].kl_fit, p.fit[0].kl_fit);
      for (int32_t l = 0; l < 3; ++l) {
        for (int32_t h = 0; h < 6; ++h) {
          EXPECT_EQ(q->indexer_q(l, h) != nullptr, p.is_retrieval(l, h));
          EXPECT_EQ(q->indexer_k(l, h / 3) != nullptr, p.kv_group_full(l, h / 3));
        }
      }
    } else {
      EXPECT_FALSE(q->has_indexer());
      EXPECT_EQ(q->indexer_q(0, 0), nullptr);
    }
    EXPECT_EQ(head_plan_to_json(*q), head_plan_to_json(p));
  }
}

TEST(HeadPlan, ChoosesTheTopShareAndMapsKvGroups) {
  HeadPlan p = HeadPlan::empty(HeadShape{2, 4, 2, 16});
  p.scores = {0.1f, 0.9f, 0.0f, 0.0f, /* layer 1 */ 0.2f, 0.3f, 0.0f, 0.8f};
  choose_retrieval_heads(p, 0.25f);  // 2 of 8
  EXPECT_EQ(p.retrieval, (std::vector<uint8_t>{0, 1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(p.n_retrieval(), 2);
  EXPECT_EQ(p.n_retrieval(1), 1);
  EXPECT_DOUBLE_EQ(p.retrieval_share(), 0.25);
  EXPECT_TRUE(p.kv_group_full(0, 0));
  EXPECT_FALSE(p.kv_group_full(0, 1));
  EXPECT_FALSE(p.kv_group_full(1, 0));
  EXPECT_TRUE(p.kv_group_full(1, 1));
  EXPECT_EQ(p.n_kv_full(), 2);
  choose_retrieval_heads(p, 0.0f);  // at least one
  EXPECT_EQ(p.n_retrieval(), 1);
  EXPECT_TRUE(p.is_retrieval(0, 1));
  choose_retrieval_heads(p, 1.0f);
  EXPECT_EQ(p.n_kv_full(), 4);
}

// Edits the JSON of a valid plan and expects an error containing `needle`.
void expect_error(const std::function<void(json&)>& edit, const std::string& needle) {
  json j = json::parse(head_plan_to_json(sample_plan(true)));
  edit(j);
  auto r = head_plan_from_json(j.dump());
  ASSERT_FALSE(r) << "accepted an edit expected to fail with: " << needle;
  EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
}

TEST(HeadPlan, BadInputIsOneClearError) {
  EXPECT_FALSE(head_plan_from_json("{not json"));
  EXPECT_NE(head_plan_from_json("{not json").message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(head_plan_from_json("[1,2]").message().find("JSON object"), std::string::npos);
  expect_error([](json& j) { j["format"] = "other"; }, "format");
  expect_error([](json& j) { j["version"] = 9; }, "version 9");
  expect_error([](json& j) { j.erase("shape"); }, "shape");
  expect_error([](json& j) { j["shape"]["n_head"] = 5; }, "multiple of n_head_kv");
  expect_error([](json& j) { j["shape"]["n_layer"] = "3"; }, "n_layer");
  expect_error([](json& j) { j["retrieval"].erase(0); }, "has 2 layers");
  expect_error([](json& j) { j["retrieval"][1].push_back(0); },
               "\"retrieval\"[1] must have 6 entries");
  expect_error([](json& j) { j["retrieval"][2][3] = 2; }, "\"retrieval\"[2][3] must be 0 or 1");
  expect_error([](json& j) { j["retrieval"][0][0] = 0.5; }, "must be 0 or 1");
  expect_error([](json& j) { j["scores"][0][1] = "x"; }, "\"scores\"[0][1] is not a finite float");
  // a double past float's range was cast to float (undefined behaviour) before it was checked
  expect_error([](json& j) { j["scores"][0][1] = 1e300; },
               "\"scores\"[0][1] is not a finite float");
  expect_error([](json& j) { j.erase("scores"); }, "missing \"scores\"");
  expect_error([](json& j) { j["indexer"]["d_idx"] = 99; }, "d_idx = 99");
  expect_error([](json& j) { j["indexer"]["layers"].erase(0); }, "array of 3 layers");
  expect_error(
      [](json& j) {
        for (auto& w : j["indexer"]["layers"][0]["w_q"]) {
          if (!w.is_null()) w.erase(0);
        }
        for (auto& w : j["indexer"]["layers"][1]["w_q"]) {
          if (!w.is_null()) w.erase(0);
        }
        for (auto& w : j["indexer"]["layers"][2]["w_q"]) {
          if (!w.is_null()) w.erase(0);
        }
      },
      "expected 16");
  expect_error(
      [](json& j) {
        for (auto& L : j["indexer"]["layers"]) {
          for (auto& w : L["w_k"]) w = nullptr;
        }
      },
      "has W_Q but its KV head has no W_K");
}

// head_plan_fuzz found the record's optional fields throwing json::type_error out of the
// parser (a string where a number belongs: the CLI died with terminate) and 1e300 cast to int
// (undefined behaviour). Each is now an error naming the field.
TEST(HeadPlan, RecordFieldsOfTheWrongTypeAreErrors) {
  expect_error([](json& j) { j["indexer"]["recall_k"] = "x"; }, "\"recall_k\" must be an integer");
  expect_error([](json& j) { j["indexer"]["recall_of"] = 1e300; }, "\"recall_of\" must be");
  expect_error([](json& j) { j["indexer"]["fit_ms"] = "x"; }, "\"fit_ms\" must be a number");
  expect_error([](json& j) { j["calibration"]["samples"] = 1e300; }, "\"samples\" must be");
  expect_error([](json& j) { j["calibration"]["ctx"] = 1ll << 40; }, "\"ctx\" must be");
  expect_error([](json& j) { j["calibration"]["seed"] = -1; }, "\"seed\" must be");
  expect_error([](json& j) { j["calibration"]["ratio"] = "x"; }, "\"ratio\" must be a number");
  expect_error([](json& j) { j["calibration"]["score"] = 5; }, "\"score\" must be a string");
  expect_error([](json& j) { j["model"]["name"] = 5; }, "head plan model: \"name\"");
  expect_error(
      [](json& j) {
        for (auto& L : j["indexer"]["layers"])
          for (auto& f : L["fit"])
            if (f.is_object()) f["kl_init"] = json::array();
      },
      "\"kl_init\" must be a number");
  // A number too large for a double is a JSON error, not an escaping json::out_of_range.
  EXPECT_NE(head_plan_from_json(R"({"format": 7e777})").message().find("not valid JSON"),
            std::string::npos);
  // Absent or null optional fields are fine; a seed above 2^63 is kept.
  json j = json::parse(head_plan_to_json(sample_plan(true)));
  j["calibration"]["samples"] = nullptr;
  j["calibration"]["seed"] = 18446744073709551615ull;
  j["indexer"].erase("recall_k");
  auto r = head_plan_from_json(j.dump());
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->seed, 18446744073709551615ull);
}

TEST(HeadPlan, ShapeMustMatchTheModel) {
  const HeadPlan p = sample_plan(false);
  EXPECT_TRUE(check_head_plan_shape(p, HeadShape{3, 6, 2, 8}));
  auto st = check_head_plan_shape(p, HeadShape{30, 6, 2, 8});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.message(), "head plan has 3 layers, the model 30");
  EXPECT_FALSE(check_head_plan_shape(p, HeadShape{3, 9, 2, 8}));
  EXPECT_FALSE(check_head_plan_shape(p, HeadShape{3, 6, 3, 8}));
  EXPECT_FALSE(check_head_plan_shape(p, HeadShape{3, 6, 2, 64}));

  const std::string path =
      (std::filesystem::temp_directory_path() / "sieve_head_plan_test.json").string();
  ASSERT_TRUE(save_head_plan(p, path));
  const HeadShape model{3, 6, 2, 8}, other{4, 6, 2, 8};
  EXPECT_TRUE(load_head_plan(path, &model));
  auto bad = load_head_plan(path, &other);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("3 layers, the model 4"), std::string::npos) << bad.message();
  EXPECT_NE(load_head_plan(path + ".missing").message().find("cannot read"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve
