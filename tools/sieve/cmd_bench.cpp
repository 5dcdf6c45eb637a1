// sieve bench: prefill and decode throughput, printed as JSON, per thread count, prompt
// length and attention policy (ratios to dense side by side when dense is in the list).
// Method (kept identical to bench/llama_cpp_bench.py so the two compare side by side):
// prefill = N prompt tokens in chunks of --batch into an empty KV; decode = --n-decode
// greedy tokens right after that prompt, each a forward of one token; --warmup runs, then
// the median of --reps runs. The prompt is token ids cycling through the vocabulary, or the
// tokens of --file repeated to the length (real text, for sparse policies).
// Every row is one greedy request through the engine: the scheduler's loop, the one `sieve
// run` and the server use. On the CPU every policy prefills its own copy of the prompt (each in its
// own engine and KV store, all held at once), then the policies decode in turns of --round
// tokens (default 64), so the decode ratios compare steps that ran side by side rather than
// minutes apart on a machine whose speed drifts.
// With --batch-seqs (on the GPU, or the CPU engine) decode is measured at depth instead
// (bench_gpu_depth.h):
// one prefill per length and policy, then batches of sequences sharing that prompt decode
// together; without it the GPU bench is the batch-1 bench above, every repetition prefilling.
#include <fstream>
#include <sstream>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "bench_engine.h"
#include "bench_gpu.h"
#include "bench_gpu_depth.h"
#include "bench_serve.h"
#include "command.h"
#include "core/cpu_features.h"
#include "core/log.h"
#include "core/text_file.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"
#include "eval/eval_rng.h"
#include "eval/policies.h"
#include "model_cache.h"
#include "run_common.h"

namespace sieve::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  std::vector<int32_t> threads = {1, 2};
  std::vector<int32_t> lengths = {512, 4096};
  int32_t n_decode = 128;
  int32_t n_batch = 512;
  int32_t reps = 3;
  int32_t warmup = 1;
  // Decode tokens per turn when the policies alternate (0: all at once). Long enough that a
  // policy whose working set fits the last-level cache keeps it warm through its turn, as a
  // lone sequence would: on a 300 MiB-L3 Xeon auto's ~170 MB per token at 16K stays cached, and
  // turns of 1-16 tokens (dense's 475 MB flushing it between) cost auto 15-20%.
  int32_t round = 64;
  std::vector<std::string> policies = {"dense"};
  std::vector<std::string> sets;  // knobs applied to every policy but dense
  std::string head_plan;          // --head-plan: head_plan of the rtpurbo policy
  std::string file;
  std::string dense_prefill;  // prefill the dense rows with this policy (decode stays dense)
  bool engine = false;
  int32_t prefix_len = 4096;
  std::vector<int32_t> concurrency = {1, 8};
  int32_t conc_prompt = 512;
  std::string backend = "cpu";
  // --batch-seqs: the GPU's decode-at-depth mode (bench_gpu_depth.h)
  std::vector<std::string> batch_seqs;
  std::string shared_prefill;
  bool own_ttft = false;
  int32_t fit_cap = 64;
  double gpu_mem_fraction = 0.9;
  std::string rows_out;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One policy's state in a CPU bench: its own engine (one running sequence; its KV store laid
// out with the sketch keys the policy needs, rtpurbo's layers without a retrieval head keeping
// only sinks + window), all sharing one thread pool; timings accumulate per length. Each
// repetition is one greedy request of n_decode + 1 tokens (the first comes with the prefill).
// The policies take turns: the request's token callback, on its engine's thread, holds the
// engine after each turn until decode() grants the next, so only one engine steps at a time.
class PolicyRun {
 public:
  PolicyRun(const Model& model, ThreadPool& pool, const PolicyPtr& policy,
            const PolicyPtr& dense_prefill, const BenchOptions& o, int32_t n_ctx)
      : policy_(policy), dense_prefill_(dense_prefill) {
    EngineConfig ec;
    ec.n_ctx = n_ctx + 1;  // the last token generated is never written to the KV
    ec.max_running = 1;
    ec.max_batch_tokens = o.n_batch;
    ec.max_step_ms = 0;
    ec.pool = &pool;
    ec.prefix_cache = false;  // every repetition computes its prompt
    ec.default_policy = policy;
    ec.sketch_keys = false;
    const SketchSpec sketch = sketch_spec_for(*policy, model.hp);
    const std::vector<KvCapacity> layout = kv_layout_for(policy.get(), model.hp);
    int64_t max_chunk = o.n_batch;
    for (int32_t len : o.lengths) {
      max_chunk = std::max<int64_t>(max_chunk,
                                    prefill_chunk_for(resolve_auto(*policy, len), len, o.n_batch));
      if (dense_prefill)
        max_chunk = std::max<int64_t>(max_chunk, prefill_chunk_for(*dense_prefill, len, o.n_batch));
    }
    ec.kv_budget_bytes = kv_budget_bytes(model.hp, n_ctx, 1, 16, sketch.dim, max_chunk, &layout);
    auto e = Engine::create(std::shared_ptr<const Model>(&model, [](const Model*) {}), ec);
    if (!e) throw UserError(e.message());
    engine_ = std::move(*e);
    fwd_ = static_cast<const Forward*>(engine_->runner());
  }

  ~PolicyRun() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort_ = true;  // a parked request (an error elsewhere) runs to its end unheld
    }
    cv_.notify_all();
    engine_.reset();
  }

  void begin_length(int32_t len) {
    resolved_ = resolve_auto(*policy_, len);
    pf_.clear();
    dc_.clear();
  }

  void prefill(const std::vector<int32_t>& prompt, int32_t len, int32_t n_decode) {
    RequestParams rp;
    rp.prompt.assign(prompt.begin(), prompt.begin() + len);
    rp.max_tokens = n_decode + 1;
    rp.sampling.temperature = 0.0f;  // greedy
    rp.stop_at_eog = false;
    rp.policy = std::make_shared<const PolicyConfig>(resolved_);
    if (resolved_.is_dense() && dense_prefill_) rp.prefill_policy = dense_prefill_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      n_tokens_ = 0;
      n_max_ = n_decode + 1;
      grant_ = 0;
      done_ = false;
      error_.clear();
      decode_s_ = 0;
      checksum_ = eval::fnv1a64("");
      t_submit_ = std::chrono::steady_clock::now();
    }
    engine_->submit(std::move(rp), [this](const RequestEvent& ev) { on_event(ev); });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return n_tokens_ > 0 || done_; });
    if (!error_.empty()) throw UserError(error_);
  }

  // n greedy tokens, timed on the engine's thread from the grant to the n-th token.
  void decode(int32_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    grant_ = n;
    cv_.notify_all();
    cv_.wait(lock, [&] { return grant_ == 0 || done_; });
    if (!error_.empty()) throw UserError(error_);
  }

  // Ends the repetition: waits for the request's end, records its figures when measured.
  void finish(bool measured, int32_t len, int32_t n_decode) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_; });
      if (!error_.empty()) throw UserError(error_);
    }
    kv_bytes_ = final_.sparse.kv_bytes_held;
    last_ = final_.sparse;  // the decode policy's, and a --dense-prefill policy's
    decode_select_ns_ = end_.select_ns - start_.select_ns;
    decode_attn_ns_ = end_.attn_ns - start_.attn_ns;
    decode_matmul_ns_ = end_.matmul_ns - start_.matmul_ns;
    decode_run_ns_ = end_.run_ns - start_.run_ns;
    if (!measured) return;
    pf_.push_back(len / prefill_s_);
    dc_.push_back(n_decode / decode_s_);
  }
  nlohmann::json report(int32_t nt, int32_t len, int32_t n_decode,
                        const std::string& dense_prefill) const {
    // Per decoded token, the last repetition's: planning, attention with its planning, the
    // weight matmuls, and the whole forward pass (the rest of it is serial glue; what is
    // outside it, the KV reservation, the sparse bookkeeping and the argmax).
    const double select_ms = decode_select_ns_ / 1e6 / n_decode,
                 attn_ms = decode_attn_ns_ / 1e6 / n_decode;
    const double matmul_ms = decode_matmul_ns_ / 1e6 / n_decode,
                 forward_ms = decode_run_ns_ / 1e6 / n_decode;
    const std::string prefill_policy =
        resolved_.is_dense() && !dense_prefill.empty() ? dense_prefill : resolved_.describe();
    nlohmann::json r = {{"threads", nt},
                        {"prompt_tokens", len},
                        {"prefill_tok_s", median(pf_)},
                        {"ttft_ms", 1000.0 * len / median(pf_)},
                        {"decode_tok_s", median(dc_)},
                        {"n_decode", n_decode},
                        {"decode_tokens_fnv", checksum_},
                        {"policy", resolved_.describe()},
                        {"kv_bytes", kv_bytes_},
                        {"prefill_policy", prefill_policy},
                        {"selected_fraction", last_.selected_fraction()},
                        {"mean_selected_tokens", last_.mean_selected()},
                        {"selection_cache_hit_rate", last_.hit_rate()},
                        {"decode_select_ms_per_token", select_ms},
                        {"decode_attention_ms_per_token", attn_ms},
                        {"decode_matmul_ms_per_token", matmul_ms},
                        {"decode_forward_ms_per_token", forward_ms},
                        {"tokens_evicted", last_.tokens_evicted},
                        {"prefill_row_fraction", last_.prefill_row_fraction()},
                        {"prefill_tokens_dropped", last_.prefill_dropped}};
    log_info(
        "threads {} prompt {} {}: prefill {:.1f} tok/s ({:.0f} ms), decode {:.1f} tok/s ({:.2f} "
        "ms/token in "
        "attention, {:.2f} of it planning sparse attention; {:.2f} in matmuls; {:.2f} in the "
        "forward pass), "
        "read {:.1f}%, hits {:.0f}%, prefill rows {:.1f}%, KV {:.1f} MiB",
        nt, len, resolved_.describe(), median(pf_), 1000.0 * len / median(pf_), median(dc_),
        attn_ms, select_ms, matmul_ms, forward_ms, 100 * last_.selected_fraction(),
        100 * last_.hit_rate(), 100 * last_.prefill_row_fraction(), kv_bytes_ / 1048576.0);
    return r;
  }

 private:
  // Counters at a token: the decode policy's planning time and the forward pass's.
  struct Marks {
    int64_t select_ns = 0, attn_ns = 0, matmul_ns = 0, run_ns = 0;
  };
  Marks marks(const RequestEvent& ev) const {
    return {ev.sparse.select_ns, fwd_->attention_ns(), fwd_->matmul_ns(), fwd_->run_ns()};
  }

  // On the engine's thread. The first token ends the prefill; every turn's last token parks
  // the engine until the next grant (the request's last token does not).
  void on_event(const RequestEvent& ev) {
    using clock = std::chrono::steady_clock;
    const auto now = clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    if (ev.finished) {
      final_ = ev;
      if (ev.reason == FinishReason::error) error_ = ev.error;
      done_ = true;
      cv_.notify_all();
      return;
    }
    if (abort_) return;
    if (++n_tokens_ == 1) {
      prefill_s_ = std::chrono::duration<double>(now - t_submit_).count();
      start_ = marks(ev);
    } else {
      checksum_ = eval::fnv1a64(
          std::string_view(reinterpret_cast<const char*>(&ev.token), sizeof ev.token), checksum_);
      if (--grant_ > 0) return;
      decode_s_ += std::chrono::duration<double>(now - t_turn_).count();
      end_ = marks(ev);
      cv_.notify_all();
      if (n_tokens_ == n_max_) return;
    }
    cv_.notify_all();
    cv_.wait(lock, [&] { return grant_ > 0 || abort_; });
    t_turn_ = clock::now();
  }

  PolicyPtr policy_, dense_prefill_;
  std::unique_ptr<Engine> engine_;
  const Forward* fwd_ = nullptr;
  PolicyConfig resolved_;

  std::mutex mu_;
  std::condition_variable cv_;
  int32_t n_tokens_ = 0;  // tokens of this repetition so far
  int32_t n_max_ = 0;     // its last token
  int32_t grant_ = 0;     // tokens left in the current turn
  bool done_ = false, abort_ = false;
  std::string error_;
  RequestEvent final_;
  Marks start_, end_;
  std::chrono::steady_clock::time_point t_submit_, t_turn_;
  // FNV-1a over the greedy tokens decoded (the last repetition's): the same for a policy
  // whatever the --round, since each policy's state is its own.
  uint64_t checksum_ = 0;
  double prefill_s_ = 0, decode_s_ = 0;
  std::vector<double> pf_, dc_;
  SparseStats last_;
  int64_t kv_bytes_ = 0, decode_select_ns_ = 0, decode_attn_ns_ = 0, decode_matmul_ns_ = 0,
          decode_run_ns_ = 0;
};

int run(BenchOptions o) {
  ModelOptions mo = o.model;
  mo.threads = 1;
  // the GPU benchmarks' model (a 135M model's decode step is launch-bound on a GPU)
  if (mo.model.empty() && o.backend == "cuda") mo.model = "qwen2.5-coder-1.5b";
  LoadedModel lm = load_for_run(mo);
  const Model& model = *lm.model;
  int32_t max_len = 0;
  for (int32_t l : o.lengths) max_len = std::max(max_len, l);
  const int32_t n_ctx = max_len + o.n_decode;
  std::vector<int32_t> prompt(max_len);
  if (o.file.empty()) {
    // Deterministic prompt: token ids cycling through the vocabulary's ordinary range.
    for (int32_t i = 0; i < max_len; ++i)
      prompt[i] = 100 + (i * 7919) % std::min(model.hp.n_vocab - 100, 30000);
  } else {
    auto text = read_text_file(o.file, "prompt file");  // regular, bounded
    if (!text) throw UserError(text.message());
    const std::vector<int32_t> ids =
        model.tokenizer->encode(*text, model.tokenizer->add_bos(), false);
    if (ids.size() < 2) throw UserError("the prompt file " + o.file + " has no text");
    for (int32_t i = 0; i < max_len; ++i) prompt[i] = ids[i % ids.size()];
  }
  // Each item is NAME or NAME:key=value:... (as in sieve eval); --set applies to every sparse item.
  std::vector<std::string> items = o.policies;
  if (!o.head_plan.empty()) {
    if (Status s = eval::attach_head_plan(items, o.head_plan, "--policies"); !s)
      throw UserError(s.message());
  }
  const bool depth = !o.batch_seqs.empty();
  std::vector<PolicyPtr> policies;
  std::vector<std::pair<std::string, std::string>> refused;  // depth mode: (item, why)
  if (depth) {
    // A matrix run on a GPU goes on past a policy it cannot build: that policy gets rows that
    // say why.
    for (const std::string& item : items) {
      const bool dense = item == "dense";
      auto one = eval::make_policy_list(std::span<const std::string>(&item, 1),
                                        dense ? std::span<const std::string>() : o.sets);
      if (one)
        policies.push_back(one->front());
      else
        refused.emplace_back(item, one.message());
    }
  } else {
    auto listed = eval::make_policy_list(items, o.sets);
    if (!listed) throw UserError(listed.message());
    policies = std::move(*listed);
  }
  // --dense-prefill: the policy the dense rows prefill with, parsed once.
  const PolicyPtr dense_prefill = o.dense_prefill.empty()
                                      ? nullptr
                                      : policy_from_flags(PolicyFlags{o.dense_prefill, "", {}, ""});

  nlohmann::json results = nlohmann::json::array();
  std::string device = cpu_features_string();
  if (depth) {
    DepthOptions d;
    d.backend = o.backend;
    d.threads = o.threads.empty() ? 0 : o.threads.front();
    d.lengths = o.lengths;
    d.batch_seqs = parse_batch_seqs(o.batch_seqs);
    d.fit_cap = o.fit_cap;
    d.n_decode = o.n_decode;
    d.reps = o.reps;
    d.warmup = o.warmup;
    d.mem_fraction = o.gpu_mem_fraction;
    d.refused = refused;
    d.rows_out = o.rows_out;
    d.own_ttft = o.own_ttft;
    if (!o.shared_prefill.empty()) {
      auto sp = eval::make_policy_list(
          std::span<const std::string>(&o.shared_prefill, 1),
          o.shared_prefill == "dense" ? std::span<const std::string>() : o.sets);
      if (!sp) throw UserError("--shared-prefill: " + sp.message());
      d.shared_prefill = sp->front();
    }
    run_depth_bench(model, prompt, policies, d, results, device);
    o.threads.clear();
  } else if (!o.shared_prefill.empty()) {
    throw UserError("--shared-prefill goes with --batch-seqs (the GPU's decode-at-depth mode)");
  } else if (o.backend == "cuda") {
    run_gpu_bench(model, prompt, policies, GpuBenchOptions{o.lengths, o.n_decode, o.reps, o.warmup},
                  results, device);
    o.threads.clear();
  }
  for (int32_t nt : o.threads) {
    ThreadPool pool(nt);
    // Every policy has its own KV store and forward pass, all alive at once, so that their
    // decode steps can alternate (below).
    std::vector<std::unique_ptr<PolicyRun>> runs;
    for (const PolicyPtr& policy : policies) {
      // No prefix cache: every repetition must compute its prompt.
      if (Status st = check_policy_for_model(*policy, model.hp); !st) throw UserError(st.message());
      runs.push_back(std::make_unique<PolicyRun>(model, pool, policy, dense_prefill, o, n_ctx));
    }
    for (int32_t len : o.lengths) {
      for (auto& r : runs) r->begin_length(len);
      for (int rep = 1 - o.warmup; rep <= o.reps; ++rep) {  // rep <= 0: warm-up
        for (auto& r : runs) r->prefill(prompt, len, o.n_decode);
        // Decode in rounds of --round tokens, the policies taking turns (the first of a round
        // moves on by one each round), so a machine that slows down for a while slows every
        // policy alike and the ratios compare steps that ran side by side.
        const int32_t round = o.round > 0 ? o.round : o.n_decode;
        int32_t done = 0;
        for (int32_t k = 0; done < o.n_decode; ++k, done += round) {
          const int32_t n = std::min(round, o.n_decode - done);
          for (size_t i = 0; i < runs.size(); ++i) runs[(i + k) % runs.size()]->decode(n);
        }
        for (auto& r : runs) r->finish(rep > 0, len, o.n_decode);
      }
      for (auto& r : runs) results.push_back(r->report(nt, len, o.n_decode, o.dense_prefill));
    }
  }
  // Side-by-side ratios to dense at the same threads and length (the depth mode adds its own,
  // per batch).
  for (auto& r : results) {
    if (depth) break;
    for (const auto& d : results) {
      if (d["policy"] == "dense" && d["threads"] == r["threads"] &&
          d["prompt_tokens"] == r["prompt_tokens"]) {
        r["decode_vs_dense"] = r["decode_tok_s"].get<double>() / d["decode_tok_s"].get<double>();
        r["prefill_vs_dense"] = r["prefill_tok_s"].get<double>() / d["prefill_tok_s"].get<double>();
        r["kv_bytes_vs_dense"] =
            static_cast<double>(r["kv_bytes"].get<int64_t>()) / d["kv_bytes"].get<int64_t>();
      }
    }
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j = {{"engine", "sieve"},
                      {"model", lm.path},
                      {"arch", model.hp.arch},
                      {"n_batch", o.n_batch},
                      {"reps", o.reps},
                      {"date", date},
                      {"cpu_features", cpu_features_string()},
                      {"backend", o.backend},
                      {"device", device},
                      {"results", results}};
  if (depth) {
    j["note"] =
        "decode at depth: each batch's sequences share the prompt's KV pages through the prefix "
        "cache (one prefill per length and policy, or one per length with --shared-prefill); "
        "every sequence's attention still reads all of its keys, from the same physical pages, "
        "so reads that coincide may hit L2 (compare dense step_ms with distinct_kv_floor_ms)";
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("-m,--model", o->model.model,
                 "GGUF file or known model name (default: smollm2; with --backend cuda, "
                 "qwen2.5-coder-1.5b)");
  app.add_option("--threads-list", o->threads, "thread counts to measure")->delimiter(',');
  app.add_option("--lengths", o->lengths, "prompt lengths")->delimiter(',');
  app.add_option("--n-decode", o->n_decode, "tokens decoded after the prompt")
      ->check(CLI::Range(1, 100000));
  app.add_option("--batch", o->n_batch, "prefill chunk size")->check(CLI::Range(1, 1 << 16));
  app.add_option("--reps", o->reps, "measured repetitions (median reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", o->warmup, "warm-up runs before measuring")->check(CLI::Range(0, 10));
  app.add_option(
         "--round", o->round,
         "decode tokens per turn: the policies' decode steps alternate in rounds of this many, so "
         "that their ratios compare steps run side by side (0: each policy decodes all at once)")
      ->check(CLI::Range(0, 100000));
  app.add_option(
         "--policies", o->policies,
         "attention policies to compare, each NAME or NAME:key=value:... (dense first for ratios)")
      ->delimiter(',');
  app.add_option("--set", o->sets, "policy knob key=value for every policy but dense (repeatable)");
  app.add_option("--head-plan", o->head_plan, "head plan of the rtpurbo policy (sieve calibrate)");
  app.add_option("-f,--file", o->file,
                 "prompt text, repeated to each length (default: synthetic ids)");
  app.add_option(
      "--dense-prefill", o->dense_prefill,
      "prefill the dense rows with this policy to save time at long lengths; dense decode "
      "reads every key whatever they hold, so its decode speed is unchanged");
  add_backend_flag(app, o->backend);
  app.add_option("--batch-seqs", o->batch_seqs,
                 "decode at depth through the engine instead (--backend cuda; cpu: the CPU "
                 "engine, --threads-list's first); per length and policy one prefill, "
                 "then batches of this many sequences sharing the prompt decode --n-decode "
                 "tokens together (e.g. 1,8; 'fit': as many as the KV pool holds at the length)")
      ->delimiter(',');
  app.add_option("--shared-prefill", o->shared_prefill,
                 "--batch-seqs: prefill each length once with this policy and decode every policy "
                 "over it (saves a prefill per policy; decode speed does not depend on what the "
                 "keys hold); default: each policy prefills its own (its time to first token)");
  app.add_flag("--own-ttft", o->own_ttft,
               "--shared-prefill: each policy also prefills its own copy once, for its time to "
               "first token (its batches still decode over the shared prompt)");
  app.add_option("--fit-cap", o->fit_cap, "--batch-seqs fit: at most this many sequences")
      ->check(CLI::Range(1, 1024));
  app.add_option("--rows-out", o->rows_out,
                 "--batch-seqs: also append each row to this file as a JSON line when measured");
  app.add_option("--gpu-mem-fraction", o->gpu_mem_fraction,
                 "--batch-seqs: share of the GPU's memory for weights, workspaces and KV pages")
      ->check(CLI::Range(0.05, 1.0));
  app.add_flag("--engine", o->engine,
               "engine core instead: repeated-prompt prefix hit and N concurrent sequences");
  app.add_option("--prefix-len", o->prefix_len, "--engine: repeated prompt length")
      ->check(CLI::Range(16, 1 << 20));
  app.add_option("--concurrency", o->concurrency, "--engine: concurrent sequences to compare")
      ->delimiter(',');
  app.add_option("--conc-prompt", o->conc_prompt, "--engine: prompt length per sequence")
      ->check(CLI::Range(1, 1 << 20));
  CLI::App* serve = app.add_subcommand(
      "serve", "load an OpenAI-compatible server: TTFT, ITL, tok/s per clients x prompt");
  auto run_serve = setup_bench_serve(*serve);
  return [o, serve, run_serve]() {
    if (serve->parsed()) return run_serve();
    if (o->engine) {
      EngineBenchOptions e;
      ModelOptions mo = o->model;
      e.model_path = resolve_model(mo.model, mo.model.empty() || find_known_model(mo.model));
      e.threads = o->threads.empty() ? 2 : o->threads.front();
      e.prefix_len = o->prefix_len;
      e.concurrency = o->concurrency;
      e.prompt_len = o->conc_prompt;
      e.n_decode = o->n_decode;
      e.file = o->file;
      for (int32_t c : e.concurrency)
        if (c < 1 || c > 256) throw UserError("--concurrency values must be in [1, 256]");
      return run_engine_bench(e);
    }
    for (int32_t t : o->threads)
      if (t < 1 || t > 1024) throw UserError("thread counts must be in [1, 1024]");
    for (int32_t l : o->lengths)
      if (l < 1 || l > (1 << 22)) throw UserError("prompt lengths must be in [1, 4M]");
    return run(*o);
  };
}

SIEVE_COMMAND("bench", "measure prefill and decode tokens/s (JSON)", setup);

}  // namespace
}  // namespace sieve::cli
