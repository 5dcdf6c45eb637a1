// Records, the resumable store, summaries, reports and the matrix driver (scripted runner).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>

#include "eval/eval_test_util.h"
#include "eval/matrix.h"
#include "eval/records.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "eval/summary.h"

namespace sieve::eval {
namespace {

namespace fs = std::filesystem;

// Answers every request with reply(request text); counts calls.
class ScriptedRunner final : public Runner_i {
 public:
  explicit ScriptedRunner(std::function<std::string(std::string_view)> reply)
      : reply_(std::move(reply)) {}
  Result<Completion> complete(const CompletionRequest& r) override {
    ++calls;
    Completion c;
    c.text = reply_(r.text);
    c.prompt_tokens = c.prefill_tokens = static_cast<int64_t>(r.tokens.size());
    c.completion_tokens = 3;
    c.prefill_ms = 10;
    c.decode_ms = 5;
    // A made-up figure per policy, so that tests see it travel into records and reports.
    c.selected_fraction = r.policy && !r.policy->is_dense() ? 0.25 : 1.0;
    c.policy = policy_label(r.policy);
    return c;
  }
  std::string backend() const override { return "scripted"; }
  int calls = 0;

 private:
  std::function<std::string(std::string_view)> reply_;
};

fs::path temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("sieve_eval_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

SampleRecord sample(const std::string& task, int32_t ctx, int32_t index, double score) {
  SampleRecord r;
  r.model = "m.gguf";
  r.backend = "local";
  r.format = "raw";
  r.policy = "dense";
  r.task = task;
  r.suite = task == "passkey" ? "infinitebench" : "ruler";
  r.ctx = ctx;
  r.index = index;
  r.seed = 0xfedcba9876543210ull + index;
  r.data_version = generator_tag();
  r.id = task + "/" + std::to_string(ctx) + "/" + std::to_string(index);
  r.answers = {"1234567"};
  r.output = "<b>1234567</b> & \"more\"";
  r.score = score;
  r.prompt_tokens = ctx - 100;
  r.prefill_tokens = ctx - 100;
  r.completion_tokens = 10;
  r.prefill_ms = 1000;
  r.decode_ms = 500;
  r.target_depth = task == "passkey" ? 25.0 * index : -1;
  r.depth = r.target_depth;
  return r;
}

TEST(Records, JsonRoundTripKeepsEveryField) {
  SampleRecord r = sample("vt", 2048, 3, 0.6);
  r.output = "bad utf8 \xff ok";
  r.policy = "tokenselect top_k=1024";
  r.policy_ran = "tokenselect top_k=1024";
  r.selected_fraction = 0.125;
  r.pad = 7;
  auto back = record_from_json(nlohmann::json::parse(
      to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->seed, r.seed);  // 64-bit seeds survive (stored as hex)
  EXPECT_EQ(record_key(*back), record_key(r));
  EXPECT_DOUBLE_EQ(back->score, 0.6);
  EXPECT_EQ(back->answers, r.answers);
  EXPECT_DOUBLE_EQ(back->target_depth, -1);
  EXPECT_EQ(back->policy, "tokenselect top_k=1024");
  EXPECT_EQ(back->policy_ran, r.policy_ran);
  EXPECT_DOUBLE_EQ(back->selected_fraction, 0.125);
  EXPECT_EQ(back->pad, 7);
  // A fraction the backend did not report stays unknown (null), not 0 or 1.
  r.selected_fraction = -1;
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j["selected_fraction"].is_null());
  EXPECT_DOUBLE_EQ(record_from_json(j)->selected_fraction, -1);
  EXPECT_FALSE(record_from_json(nlohmann::json::parse("{\"id\": 3}")).ok());
}

TEST(Records, ReportsKeepOnlyThisGeneratorVersion) {
  std::vector<SampleRecord> recs = {sample("vt", 1024, 0, 1), sample("vt", 1024, 1, 1),
                                    sample("vt", 1024, 2, 1)};
  recs[0].data_version = generator_tag();
  recs[1].data_version = generator_tag() + "-e0123456789abcdef";
  recs[2].data_version = "g0";
  int64_t skipped = -1;
  const auto cur = current_records(recs, &skipped);
  ASSERT_EQ(cur.size(), 2u);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(cur[1].index, 1);
  recs[0].data_version = generator_tag() + "0";  // g20 is not g2
  EXPECT_EQ(current_records(recs).size(), 1u);
}

TEST(Records, StoreResumesAndSurvivesATruncatedLine) {
  const fs::path dir = temp_dir("store");
  const std::string path = (dir / "samples.jsonl").string();
  {
    auto s = SampleStore::open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->append(sample("vt", 1024, 0, 1)).ok());
    ASSERT_TRUE((*s)->append(sample("vt", 1024, 1, 0)).ok());
  }
  {  // a run killed mid-write
    std::ofstream out(path, std::ios::app);
    out << "{\"id\": \"vt/1024/2\", \"model\": \"m.gg";
  }
  auto s = SampleStore::open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->records().size(), 2u);
  EXPECT_EQ((*s)->bad_lines(), 1);
  EXPECT_NE((*s)->find(record_key(sample("vt", 1024, 1, 0))), nullptr);
  EXPECT_EQ((*s)->find(record_key(sample("vt", 1024, 2, 0))), nullptr);
  // The next append starts on a fresh line, so the file stays readable.
  ASSERT_TRUE((*s)->append(sample("vt", 1024, 2, 1)).ok());
  auto again = SampleStore::open(path);
  EXPECT_EQ((*again)->records().size(), 3u);
  EXPECT_EQ((*again)->bad_lines(), 1);
  fs::remove_all(dir);
}

TEST(Summary, AggregatesAccuracyAndSpeedPerCell) {
  std::vector<SampleRecord> recs = {sample("vt", 1024, 0, 1), sample("vt", 1024, 1, 0.5),
                                    sample("vt", 2048, 0, 0), sample("passkey", 1024, 0, 1)};
  recs[1].reused_tokens = 512;
  recs[1].prefill_tokens = recs[1].prompt_tokens - 512;  // a cached prefix: fewer computed tokens
  const auto rows = summarize(recs);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].task, "vt");
  EXPECT_EQ(rows[0].ctx, 1024);
  EXPECT_EQ(rows[0].n, 2);
  EXPECT_DOUBLE_EQ(rows[0].accuracy, 75.0);
  EXPECT_NEAR(rows[0].prefill_tok_s, (924.0 + 412.0) * 1000.0 / 2000.0, 1e-9);
  EXPECT_NEAR(rows[0].decode_tok_s, 20.0, 1e-9);
  EXPECT_EQ(rows[2].task, "passkey");  // registry order: RULER before InfiniteBench
  const auto j = summary_json(rows);
  EXPECT_EQ(j["model"], "m.gguf");
  ASSERT_EQ(j["results"].size(), 3u);
  for (const char* k : {"task", "ctx", "policy", "accuracy", "n", "prefill_tok_s", "decode_tok_s",
                        "selected_fraction"}) {
    EXPECT_TRUE(j["results"][0].contains(k)) << k;
  }
  EXPECT_TRUE(j["results"][0]["selected_fraction"].is_null());  // no sample reported one
  recs[0].selected_fraction = 0.5;
  recs[1].selected_fraction = 0.25;
  EXPECT_DOUBLE_EQ(summarize(recs)[0].selected_fraction, 0.375);
  recs[1].selected_fraction = -1;  // unknown samples do not count as 0
  EXPECT_DOUBLE_EQ(summarize(recs)[0].selected_fraction, 0.5);
  const auto avg = average_over_tasks(rows, "");
  ASSERT_EQ(avg.size(), 2u);
  EXPECT_DOUBLE_EQ(avg[0].accuracy, (75.0 + 100.0) / 2);  // 1K: vt and passkey
  EXPECT_DOUBLE_EQ(avg[1].accuracy, 0.0);
}

TEST(Report, MarkdownAndHtmlCarryTablesPlotsAndEscapedOutputs) {
  std::vector<SampleRecord> recs;
  for (int32_t ctx : {1024, 2048, 4096}) {
    for (int i = 0; i < 5; ++i) {
      recs.push_back(sample("passkey", ctx, i, i % 2));
      recs.push_back(sample("vt", ctx, i, 1));
    }
  }
  ReportMeta meta;
  meta.command = "sieve eval --ctx 1K,2K,4K";
  const std::string md = markdown_report(recs, meta);
  EXPECT_NE(md.find("| task | 1K | 2K | 4K |"), std::string::npos) << md;
  EXPECT_NE(md.find("| vt | 100.0 (n=5) | 100.0 (n=5) | 100.0 (n=5) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| passkey | 40.0 (n=5) |"), std::string::npos) << md;

  const std::string html = html_report(recs, meta);
  const auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = html.find(s); p != std::string::npos; p = html.find(s, p + 1)) ++n;
    return n;
  };
  // Mean accuracy + one per task (2) + 3 speed/selection charts = 6 line charts; 1 heatmap.
  EXPECT_EQ(count("data-kind=\"line\""), 6u);
  EXPECT_EQ(count("data-kind=\"heatmap\""), 1u);
  // Heatmap: 5 depths x 3 lengths, all filled.
  EXPECT_EQ(count("class=\"cell mark\""), 15u);
  EXPECT_EQ(html.find("<b>1234567</b>"), std::string::npos);  // outputs are escaped
  EXPECT_NE(html.find("&lt;b&gt;1234567&lt;/b&gt; &amp; &quot;more&quot;"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);  // self-contained: nothing loaded
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(Matrix, RunsMissingSamplesAndSkipsFinishedOnes) {
  const fs::path dir = temp_dir("matrix");
  auto store = SampleStore::open((dir / "samples.jsonl").string());
  ASSERT_TRUE(store.ok());
  testing::WordTokenizer tok;
  const PromptEncoder enc(tok, PromptFormat::raw);
  // Answers the passkey by reading it out of the prompt: accuracy 100 when the plumbing works.
  ScriptedRunner runner([](std::string_view prompt) {
    const std::string p(prompt);
    std::smatch sm;
    if (std::regex_search(p, sm, std::regex("The pass key is ([0-9]{5})\\.")))
      return " " + sm[1].str() + ".";
    return std::string(" nothing");
  });
  MatrixSpec spec;
  spec.tasks = {"passkey", "vt"};
  spec.lengths = {1024, 2048};
  spec.policies = {std::make_shared<const PolicyConfig>(*make_policy("dense"))};
  spec.n = 3;
  RunIdentity id{"m.gguf", runner.backend()};
  int64_t planned_total = -1, planned_done = -1, events = 0;
  MatrixEvents ev;
  ev.planned = [&](int64_t t, int64_t d, int64_t) {
    planned_total = t;
    planned_done = d;
  };
  ev.sample_done = [&](const SampleRecord&, int64_t) { ++events; };
  auto recs = run_matrix(spec, id, {}, enc, runner, **store, ev);
  ASSERT_TRUE(recs.ok()) << recs.message();
  EXPECT_EQ(recs->size(), 12u);
  EXPECT_EQ(runner.calls, 12);
  EXPECT_EQ(planned_total, 12);
  EXPECT_EQ(planned_done, 0);
  EXPECT_EQ(events, 12);
  const auto rows = summarize(*recs);
  for (const SummaryRow& r : rows) {
    EXPECT_DOUBLE_EQ(r.accuracy, r.task == "passkey" ? 100.0 : 0.0) << r.task;
    EXPECT_LE(r.mean_prompt_tokens, r.ctx);
    EXPECT_EQ(r.policy, "dense");
  }
  for (const SampleRecord& r : *recs) {
    // The word tokenizer counts words: the pad lands every prompt on its budget exactly.
    EXPECT_EQ(r.prompt_tokens + r.max_new_tokens, r.ctx) << r.id;
    EXPECT_EQ(r.policy_ran, "dense");
    EXPECT_DOUBLE_EQ(r.selected_fraction, 1.0);
  }
  // Rerun: nothing left to do, same records.
  auto reopened = SampleStore::open((dir / "samples.jsonl").string());
  auto again = run_matrix(spec, id, {}, enc, runner, **reopened, ev);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(runner.calls, 12);
  EXPECT_EQ(planned_done, 12);
  EXPECT_EQ(again->size(), 12u);
  // A larger n runs only the new samples; another seed is another set of samples.
  spec.n = 4;
  ASSERT_TRUE(run_matrix(spec, id, {}, enc, runner, **reopened, ev).ok());
  EXPECT_EQ(runner.calls, 16);
  spec.seed = 43;
  ASSERT_TRUE(run_matrix(spec, id, {}, enc, runner, **reopened, ev).ok());
  EXPECT_EQ(runner.calls, 32);
  // Another policy is another set of runs on the same prompts; each record names its policy
  // and carries what the runner reported.
  auto policies = make_policy_list(std::vector<std::string>{"dense", "tokenselect:top_k=64"}, {});
  ASSERT_TRUE(policies.ok()) << policies.message();
  spec.policies = *policies;
  auto both = run_matrix(spec, id, {}, enc, runner, **reopened, ev);
  ASSERT_TRUE(both.ok()) << both.message();
  EXPECT_EQ(runner.calls, 48);  // dense was done; tokenselect ran
  ASSERT_EQ(both->size(), 32u);
  std::map<std::string, std::string> prompt_of;  // id -> prompt hash, per policy equal
  for (const SampleRecord& r : *both) {
    if (r.policy == "dense") {
      EXPECT_DOUBLE_EQ(r.selected_fraction, 1.0);
      prompt_of[r.id] = r.prompt_hash;
    } else {
      EXPECT_EQ(r.policy, "tokenselect top_k=64");
      EXPECT_EQ(r.policy_ran, "tokenselect top_k=64");
      EXPECT_DOUBLE_EQ(r.selected_fraction, 0.25);
    }
  }
  for (const SampleRecord& r : *both) {
    if (r.policy != "dense") {
      EXPECT_EQ(r.prompt_hash, prompt_of[r.id]) << r.id;
    }
  }
  fs::remove_all(dir);
}

// Serves up to 4 complete() calls at once (a batching engine): each call waits until 4 have
// been in flight together (or 2 s), answers the passkey from the prompt, and the call numbered
// fail_call (1-based, 0: none) fails.
class ParallelRunner final : public Runner_i {
 public:
  Result<Completion> complete(const CompletionRequest& r) override {
    int n = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      n = ++calls;
      peak = std::max(peak, ++in_flight_);
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(2), [&] { return peak >= 4; });
      --in_flight_;
    }
    if (n == fail_call) return make_error("scripted failure");
    Completion c;
    const std::string p(r.text);
    std::smatch sm;
    c.text = std::regex_search(p, sm, std::regex("The pass key is ([0-9]{5})\\."))
                 ? " " + sm[1].str() + "."
                 : std::string(" nothing");
    c.prompt_tokens = c.prefill_tokens = static_cast<int64_t>(r.tokens.size());
    c.completion_tokens = 2;
    c.policy = policy_label(r.policy);
    return c;
  }
  std::string backend() const override { return "parallel"; }
  int32_t max_parallel() const override { return 4; }
  int calls = 0, peak = 0, fail_call = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
};

TEST(Matrix, ParallelRunnerGetsConcurrentRequestsAndRecordsKeepPlanOrder) {
  const fs::path dir = temp_dir("matrix_parallel");
  testing::WordTokenizer tok;
  const PromptEncoder enc(tok, PromptFormat::raw);
  MatrixSpec spec;
  spec.tasks = {"passkey", "vt"};
  spec.lengths = {1024, 2048};
  spec.policies = {std::make_shared<const PolicyConfig>(*make_policy("dense"))};
  spec.n = 3;
  // the one-at-a-time order and outputs
  auto serial_store = SampleStore::open((dir / "serial.jsonl").string());
  ASSERT_TRUE(serial_store.ok());
  ScriptedRunner serial([](std::string_view prompt) {
    const std::string p(prompt);
    std::smatch sm;
    if (std::regex_search(p, sm, std::regex("The pass key is ([0-9]{5})\\.")))
      return " " + sm[1].str() + ".";
    return std::string(" nothing");
  });
  auto want = run_matrix(spec, RunIdentity{"m.gguf", "x"}, {}, enc, serial, **serial_store);
  ASSERT_TRUE(want.ok()) << want.message();

  // the 6th call fails: the windows before it and the rest of its window are stored
  auto store = SampleStore::open((dir / "samples.jsonl").string());
  ASSERT_TRUE(store.ok());
  ParallelRunner runner;
  runner.fail_call = 6;
  const RunIdentity id{"m.gguf", "x"};
  auto failed = run_matrix(spec, id, {}, enc, runner, **store);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("scripted failure"), std::string::npos) << failed.message();
  EXPECT_EQ(runner.calls, 8);  // two windows of 4
  EXPECT_EQ((*store)->records().size(), 7u);
  EXPECT_EQ(runner.peak, 4);
  // resumed: the 5 missing run; every record equals the serial run's, in plan order
  runner.fail_call = 0;
  auto got = run_matrix(spec, id, {}, enc, runner, **store);
  ASSERT_TRUE(got.ok()) << got.message();
  EXPECT_EQ(runner.calls, 13);
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_EQ((*got)[i].id, (*want)[i].id);
    EXPECT_EQ((*got)[i].output, (*want)[i].output) << (*got)[i].id;
    EXPECT_EQ((*got)[i].prompt_hash, (*want)[i].prompt_hash) << (*got)[i].id;
  }
  fs::remove_all(dir);
}

TEST(Matrix, RopeFlagsNameTheRecordedModel) {
  ModelHParams hp;
  hp.n_ctx_train = 32768;
  const RopeScaling file;  // a GGUF without rope.scaling (Qwen2.5)
  EXPECT_EQ(rope_model_suffix(file, hp), "");
  RopeScaling y;
  y.type = RopeScalingType::yarn;
  y.factor = 4;
  y.n_ctx_orig = 32768;
  y.ext_factor = 1;
  hp.rope_scaling = y;
  EXPECT_EQ(rope_model_suffix(file, hp), "+yarn4");
  EXPECT_EQ(rope_model_suffix(y, hp), "") << "the file's own scaling names nothing";
  hp.rope_scaling.n_ctx_orig = 16384;
  hp.rope_scaling.beta_fast = 16;
  EXPECT_EQ(rope_model_suffix(file, hp), "+yarn4/16384:ext1:attn1:beta16/1");
  RopeScaling lin;
  lin.type = RopeScalingType::linear;
  lin.factor = 2;
  lin.n_ctx_orig = 32768;
  hp.rope_scaling = lin;
  EXPECT_EQ(rope_model_suffix(file, hp), "+linear2");
  hp.rope_scaling = RopeScaling{};
  EXPECT_EQ(rope_model_suffix(y, hp), "+norope-scaling");
}

TEST(Matrix, SpecValidationNamesTheBadValue) {
  MatrixSpec spec;
  spec.tasks = {"vt"};
  spec.lengths = {1024};
  const PolicyPtr ts = std::make_shared<const PolicyConfig>(*make_policy("tokenselect"));
  spec.policies = {ts, ts};
  auto s = validate_spec(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tokenselect"), std::string::npos);
  EXPECT_NE(s.message().find("twice"), std::string::npos);
  spec.policies = {nullptr};  // dense
  EXPECT_TRUE(validate_spec(spec).ok());
  spec.lengths = {100};
  EXPECT_NE(validate_spec(spec).message().find("100"), std::string::npos);
  spec.lengths = {1024};
  spec.depths = {120};
  EXPECT_NE(validate_spec(spec).message().find("120"), std::string::npos);
}

}  // namespace
}  // namespace sieve::eval
