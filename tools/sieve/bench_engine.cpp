#include "bench_engine.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/kv_binding.h"

namespace sieve::cli {
namespace {

std::vector<int32_t> make_prompt(const Model& m, const std::string& file, int32_t len,
                                 int32_t salt) {
  std::vector<int32_t> ids;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UserError("cannot read the prompt file " + file);
    std::stringstream ss;
    ss << in.rdbuf();
    ids = m.tokenizer->encode(ss.str(), m.tokenizer->add_bos(), false);
  }
  std::vector<int32_t> p(len);
  for (int32_t i = 0; i < len; ++i) {
    // A different start per salt, so concurrent sequences share no prefix.
    p[i] = ids.size() > 1 ? ids[(i + int64_t{salt} * 997) % ids.size()]
                          : 100 + (i * 7919 + salt * 104729) % std::min(m.hp.n_vocab - 100, 30000);
  }
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_engine_bench(const EngineBenchOptions& o) {
  auto loaded = load_model(o.model_path);
  if (!loaded) throw UserError(loaded.message());
  std::shared_ptr<const Model> model(std::move(loaded.value()));
  nlohmann::json out = {{"engine", "sieve"}, {"model", o.model_path}, {"threads", o.threads}};

  // 1. A repeated prompt: the second prefill is served from the prefix cache.
  {
    ThreadPool pool(o.threads);
    SequenceEngineConfig sc;
    sc.n_ctx = o.prefix_len + 16;
    sc.pool = &pool;
    auto gen = SequenceEngine::create(model, sc);
    if (!gen) throw UserError(gen.message());
    const std::vector<int32_t> prompt = make_prompt(*model, o.file, o.prefix_len, 0);
    GenerateOptions g;
    g.n_predict = 1;
    g.policy = std::make_shared<const PolicyConfig>(*make_policy("dense"));
    double ms[2] = {0, 0};
    int64_t cached[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      auto st = (*gen)->generate(prompt, g, [](int32_t) { return true; });
      if (!st) throw UserError(st.message());
      ms[i] = st->prefill_ms;
      cached[i] = st->cached_tokens;
    }
    out["prefix"] = {{"prompt_tokens", o.prefix_len},
                     {"first_prefill_ms", ms[0]},
                     {"second_prefill_ms", ms[1]},
                     {"second_cached_tokens", cached[1]},
                     {"speedup", ms[0] / ms[1]}};
    log_info("prefix: {} tokens, first {:.1f} ms, second {:.1f} ms ({} cached) -> {:.1f}x",
             o.prefix_len, ms[0], ms[1], cached[1], ms[0] / ms[1]);
  }

  // 2. N concurrent sequences through the engine: aggregate decode tokens/s.
  nlohmann::json conc = nlohmann::json::array();
  for (int32_t n : o.concurrency) {
    EngineConfig ec;
    ec.threads = o.threads;
    ec.n_ctx = o.prompt_len + o.n_decode + 16;
    ec.max_running = n;
    ec.max_batch_tokens = std::max(512, n);
    ec.prefix_cache = false;
    ec.default_policy = std::make_shared<const PolicyConfig>(*make_policy("dense"));
    auto eng = Engine::create(model, ec);
    if (!eng) throw UserError(eng.message());
    std::mutex mu;
    std::condition_variable cv;
    int32_t finished = 0;
    int64_t tokens_after_all_prefilled = 0;
    std::chrono::steady_clock::time_point t_decode;
    bool all_prefilled = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < n; ++i) {
      RequestParams rp;
      rp.prompt = make_prompt(*model, o.file, o.prompt_len, i + 1);
      rp.max_tokens = o.n_decode;
      rp.stop_at_eog = false;
      (*eng)->submit(rp, [&](const RequestEvent& ev) {
        std::lock_guard<std::mutex> lock(mu);
        if (ev.finished) {
          ++finished;
          cv.notify_all();
          return;
        }
        // Decode throughput is counted from the moment every sequence has its first token
        // (all prompts prefilled), so prefill time does not dilute it.
        if (ev.token >= 0 && all_prefilled) ++tokens_after_all_prefilled;
      });
    }
    // Poll: all prompts are prefilled once generated_tokens >= n (each has its first token).
    for (;;) {
      if ((*eng)->stats().generated_tokens >= n) {
        std::lock_guard<std::mutex> lock(mu);
        all_prefilled = true;
        t_decode = std::chrono::steady_clock::now();
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return finished == n; });
    }
    const double dt = seconds_since(t_decode);
    const double total = seconds_since(t0);
    const double tok_s = tokens_after_all_prefilled / dt;
    conc.push_back({{"sequences", n},
                    {"prompt_tokens", o.prompt_len},
                    {"n_decode", o.n_decode},
                    {"decode_tok_s", tok_s},
                    {"wall_s", total}});
    log_info("concurrency {}: aggregate decode {:.1f} tok/s ({} tokens in {:.2f} s)", n, tok_s,
             tokens_after_all_prefilled, dt);
  }
  for (auto& c : conc)
    c["vs_one"] = c["decode_tok_s"].get<double>() / conc[0]["decode_tok_s"].get<double>();
  out["concurrency"] = conc;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace sieve::cli
