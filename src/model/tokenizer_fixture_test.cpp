// Golden tokenizer fixtures from llama.cpp (tests/fixtures/tokenizer_*.json, made by
// tools/reference/make_fixtures.py with llama-cpp-python): every case must give identical ids.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/tokenizer_test_util.h"

namespace sieve {
namespace {

void check_fixture(const char* fixture, const char* model_file) {
  const std::string path = std::string(SIEVE_SOURCE_DIR) + "/tests/fixtures/" + fixture;
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " not found (tools/reference/make_fixtures.py makes it)";
  const Tokenizer* t = test_tokenizer(model_file);
  if (!t) GTEST_SKIP() << model_file << " not found";
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& cases = j.at("cases");
  ASSERT_GT(cases.size(), 0u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const bool add_bos = c.at("add_bos").get<bool>();
    const bool special = c.at("parse_special").get<bool>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = t->encode(text, add_bos, special);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << fixture << " case '" << c.value("label", "?") << "' add_bos=" << add_bos
                    << " parse_special=" << special << "\n  want: " << testing::PrintToString(want)
                    << "\n  got:  " << testing::PrintToString(got);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";
}

TEST(TokenizerFixture, SmolLM2MatchesLlamaCpp) {
  check_fixture("tokenizer_smollm2.json", "smollm2.gguf");
}

TEST(TokenizerFixture, Gemma3MatchesLlamaCpp) {
  check_fixture("tokenizer_gemma3.json", "gemma3-270m.gguf");
}

TEST(TokenizerFixture, Qwen25Coder05bMatchesLlamaCpp) {
  check_fixture("tokenizer_qwen2.5-coder-0.5b.json", "qwen2.5-coder-0.5b.gguf");
}

}  // namespace
}  // namespace sieve
