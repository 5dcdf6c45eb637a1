// Policies in the harness: the --policy/--set list, labels, the server's "sieve" object and
// when a warm prefix cache is allowed.
#include "eval/policies.h"

#include <gtest/gtest.h>

namespace sieve::eval {
namespace {

using json = nlohmann::json;

std::vector<std::string> labels(const std::vector<PolicyPtr>& v) {
  std::vector<std::string> out;
  for (const PolicyPtr& p : v) out.push_back(policy_label(p));
  return out;
}

TEST(PolicyList, NamesKnobsAndSetsBecomeConfigs) {
  const std::vector<std::string> items = {"dense", "tokenselect", "tokenselect:top_k=512",
                                          "quest:block=32:top_k=256"};
  auto l = make_policy_list(items, std::vector<std::string>{"sinks=64"});
  ASSERT_TRUE(l.ok()) << l.message();
  ASSERT_EQ(l->size(), 4u);
  // --set goes to every sparse entry, never to dense; an entry's own knobs come after it.
  EXPECT_EQ((*l)[0]->describe(), "dense");
  EXPECT_EQ((*l)[1]->sinks, 64);
  EXPECT_EQ((*l)[2]->top_k, 512);
  EXPECT_EQ((*l)[2]->sinks, 64);
  EXPECT_EQ((*l)[3]->block, 32);
  EXPECT_EQ((*l)[3]->preset, "quest");
  // Labels are describe(): the preset and the knobs that differ from it.
  EXPECT_EQ(labels(*l)[2], (*l)[2]->describe());
  EXPECT_NE(labels(*l)[1], labels(*l)[2]);
  EXPECT_NE(labels(*l)[2].find("top_k=512"), std::string::npos);
  EXPECT_EQ(policy_label(nullptr), "dense");
}

TEST(PolicyList, ErrorsListTheValidNamesAndKnobs) {
  auto bad = make_policy_list(std::vector<std::string>{"dense", "tokensel"}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("tokensel"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("tokenselect"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("streaming"), std::string::npos) << bad.message();

  auto knob =
      make_policy_list(std::vector<std::string>{"tokenselect"}, std::vector<std::string>{"topk=5"});
  ASSERT_FALSE(knob.ok());
  EXPECT_NE(knob.message().find("topk"), std::string::npos) << knob.message();
  EXPECT_NE(knob.message().find("top_k"), std::string::npos) << knob.message();

  auto value = make_policy_list(std::vector<std::string>{"tokenselect:top_k=lots"}, {});
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.message().find("top_k"), std::string::npos) << value.message();

  auto twice = make_policy_list(std::vector<std::string>{"tokenselect", "tokenselect"}, {});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("twice"), std::string::npos);

  auto dense_only =
      make_policy_list(std::vector<std::string>{"dense"}, std::vector<std::string>{"top_k=9"});
  ASSERT_FALSE(dense_only.ok());
  EXPECT_NE(dense_only.message().find("top_k=9"), std::string::npos);

  EXPECT_FALSE(make_policy_list(std::vector<std::string>{}, {}).ok());
}

// What the server receives must rebuild the same policy on its side.
TEST(PolicyList, RequestObjectRoundTripsThroughTheServersParser) {
  std::vector<std::string> items;
  for (std::string_view p : policy_presets()) {
    if (p != "rtpurbo")
      items.emplace_back(p);  // rtpurbo needs a head plan file (engine rtpurbo_test)
  }
  items.push_back("tokenselect:top_k=1024:theta=0.75:selection_cache=false");
  items.push_back("stca:keep_mass=0.8:decay=0.95");
  auto l = make_policy_list(items, {});
  ASSERT_TRUE(l.ok()) << l.message();
  for (const PolicyPtr& p : *l) {
    const json j = policy_request_json(*p);
    ASSERT_TRUE(j.contains("policy")) << j.dump();
    EXPECT_EQ(j["policy"], p->preset);
    auto back = policy_from_json_text(j.dump(), "dense");
    ASSERT_TRUE(back.ok()) << j.dump() << ": " << back.message();
    EXPECT_EQ(back->describe(), p->describe()) << j.dump();
  }
  const json ts = policy_request_json(*(*l)[l->size() - 2]);
  EXPECT_EQ(ts["top_k"], 1024);  // typed, not strings
  EXPECT_EQ(ts["selection_cache"], false);
  EXPECT_TRUE(ts["theta"].is_number_float());
  EXPECT_EQ(policy_request_json(*make_policy("dense")), (json{{"policy", "dense"}}));
}

TEST(PolicyList, RequestJsonNamesFilesAsTheServerRegistersThem) {
  // A server refuses a path in a request (it opens only the files registered at start, a plain
  // FILE under its file name): eval --server sends that name, never the path.
  auto p = make_policy("tokenselect");
  ASSERT_TRUE(p.ok());
  p->head_plan = "/plans/qwen-0.5b.heads.json";
  p->sketch_basis = "bases/basis.json";
  const json j = policy_request_json(*p);
  EXPECT_EQ(j["head_plan"], "qwen-0.5b.heads") << j.dump();
  EXPECT_EQ(j["sketch_basis"], "basis") << j.dump();
}

TEST(PolicyList, HeadPlanGoesToEveryRtpurboItemOnly) {
  std::vector<std::string> items = {"dense", "rtpurbo", "rtpurbo:top_p=0.8", "tokenselect"};
  ASSERT_TRUE(attach_head_plan(items, "h.json", "--policy").ok());
  EXPECT_EQ(items[0], "dense");
  EXPECT_EQ(items[1], "rtpurbo:head_plan=h.json");
  EXPECT_EQ(items[2], "rtpurbo:top_p=0.8:head_plan=h.json");
  EXPECT_EQ(items[3], "tokenselect");
  std::vector<std::string> none = {"dense", "tokenselect"};
  const Status s = attach_head_plan(none, "h.json", "--policies");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--policies dense,rtpurbo"), std::string::npos) << s.message();
}

TEST(PolicyList, PrefixReuseOnlyWhenTheKvCannotDiffer) {
  const auto make = [](const char* n) {
    return std::make_shared<const PolicyConfig>(*make_policy(n));
  };
  EXPECT_TRUE(policy_allows_prefix_reuse(nullptr));
  EXPECT_TRUE(policy_allows_prefix_reuse(make("dense")));
  EXPECT_TRUE(policy_allows_prefix_reuse(make("streaming")));  // dense prefill, nothing evicted
  for (const char* n : {"auto", "tokenselect", "quest", "h2o", "stca", "sketch"}) {
    EXPECT_FALSE(policy_allows_prefix_reuse(make(n))) << n;
  }
}

}  // namespace
}  // namespace sieve::eval
