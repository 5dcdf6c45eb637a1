// sieve bench: prefill and decode throughput, printed as JSON, per thread count, prompt
// length and attention policy (ratios to dense side by side when dense is in the list).
// Method (kept identical to bench/llama_cpp_bench.py so the two compare side by side):
// prefill = N prompt tokens in chunks of --batch into an empty KV; decode = --n-decode
// greedy tokens right after that prompt, each a forward of one token; --warmup runs, then
// the median of --reps runs. The prompt is token ids cycling through the vocabulary, or the
// tokens of --file repeated to the length (real text, for sparse policies).
#include <fstream>
#include <sstream>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/cpu_features.h"
#include "core/log.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sampler.h"
#include "engine/sparse_seq.h"
#include "eval/policies.h"
#include "backend.h"
#include "bench_engine.h"
#include "bench_gpu.h"
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
};

void reserve_or_throw(KvStore& kv, KvSeqId seq, std::span<const int32_t> tokens) {
  const KvAppend app{seq, tokens};
  auto room = kv.reserve(std::span<const KvAppend>(&app, 1));
  if (!room) throw UserError(room.message());
  if (!room->fits()) throw UserError("bench: the KV store is too small (internal sizing error)");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(BenchOptions o) {
  ModelOptions mo = o.model;
  mo.threads = 1;
  LoadedModel lm = load_for_run(mo);
  const Model& model = *lm.model;
  int32_t max_len = 0;
  for (int32_t l : o.lengths) max_len = std::max(max_len, l);
  const int32_t n_ctx = max_len + o.n_decode;
  std::vector<int32_t> prompt(max_len);
  if (o.file.empty()) {
    // Deterministic prompt: token ids cycling through the vocabulary's ordinary range.
    for (int32_t i = 0; i < max_len; ++i) prompt[i] = 100 + (i * 7919) % std::min(model.hp.n_vocab - 100, 30000);
  } else {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw UserError("cannot read the prompt file " + o.file);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> ids = model.tokenizer->encode(ss.str(), model.tokenizer->add_bos(), false);
    if (ids.size() < 2) throw UserError("the prompt file " + o.file + " has no text");
    for (int32_t i = 0; i < max_len; ++i) prompt[i] = ids[i % ids.size()];
  }
  // Each item is NAME or NAME:key=value:... (as in sieve eval); --set applies to every sparse item.
  std::vector<std::string> items = o.policies;
  if (!o.head_plan.empty()) {
    if (Status s = eval::attach_head_plan(items, o.head_plan, "--policies"); !s) throw UserError(s.message());
  }
  auto listed = eval::make_policy_list(items, o.sets);
  if (!listed) throw UserError(listed.message());
  const std::vector<PolicyPtr> policies = std::move(*listed);
  // --dense-prefill: the policy the dense rows prefill with, parsed once.
  const PolicyPtr dense_prefill =
      o.dense_prefill.empty() ? nullptr : policy_from_flags(PolicyFlags{o.dense_prefill, "", {}, ""});

  nlohmann::json results = nlohmann::json::array();
  std::string device = cpu_features_string();
  if (o.backend == "cuda") {
    run_gpu_bench(model, prompt, policies, GpuBenchOptions{o.lengths, o.n_decode, o.reps, o.warmup}, results, device);
    o.threads.clear();
  }
  for (int32_t nt : o.threads) {
   ThreadPool pool(nt);
   for (const PolicyPtr& policy : policies) {
    // No prefix cache: every repetition must compute its prompt.
    if (Status st = check_policy_for_model(*policy, model.hp); !st) throw UserError(st.message());
    SketchProjection sketch(sketch_spec_for(*policy, model.hp));
    // rtpurbo: layers without a retrieval head keep only sinks + window.
    const std::vector<KvCapacity> layout = kv_layout_for(policy.get(), model.hp);
    KvConfig kc = kv_config_for(model.hp, 0, 16, "bench", &layout);
    kc.sketch_dim = sketch.spec().dim;
    int64_t max_chunk = o.n_batch;
    for (int32_t len : o.lengths) {
      max_chunk = std::max<int64_t>(max_chunk, prefill_chunk_for(resolve_auto(*policy, len), len, o.n_batch));
      if (dense_prefill) max_chunk = std::max<int64_t>(max_chunk, prefill_chunk_for(*dense_prefill, len, o.n_batch));
    }
    kc.budget_bytes = kv_budget_bytes(model.hp, n_ctx, 1, 16, kc.sketch_dim, max_chunk, &layout);
    kc.prefix_cache = false;
    auto store = KvStore::create(kc);
    if (!store) throw UserError(store.message());
    KvStore& kv = *store;
    Forward fwd(model, pool, kv, &sketch);
    for (int32_t len : o.lengths) {
      std::vector<double> pf, dc;
      SparseStats last;
      int64_t kv_bytes = 0;
      int64_t decode_select_ns = 0;  // planning sparse attention during decode (last repetition)
      int64_t decode_attn_ns = 0;    // planning + attention during decode (last repetition)
      const PolicyConfig resolved = resolve_auto(*policy, len);
      for (int rep = 1 - o.warmup; rep <= o.reps; ++rep) {  // rep <= 0: warm-up
        auto added = kv.add_sequence({});
        if (!added) throw UserError(added.message());
        const KvSeqId seq = added->seq;
        std::unique_ptr<SparseSeq> sp, pre;
        if (!resolved.is_dense()) sp = std::make_unique<SparseSeq>(resolved, model.hp);
        if (resolved.is_dense() && dense_prefill) pre = std::make_unique<SparseSeq>(*dense_prefill, model.hp);
        for (SparseSeq* s : {sp.get(), pre.get()}) {
          if (s) s->prompt_tokens = len;
        }
        std::vector<float> logits;
        auto t0 = std::chrono::steady_clock::now();
        // UniPrefill prefills a long prompt in one chunk (its selection needs the prompt's end).
        const int32_t chunk = prefill_chunk_for(pre ? pre->policy() : resolved, len, o.n_batch);
        for (int32_t i = 0; i < len; i += chunk) {
          BatchEntry e;
          e.seq = seq;
          e.tokens = std::span<const int32_t>(prompt.data() + i, std::min(chunk, len - i));
          e.sparse = pre ? pre.get() : sp.get();
          reserve_or_throw(kv, seq, e.tokens);
          Status s = fwd.run(std::span<const BatchEntry>(&e, 1), logits);
          if (!s) throw UserError(s.message());
          if (sp) {
            if (Status es = sparse_after_step(kv, seq, *sp, model.hp); !es) throw UserError(es.message());
          }
        }
        auto t1 = std::chrono::steady_clock::now();
        const int64_t select_ns_prefill = sp ? sp->stats.select_ns : 0;
        const int64_t attn_ns_prefill = fwd.attention_ns();
        int32_t tok = argmax(logits);
        for (int32_t g = 0; g < o.n_decode; ++g) {
          BatchEntry e;
          e.seq = seq;
          e.tokens = std::span<const int32_t>(&tok, 1);
          e.sparse = sp.get();
          reserve_or_throw(kv, seq, e.tokens);
          Status s = fwd.run(std::span<const BatchEntry>(&e, 1), logits);
          if (!s) throw UserError(s.message());
          if (sp) {
            if (Status es = sparse_after_step(kv, seq, *sp, model.hp); !es) throw UserError(es.message());
          }
          tok = argmax(logits);
        }
        auto t2 = std::chrono::steady_clock::now();
        kv_bytes = kv_bytes_held(kv, seq, sp.get());
        last = sp ? sp->stats : SparseStats{};
        decode_select_ns = last.select_ns - select_ns_prefill;
        decode_attn_ns = fwd.attention_ns() - attn_ns_prefill;
        if (pre) last.add(pre->stats);
        if (Status s = kv.free_sequence(seq); !s) throw UserError(s.message());
        if (rep <= 0) continue;
        pf.push_back(len / std::chrono::duration<double>(t1 - t0).count());
        dc.push_back(o.n_decode / std::chrono::duration<double>(t2 - t1).count());
      }
      // Per decoded token, the last repetition's: planning, and attention with its planning.
      const double select_ms = decode_select_ns / 1e6 / o.n_decode, attn_ms = decode_attn_ns / 1e6 / o.n_decode;
      nlohmann::json r = {{"threads", nt}, {"prompt_tokens", len}, {"prefill_tok_s", median(pf)}, {"ttft_ms", 1000.0 * len / median(pf)},
                          {"decode_tok_s", median(dc)}, {"n_decode", o.n_decode},
                          {"policy", resolved.describe()}, {"kv_bytes", kv_bytes},
                          {"prefill_policy", resolved.is_dense() && !o.dense_prefill.empty() ? o.dense_prefill
                                                                                        : resolved.describe()},
                          {"selected_fraction", last.selected_fraction()},
                          {"mean_selected_tokens", last.mean_selected()},
                          {"selection_cache_hit_rate", last.hit_rate()},
                          {"decode_select_ms_per_token", select_ms},
                          {"decode_attention_ms_per_token", attn_ms},
                          {"tokens_evicted", last.tokens_evicted},
                          {"prefill_row_fraction", last.prefill_row_fraction()},
                          {"prefill_tokens_dropped", last.prefill_dropped}};
      log_info("threads {} prompt {} {}: prefill {:.1f} tok/s ({:.0f} ms), decode {:.1f} tok/s ({:.2f} ms/token in "
               "attention, {:.2f} of it planning sparse attention), read {:.1f}%, hits {:.0f}%, prefill rows {:.1f}%, "
               "KV {:.1f} MiB",
               nt, len, resolved.describe(), median(pf), 1000.0 * len / median(pf), median(dc),
               attn_ms, select_ms, 100 * last.selected_fraction(), 100 * last.hit_rate(),
               100 * last.prefill_row_fraction(), kv_bytes / 1048576.0);
      results.push_back(r);
    }
   }
  }
  // Side-by-side ratios to dense at the same threads and length.
  for (auto& r : results) {
    for (const auto& d : results) {
      if (d["policy"] == "dense" && d["threads"] == r["threads"] && d["prompt_tokens"] == r["prompt_tokens"]) {
        r["decode_vs_dense"] = r["decode_tok_s"].get<double>() / d["decode_tok_s"].get<double>();
        r["prefill_vs_dense"] = r["prefill_tok_s"].get<double>() / d["prefill_tok_s"].get<double>();
        r["kv_bytes_vs_dense"] = static_cast<double>(r["kv_bytes"].get<int64_t>()) / d["kv_bytes"].get<int64_t>();
      }
    }
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j = {{"engine", "sieve"},       {"model", lm.path},     {"arch", model.hp.arch},
                      {"n_batch", o.n_batch},    {"reps", o.reps},       {"date", date},
                      {"cpu_features", cpu_features_string()},          {"backend", o.backend},
                      {"device", device},                               {"results", results}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("-m,--model", o->model.model, "GGUF file or known model name (default: smollm2)");
  app.add_option("--threads-list", o->threads, "thread counts to measure")->delimiter(',');
  app.add_option("--lengths", o->lengths, "prompt lengths")->delimiter(',');
  app.add_option("--n-decode", o->n_decode, "tokens decoded after the prompt")->check(CLI::Range(1, 100000));
  app.add_option("--batch", o->n_batch, "prefill chunk size")->check(CLI::Range(1, 1 << 16));
  app.add_option("--reps", o->reps, "measured repetitions (median reported)")->check(CLI::Range(1, 100));
  app.add_option("--warmup", o->warmup, "warm-up runs before measuring")->check(CLI::Range(0, 10));
  app.add_option("--policies", o->policies, "attention policies to compare, each NAME or NAME:key=value:... (dense first for ratios)")->delimiter(',');
  app.add_option("--set", o->sets, "policy knob key=value for every policy but dense (repeatable)");
  app.add_option("--head-plan", o->head_plan, "head plan of the rtpurbo policy (sieve calibrate)");
  app.add_option("-f,--file", o->file, "prompt text, repeated to each length (default: synthetic ids)");
  app.add_option("--dense-prefill", o->dense_prefill,
                 "prefill the dense rows with this policy to save time at long lengths; dense decode "
                 "reads every key whatever they hold, so its decode speed is unchanged");
  add_backend_flag(app, o->backend);
  app.add_flag("--engine", o->engine,
               "engine core instead: repeated-prompt prefix hit and N concurrent sequences");
  app.add_option("--prefix-len", o->prefix_len, "--engine: repeated prompt length")->check(CLI::Range(16, 1 << 20));
  app.add_option("--concurrency", o->concurrency, "--engine: concurrent sequences to compare")->delimiter(',');
  app.add_option("--conc-prompt", o->conc_prompt, "--engine: prompt length per sequence")->check(CLI::Range(1, 1 << 20));
  return [o]() {
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
      for (int32_t c : e.concurrency) if (c < 1 || c > 256) throw UserError("--concurrency values must be in [1, 256]");
      return run_engine_bench(e);
    }
    for (int32_t t : o->threads) if (t < 1 || t > 1024) throw UserError("thread counts must be in [1, 1024]");
    for (int32_t l : o->lengths) if (l < 1 || l > (1 << 22)) throw UserError("prompt lengths must be in [1, 4M]");
    return run(*o);
  };
}

SIEVE_COMMAND("bench", "measure prefill and decode tokens/s (JSON)", setup);

}  // namespace
}  // namespace sieve::cli
