// build_policy: one order of precedence for every source of knobs.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sparse/policy_builder.h"

namespace sieve {
namespace {

TEST(PolicyBuilder, LaterSourcesOverrideEarlierOnes) {
  const std::string file = ::testing::TempDir() + "/policy_builder.txt";
  {
    std::ofstream f(file);
    f << "policy = tokenselect\ntop_k = 100\nsinks = 7\nlocal = 9\n";
  }
  PolicySources s;
  s.item = "tokenselect:local=11";
  s.file = file;
  s.sets = {"sinks=8", "local=10"};
  auto p = build_policy(s);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->top_k, 100);  // the file
  EXPECT_EQ(p->sinks, 8);    // --set over the file
  EXPECT_EQ(p->local, 11);   // the item's inline knob over --set
  // the item and the file must agree on the preset
  s.item = "stca";
  auto bad = build_policy(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("disagree"), std::string::npos) << bad.message();
  std::remove(file.c_str());
}

TEST(PolicyBuilder, RequestKnobsAdjustTheBaseUnlessTheyNameAPreset) {
  auto base = make_policy("tokenselect", std::vector<std::string>{"top_k=300"});
  ASSERT_TRUE(base.ok());
  PolicySources s;
  s.base = &*base;
  s.request_json = R"({"theta": 0.5})";
  auto p = build_policy(s);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->preset, "tokenselect");
  EXPECT_EQ(p->top_k, 300);  // the base's own knob stays
  EXPECT_FLOAT_EQ(p->theta, 0.5f);
  s.request_json = R"({"policy": "tokenselect", "local": 64})";
  p = build_policy(s);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->top_k, 2048);  // a named preset starts afresh
  EXPECT_EQ(p->local, 64);
  // one conversion of JSON values for every knob: a list knob takes an array
  s.request_json = R"({"policy": "uniprefill", "up_layers": [3, 5]})";
  p = build_policy(s);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->up_layers, (std::vector<int32_t>{3, 5}));
  for (const char* bad :
       {R"({"theta": {"x": 1}})", R"({"policy": 3})", "[1]", "{", R"({"no_such_knob": 1})"}) {
    s.request_json = bad;
    auto r = build_policy(s);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(PolicyBuilder, ListSetsTuneSparseItemsOnly) {
  PolicySources s;
  s.sets = {"top_k=64"};
  s.sets_skip_dense = true;
  s.item = "dense";
  auto d = build_policy(s);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_TRUE(d->is_dense());
  s.item = "tokenselect:local=32";
  auto t = build_policy(s);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->top_k, 64);
  EXPECT_EQ(t->local, 32);
  s.sets = {"nope=1"};
  auto bad = build_policy(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().rfind("--policy tokenselect:local=32: ", 0), 0u) << bad.message();
}

// A request names a registered head plan or sketch basis; a path in a request is never opened
// (issue 44: /dev/zero, a FIFO or a secret JSON file named by a request).
TEST(PolicyBuilder, RegisteredFileNameIsTheFileNameWithoutDirectoryOrExtension) {
  EXPECT_EQ(registered_file_name("/x/y/heads.json"), "heads");
  EXPECT_EQ(registered_file_name("heads.v2.json"), "heads.v2");
  EXPECT_EQ(registered_file_name("dir/.hidden"), ".hidden");
  EXPECT_EQ(registered_file_name("plain"), "plain");
}

TEST(PolicyBuilder, RequestFileKnobsNameRegisteredFilesOnly) {
  const std::string secret = ::testing::TempDir() + "/policy_builder_secret.json";
  {
    std::ofstream f(secret);
    f << "{\"api_key\": \"SECRET-TOKEN\"}";
  }
  PolicyFiles files;
  PolicySources s;
  s.files = &files;
  for (const std::string& path : {secret, std::string("/dev/zero"), std::string("/etc/passwd")}) {
    for (const char* knob : {"head_plan", "sketch_basis"}) {
      s.request_json = nlohmann::json{{"policy", "rtpurbo"}, {knob, path}}.dump();
      auto p = build_policy(s);
      ASSERT_FALSE(p.ok()) << knob << " " << path;
      EXPECT_NE(p.message().find("none registered"), std::string::npos) << p.message();
      EXPECT_EQ(p.message().find("SECRET"), std::string::npos) << p.message();
      EXPECT_EQ(p.message().find(path), std::string::npos) << p.message();
    }
  }
  // the operator's registration reads the file (bounded); its errors do not quote it
  Status st = files.add_head_plan("plan=" + secret);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().find("SECRET"), std::string::npos) << st.message();
  st = files.add_sketch_basis("b=/dev/zero");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
  EXPECT_FALSE(files.add_head_plan("bad name=x.json").ok());
  // a registered name is resolved without touching the disk
  files.head_plans["p1"] = std::make_shared<const HeadPlan>(HeadPlan::empty(HeadShape{1, 2, 1, 8}));
  s.request_json = R"({"policy": "rtpurbo", "head_plan": "p1"})";
  auto p = build_policy(s);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->head_plan, "p1");
  EXPECT_EQ(p->plan, files.head_plans["p1"]);
  s.request_json = R"({"policy": "rtpurbo", "head_plan": "p2"})";
  auto unknown = build_policy(s);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("this server has: p1"), std::string::npos) << unknown.message();
  std::remove(secret.c_str());
}

}  // namespace
}  // namespace sieve
