// Task generators: determinism, the suites' templates, needles where they belong, and the
// length search.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "eval/eval_test_util.h"
#include "eval/prompt.h"
#include "eval/task.h"
#include "eval/word_lists.h"

namespace sieve::eval {
namespace {

TaskContext essays_ctx() {
  static std::shared_ptr<const EssayCorpus> c = [] {
    auto path = find_data_file("haystack/essays.txt", std::string(SIEVE_SOURCE_DIR) + "/data");
    if (!path) throw std::runtime_error(path.message());
    auto r = EssayCorpus::load(*path);
    if (!r) throw std::runtime_error(r.message());
    return *r;
  }();
  TaskContext tc;
  tc.essays = c;
  return tc;
}

// Sample `index` of a plan (the niah grid's at depth 50).
SampleSpec spec_for(const Task& t, int32_t ctx, int32_t index, uint64_t seed = 42) {
  return plan_samples(t, ctx, index + 1, index + 1, std::vector<double>{50.0}, seed)
      .at(static_cast<size_t>(index));
}

size_t count_of(std::string_view hay, std::string_view needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

TEST(Tasks, RegistryHasEverySuiteTask) {
  const std::vector<std::string> want = {"niah_single_1",
                                         "niah_single_2",
                                         "niah_single_3",
                                         "niah_multikey_1",
                                         "niah_multikey_2",
                                         "niah_multikey_3",
                                         "niah_multivalue",
                                         "niah_multiquery",
                                         "vt",
                                         "cwe",
                                         "fwe",
                                         "passkey",
                                         "number_string",
                                         "kv_retrieval",
                                         "niah"};
  std::vector<std::string> have;
  for (const auto& t : all_tasks()) have.push_back(t->info().name);
  EXPECT_EQ(have, want);
}

TEST(Tasks, GroupsExpandAndUnknownNamesAreErrors) {
  auto r = expand_task_names(std::vector<std::string>{"ib", "vt", "passkey"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<std::string>{"vt", "passkey", "number_string", "kv_retrieval"}));
  auto ruler = expand_task_names(std::vector<std::string>{"ruler"});
  ASSERT_TRUE(ruler.ok());
  EXPECT_EQ(ruler->size(), 11u);
  auto all = expand_task_names(std::vector<std::string>{"all"});
  EXPECT_EQ(all->size(), all_tasks().size());
  auto bad = expand_task_names(std::vector<std::string>{"qa_1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("qa_1"), std::string::npos);
  EXPECT_NE(bad.message().find("niah_single_1"), std::string::npos);
}

TEST(Tasks, EveryTaskIsDeterministicAndSeedSensitive) {
  const TaskContext tc = essays_ctx();
  for (const auto& t : all_tasks()) {
    const SampleSpec s = spec_for(*t, 4096, 0);
    const int64_t units = std::max<int64_t>(t->min_units(), 40);
    auto a = t->build(s, units, tc), b = t->build(s, units, tc);
    ASSERT_TRUE(a.ok()) << t->info().name << ": " << a.message();
    EXPECT_EQ(a->input, b->input) << t->info().name;
    EXPECT_EQ(a->answers, b->answers) << t->info().name;
    EXPECT_FALSE(a->answers.empty()) << t->info().name;
    const SampleSpec other = spec_for(*t, 4096, 1);
    auto c = t->build(other, units, tc);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(a->answers, c->answers) << t->info().name;
    // The needles do not depend on the amount of haystack (the length search relies on it).
    auto bigger = t->build(s, units * 2, tc);
    ASSERT_TRUE(bigger.ok());
    EXPECT_EQ(bigger->answers, a->answers) << t->info().name;
    EXPECT_GT(bigger->input.size(), a->input.size()) << t->info().name;
  }
}

TEST(Tasks, NiahSingleUsesRulersSingularTemplate) {
  const Task* t = find_task("niah_single_1");
  auto r = t->build(spec_for(*t, 4096, 0), 30, {});
  ASSERT_TRUE(r.ok());
  const std::regex head(
      "^A special magic number is hidden within the following text\\. Make sure to memorize it\\. "
      "I will "
      "quiz you about the number afterwards\\.\n");
  EXPECT_TRUE(std::regex_search(r->input, head)) << r->input.substr(0, 200);
  const std::regex tail(
      "\nWhat is the special magic number for ([a-z]+-[a-z]+) mentioned in the provided text\\?$");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r->input, m, tail));
  const std::string k = m[1];
  EXPECT_EQ(r->answer_prefix,
            " The special magic number for " + k + " mentioned in the provided text is");
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_TRUE(std::regex_match(r->answers[0], std::regex("[1-9][0-9]{6}")));
  // The needle keeps the plural, as RULER's does.
  EXPECT_EQ(count_of(r->input,
                     "One of the special magic numbers for " + k + " is: " + r->answers[0] + "."),
            1u);
  EXPECT_EQ(count_of(r->input,
                     "The grass is green. The sky is blue. The sun is yellow. Here we go. There "
                     "and back again."),
            30u);
}

TEST(Tasks, NiahMultiqueryAndMultivalueUsePluralTemplates) {
  const TaskContext tc = essays_ctx();
  const Task* mq = find_task("niah_multiquery");
  auto r = mq->build(spec_for(*mq, 4096, 0), 2000, tc);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->input.rfind("Some special magic numbers are hidden within the following text.", 0),
            0u);
  std::smatch m;
  const std::regex q(
      "for ([a-z]+-[a-z]+), ([a-z]+-[a-z]+), ([a-z]+-[a-z]+), and ([a-z]+-[a-z]+) mentioned in the "
      "provided text are$");
  ASSERT_TRUE(std::regex_search(r->answer_prefix, m, q)) << r->answer_prefix;
  EXPECT_EQ(r->answers.size(), 4u);
  for (int i = 1; i <= 4; ++i)
    EXPECT_EQ(count_of(r->input, "One of the special magic numbers for " + m[i].str() + " is: "),
              1u);

  const Task* mv = find_task("niah_multivalue");
  auto v = mv->build(spec_for(*mv, 4096, 0), 2000, tc);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->answers.size(), 4u);
  for (const std::string& a : v->answers) EXPECT_EQ(count_of(v->input, "is: " + a + "."), 1u);
  EXPECT_NE(v->input.find("What are all the special magic numbers for"), std::string::npos);
}

TEST(Tasks, NiahMultikeyDistractorsNeverReuseTheQueriedKey) {
  for (const char* name : {"niah_multikey_2", "niah_multikey_3"}) {
    const Task* t = find_task(name);
    auto r = t->build(spec_for(*t, 4096, 2), 200, {});
    ASSERT_TRUE(r.ok());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r->answer_prefix, m, std::regex("for (\\S+) mentioned")));
    const std::string key = m[1];
    EXPECT_EQ(count_of(r->input, "for " + key + " is: "), 1u) << name;
    EXPECT_EQ(count_of(r->input, "One of the special magic"), 201u) << name;
  }
}

TEST(Tasks, EssayNeedlesSitBetweenSentences) {
  const TaskContext tc = essays_ctx();
  const Task* t = find_task("niah_single_2");
  for (int i = 0; i < 5; ++i) {
    auto r = t->build(spec_for(*t, 8192, i), 3000, tc);
    ASSERT_TRUE(r.ok());
    const size_t p = r->input.find("One of the special magic numbers for ");
    ASSERT_NE(p, std::string::npos);
    // Preceded by the end of a sentence (or the start of the context).
    const std::string before = r->input.substr(p - 2, 2);
    EXPECT_TRUE(before == ". " || before == "\n " || before[1] == '\n' || before == "? " ||
                before == "! ")
        << before;
    EXPECT_GE(r->depth, 0);
    EXPECT_LE(r->depth, 100);
  }
}

TEST(Tasks, VariableTrackingChainIsComplete) {
  const Task* t = find_task("vt");
  auto r = t->build(spec_for(*t, 4096, 0), 60, {});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->answers.size(), 5u);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r->answer_prefix, m,
                        std::regex("5 variables are assigned the value ([0-9]{5}), they are: $")));
  const std::string value = m[1];
  // The chain after the one-shot example: VAR A0 = value, then VAR Aj+1 = VAR Aj, in order.
  const size_t body = r->input.rfind("Memorize and track");
  ASSERT_NE(body, std::string::npos);
  const std::string text = r->input.substr(body);
  size_t pos = text.find("VAR " + r->answers[0] + " = " + value);
  ASSERT_NE(pos, std::string::npos);
  for (size_t j = 1; j < 5; ++j) {
    const size_t next = text.find("VAR " + r->answers[j] + " = VAR " + r->answers[j - 1]);
    ASSERT_NE(next, std::string::npos) << j;
    EXPECT_GT(next, pos);
    pos = next;
  }
  // The one-shot example comes first, with its own answer written out.
  EXPECT_LT(r->input.find("they are: "), body);
}

TEST(Tasks, CommonWordsRepeatAsRulerSpecifies) {
  const Task* t = find_task("cwe");
  for (int32_t ctx : {2048, 4096}) {
    auto r = t->build(spec_for(*t, ctx, 0), 100, {});
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->answers.size(), 10u);
    const size_t body = r->input.rfind("Below is a numbered list");
    const std::string list = r->input.substr(body);
    const int want = ctx >= 4096 ? 30 : 6;
    for (const std::string& w : r->answers) {
      EXPECT_EQ(count_of(list, ". " + w + " ") + count_of(list, ". " + w + "\n"),
                static_cast<size_t>(want))
          << w;
    }
    EXPECT_NE(r->input.find("Answer: The top 10 words that appear most often in the list are: 1. "),
              std::string::npos);
  }
}

TEST(Tasks, FrequentWordsAnswersAreTheNextThreeMostFrequent) {
  const Task* t = find_task("fwe");
  auto r = t->build(spec_for(*t, 4096, 0), 3000, {});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->answers.size(), 3u);
  const size_t a = r->input.find("coded words. ") + 13, b = r->input.find("\nQuestion:");
  std::map<std::string, int> cnt;
  std::istringstream in(r->input.substr(a, b - a));
  std::string w;
  while (in >> w) cnt[w]++;
  std::vector<std::pair<int, std::string>> byc;
  for (auto& [k, v] : cnt) {
    if (k != "...") byc.emplace_back(v, k);
  }
  std::sort(byc.rbegin(), byc.rend());
  ASSERT_GE(byc.size(), 4u);
  EXPECT_EQ(byc[0].second, r->answers[0]);
  EXPECT_EQ(byc[1].second, r->answers[1]);
  EXPECT_EQ(byc[2].second, r->answers[2]);
  EXPECT_GT(cnt["..."], byc[0].first);
}

TEST(Tasks, PasskeyAndNumberStringFollowInfiniteBench) {
  const Task* pk = find_task("passkey");
  auto specs = plan_samples(*pk, 4096, 5, 1, {}, 42);
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_DOUBLE_EQ(specs[0].target_depth, 50);
  EXPECT_DOUBLE_EQ(specs[1].target_depth, 0);
  EXPECT_DOUBLE_EQ(specs[2].target_depth, 100);
  auto r0 = pk->build(specs[1], 100, {});
  auto r4 = pk->build(specs[2], 100, {});
  ASSERT_TRUE(r0.ok() && r4.ok());
  EXPECT_LT(r0->depth, 1.0);
  EXPECT_GT(r4->depth, 98.0);
  EXPECT_TRUE(std::regex_match(r0->answers[0], std::regex("[0-9]{5}")));
  EXPECT_NE(r0->input.find("The pass key is " + r0->answers[0] + ". Remember it. " +
                           r0->answers[0] + " is the pass key.\n"),
            std::string::npos);
  EXPECT_EQ(
      r0->input.rfind("There is an important info hidden inside a lot of irrelevant text.", 0), 0u);
  EXPECT_EQ(r0->answer_prefix, "\n\nThe pass key is");

  const Task* ns = find_task("number_string");
  for (int i = 0; i < 10; ++i) {
    auto r = ns->build(plan_samples(*ns, 4096, 10, 1, {}, 7)[static_cast<size_t>(i)], 50, {});
    ASSERT_TRUE(r.ok());
    const std::string& k = r->answers[0];
    ASSERT_EQ(k.size(), 10u);
    int repeats = 0;
    for (size_t j = 1; j < k.size(); ++j) repeats += k[j] == k[j - 1];
    EXPECT_GE(repeats, 1) << k;  // every insertion duplicates a digit next to itself
  }
}

TEST(Tasks, KvRetrievalIsValidJsonWithTheGoldPairAtDepth) {
  const Task* t = find_task("kv_retrieval");
  auto specs = plan_samples(*t, 8192, 3, 1, {}, 42);
  for (const SampleSpec& s : specs) {
    auto r = t->build(s, 40, {});
    ASSERT_TRUE(r.ok());
    const size_t a = r->input.find('{'), b = r->input.rfind('}');
    auto j = nlohmann::json::parse(r->input.substr(a, b - a + 1), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j.size(), 40u);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r->input, m, std::regex("Key: \"([0-9a-f-]{36})\"$")));
    ASSERT_TRUE(j.contains(m[1].str()));
    EXPECT_EQ(j[m[1].str()], r->answers[0]);
    EXPECT_NEAR(r->depth, s.target_depth, 4.0);
  }
}

TEST(Tasks, NiahGridPlansDepthsAndPlacesTheNeedleThere) {
  const TaskContext tc = essays_ctx();
  const Task* t = find_task("niah");
  const std::vector<double> depths = {0, 50, 100};
  auto specs = plan_samples(*t, 4096, 5, 2, depths, 42);
  ASSERT_EQ(specs.size(), 6u);
  for (const SampleSpec& s : specs) {
    auto r = t->build(s, 3000, tc);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->depth, s.target_depth, 2.0) << s.target_depth;
    EXPECT_NE(r->input.find("The special magic number for "), std::string::npos);
  }
}

// The pad tops the haystack up without touching the needles: same answers, each still in the
// prompt once, and a prompt that only grows with the pad.
TEST(Tasks, PadGrowsThePromptAndKeepsTheNeedles) {
  const TaskContext tc = essays_ctx();
  testing::WordTokenizer tok;
  int padded = 0;
  for (const auto& t : all_tasks()) {
    if (t->max_pad() == 0) continue;
    ++padded;
    const SampleSpec s = spec_for(*t, 4096, 1);
    const int64_t units = std::max<int64_t>(t->min_units(), 60);
    auto base = t->build(s, units, 0, tc);
    ASSERT_TRUE(base.ok()) << t->info().name;
    size_t last = tok.encode(base->input, true, false).size();
    for (int64_t p = 1; p <= t->max_pad(); ++p) {
      auto r = t->build(s, units, p, tc);
      ASSERT_TRUE(r.ok()) << t->info().name;
      EXPECT_EQ(r->answers, base->answers) << t->info().name << " pad " << p;
      EXPECT_EQ(r->answer_prefix, base->answer_prefix) << t->info().name;
      EXPECT_GT(r->input.size(), base->input.size()) << t->info().name << " pad " << p;
      const size_t n = tok.encode(r->input, true, false).size();
      EXPECT_GE(n, last) << t->info().name << " pad " << p;
      last = n;
      for (const std::string& a : r->answers) {
        EXPECT_GE(count_of(r->input, a), 1u) << t->info().name << " " << a;
        EXPECT_EQ(count_of(r->input, a), count_of(base->input, a)) << t->info().name << " " << a;
      }
    }
    EXPECT_GT(last, tok.encode(base->input, true, false).size()) << t->info().name;
  }
  EXPECT_GE(padded, 8);
}

TEST(Tasks, SweepDepthsCoverTheRangeEvenlyForAnyCount) {
  const std::vector<double> first = {50, 0, 100, 25, 75, 12.5, 62.5, 37.5, 87.5};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_DOUBLE_EQ(sweep_depth(i), first[i]) << i;
  // 2^k + 1 samples: exactly the even grid; any count: no gap wider than twice the even one.
  std::vector<double> d;
  for (int i = 0; i < 17; ++i) d.push_back(sweep_depth(i));
  std::sort(d.begin(), d.end());
  for (int i = 0; i < 17; ++i) EXPECT_DOUBLE_EQ(d[i], 100.0 * i / 16);
  for (int n = 2; n <= 40; ++n) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(sweep_depth(i));
    std::sort(v.begin(), v.end());
    EXPECT_EQ(std::adjacent_find(v.begin(), v.end()), v.end()) << n;  // distinct
    for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i] - v[i - 1], 200.0 / (n - 1)) << n;
  }
}

// A sample is the same whatever else is planned: raising n or adding depths only adds samples,
// so a resumed run with a larger plan reuses every finished one.
TEST(Tasks, PlansOnlyGrow) {
  for (const auto& t : all_tasks()) {
    const auto small = plan_samples(*t, 2048, 3, 1, std::vector<double>{0, 50}, 42);
    const auto big = plan_samples(*t, 2048, 8, 2, std::vector<double>{0, 25, 50, 100}, 42);
    for (const SampleSpec& s : small) {
      const bool found = std::any_of(big.begin(), big.end(), [&](const SampleSpec& b) {
        return b.index == s.index && b.seed == s.seed && b.target_depth == s.target_depth &&
               sample_id(b) == sample_id(s);
      });
      EXPECT_TRUE(found) << t->info().name << " " << sample_id(s);
    }
    std::set<std::string> ids;
    for (const SampleSpec& b : big) EXPECT_TRUE(ids.insert(sample_id(b)).second) << sample_id(b);
  }
  EXPECT_EQ(sample_id(plan_samples(*find_task("niah"), 4096, 1, 2, std::vector<double>{25}, 1)[1]),
            "niah/4096/d25/1");
}

TEST(Tasks, FillTemplateReplacesKnownNamesOnly) {
  EXPECT_EQ(fill_template("a {x} b {y} {z}", {{"x", "1"}, {"y", "{x}"}}), "a 1 b {x} {z}");
}

// The length search against a word-count tokenizer.
TEST(LengthFit, FindsTheLargestHaystackThatFits) {
  const TaskContext tc = essays_ctx();
  testing::WordTokenizer tok;
  const PromptEncoder enc(tok, PromptFormat::raw);
  const RenderFn render = [&](const TaskText& t) { return enc.render(t); };
  for (const auto& t : all_tasks()) {
    for (int32_t ctx : {1024, 3000}) {
      const SampleSpec s = spec_for(*t, ctx, 0);
      auto f = fit_sample(*t, s, tc, render);
      ASSERT_TRUE(f.ok()) << t->info().name << ": " << f.message();
      const int64_t budget = ctx - t->info().max_new_tokens;
      const auto n = static_cast<int64_t>(f->prompt.tokens.size());
      EXPECT_LE(n, budget) << t->info().name;
      // Whole units, then the pad: one token short at most (a pad piece that needs its own
      // separator costs two).
      EXPECT_GE(n, budget - 1) << t->info().name << " ctx " << ctx << " pad " << f->pad;
      // One more unit no longer fits: the prompt is as long as it can be.
      auto more = t->build(s, f->units + 1, tc);
      ASSERT_TRUE(more.ok());
      auto more_p = enc.render(*more);
      EXPECT_GT(static_cast<int64_t>(more_p->tokens.size()), budget)
          << t->info().name << " ctx " << ctx;
      EXPECT_LE(f->probes, 40) << t->info().name;
    }
  }
}

// Same seed, same prompts: every task's fitted prompts at two lengths, hashed. A change here
// means a generator makes other samples than before; bump k_generator_version (records.h) so
// that resumed runs stop matching old records, then update the hash.
TEST(LengthFit, PromptsAreAFunctionOfTheSeed) {
  const TaskContext tc = essays_ctx();
  testing::WordTokenizer tok;
  const PromptEncoder enc(tok, PromptFormat::raw);
  const RenderFn render = [&](const TaskText& t) { return enc.render(t); };
  const auto digest = [&](uint64_t seed) {
    uint64_t h = fnv1a64("");
    for (const auto& t : all_tasks()) {
      for (int32_t ctx : {1024, 4096}) {
        for (const SampleSpec& s : plan_samples(*t, ctx, 1, 1, std::vector<double>{60}, seed)) {
          auto f = fit_sample(*t, s, tc, render);
          EXPECT_TRUE(f.ok()) << t->info().name << ": " << f.message();
          if (!f) continue;
          h = fnv1a64(f->prompt.text, h);
          for (const std::string& a : f->text.answers) h = fnv1a64(a, h);
        }
      }
    }
    return h;
  };
  const uint64_t a = digest(42);
  EXPECT_EQ(a, digest(42));
  EXPECT_NE(a, digest(43));
  EXPECT_EQ(fmt::format("{:016x}", a), "8327c6e74e003494")
      << "generator output changed: bump k_generator_version and update this hash";
}

TEST(LengthFit, TooShortAContextIsAnErrorNamingTheTask) {
  testing::WordTokenizer tok;
  const PromptEncoder enc(tok, PromptFormat::raw);
  const Task* t = find_task("vt");
  auto f =
      fit_sample(*t, spec_for(*t, 256, 0), {}, [&](const TaskText& x) { return enc.render(x); });
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("vt"), std::string::npos);
  EXPECT_NE(f.message().find("256"), std::string::npos);
}

}  // namespace
}  // namespace sieve::eval
