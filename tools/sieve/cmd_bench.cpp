// sieve bench: prefill and decode throughput of the dense engine, printed as JSON.
// Method (kept identical to bench/llama_cpp_bench.py so the two compare side by side):
// prefill = N prompt tokens in chunks of --batch into an empty KV; decode = --n-decode
// greedy tokens right after that prompt, each a forward of one token; one warm-up run,
// then the median of --reps runs.
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
  // Deterministic prompt: token ids cycling through the vocabulary's ordinary range.
  std::vector<int32_t> prompt(max_len);
  for (int32_t i = 0; i < max_len; ++i) prompt[i] = 100 + (i * 7919) % std::min(model.hp.n_vocab - 100, 30000);

  nlohmann::json results = nlohmann::json::array();
  for (int32_t nt : o.threads) {
    ThreadPool pool(nt);
    // No prefix cache: every repetition must compute its prompt.
    KvConfig kc = kv_config_for(model.hp, kv_budget_bytes(model.hp, n_ctx, 1, 16), 16, "bench");
    kc.prefix_cache = false;
    auto store = KvStore::create(kc);
    if (!store) throw UserError(store.message());
    KvStore& kv = *store;
    Forward fwd(model, pool, kv);
    for (int32_t len : o.lengths) {
      std::vector<double> pf, dc;
      for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0 is the warm-up
        auto added = kv.add_sequence({});
        if (!added) throw UserError(added.message());
        const KvSeqId seq = added->seq;
        std::vector<float> logits;
        auto t0 = std::chrono::steady_clock::now();
        for (int32_t i = 0; i < len; i += o.n_batch) {
          BatchEntry e;
          e.seq = seq;
          e.tokens = std::span<const int32_t>(prompt.data() + i, std::min(o.n_batch, len - i));
          reserve_or_throw(kv, seq, e.tokens);
          Status s = fwd.run(std::span<const BatchEntry>(&e, 1), logits);
          if (!s) throw UserError(s.message());
        }
        auto t1 = std::chrono::steady_clock::now();
        int32_t tok = argmax(logits);
        for (int32_t g = 0; g < o.n_decode; ++g) {
          BatchEntry e;
          e.seq = seq;
          e.tokens = std::span<const int32_t>(&tok, 1);
          reserve_or_throw(kv, seq, e.tokens);
          Status s = fwd.run(std::span<const BatchEntry>(&e, 1), logits);
          if (!s) throw UserError(s.message());
          tok = argmax(logits);
        }
        auto t2 = std::chrono::steady_clock::now();
        if (Status s = kv.free_sequence(seq); !s) throw UserError(s.message());
        if (rep == 0) continue;
        pf.push_back(len / std::chrono::duration<double>(t1 - t0).count());
        dc.push_back(o.n_decode / std::chrono::duration<double>(t2 - t1).count());
      }
      nlohmann::json r = {{"threads", nt}, {"prompt_tokens", len}, {"prefill_tok_s", median(pf)},
                          {"decode_tok_s", median(dc)}, {"n_decode", o.n_decode}};
      log_info("threads {} prompt {}: prefill {:.1f} tok/s, decode {:.1f} tok/s", nt, len, median(pf), median(dc));
      results.push_back(r);
    }
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j = {{"engine", "sieve"},       {"model", lm.path},     {"arch", model.hp.arch},
                      {"n_batch", o.n_batch},    {"reps", o.reps},       {"date", date},
                      {"cpu_features", cpu_features_string()},          {"results", results}};
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
  return [o]() {
    for (int32_t t : o->threads) if (t < 1 || t > 1024) throw UserError("thread counts must be in [1, 1024]");
    for (int32_t l : o->lengths) if (l < 1 || l > (1 << 22)) throw UserError("prompt lengths must be in [1, 4M]");
    return run(*o);
  };
}

SIEVE_COMMAND("bench", "measure prefill and decode tokens/s (JSON)", setup);

}  // namespace
}  // namespace sieve::cli
