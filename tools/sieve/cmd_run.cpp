// sieve run: answer a prompt (optionally about a document) with streaming output.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "core/text_file.h"
#include "model_cache.h"
#include "run_common.h"

namespace sieve::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  std::string prompt, file;
  bool chat = false;
  int32_t n_predict = 256;
  SamplingFlags sampling;
  PolicyFlags policy;
  bool json = false;
  std::string backend = "cpu";
};

// Holds back an incomplete UTF-8 sequence at the end so that streamed text never splits a
// character across writes.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 4) {
    const unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {
      const int len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 1;
      return (n - (i - 1)) >= static_cast<size_t>(len) ? n : i - 1;
    }
    --i;
    ++back;
  }
  return n;
}

int run(const RunOptions& o) {
  if (o.prompt.empty() && o.file.empty())
    throw UserError("nothing to answer: give -p TEXT and/or -f FILE");
  std::string document;
  if (!o.file.empty()) {
    // A regular file under a bound (a directory read as empty and answered; /dev/zero never
    // ended), and one with text: an empty document is a mistake, not a prompt.
    auto text = read_text_file(o.file, "document");
    if (!text) throw UserError(text.message());
    if (text->find_first_not_of(" \t\r\n") == std::string::npos)
      throw UserError("the document " + o.file + " is empty");
    document = std::move(*text);
  }
  const PolicyPtr policy = policy_from_flags(o.policy);
  LoadedModel lm = load_for_run(o.model);
  const Tokenizer& tok = *lm.model->tokenizer;
  const std::string text = build_prompt_text(*lm.model, document, o.prompt, o.chat);
  std::vector<int32_t> ids = tok.encode(text, tok.add_bos(), o.chat);
  log_debug("prompt: {} tokens", ids.size());

  GenerateOptions g;
  g.n_predict = o.n_predict;
  g.sampling = o.sampling.params();
  g.policy = policy;
  const bool tty = isatty(2) && !o.json;
  if (tty && ids.size() > 1024) {
    g.on_prefill_progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\rprefill %lld/%lld tokens", static_cast<long long>(done),
                   static_cast<long long>(total));
      if (done == total) std::fprintf(stderr, "\r\033[K");
    };
  }
  std::string out, pending;
  std::vector<int32_t> out_ids;
  auto on_token = [&](int32_t t) {
    out_ids.push_back(t);
    const std::string piece = tok.token_to_piece(t);
    out += piece;
    if (!o.json) {
      pending += piece;
      const size_t n = complete_utf8_prefix(pending);
      std::fwrite(pending.data(), 1, n, stdout);
      std::fflush(stdout);
      pending.erase(0, n);
    }
    return true;
  };
  // One engine, on either backend; on_token runs on its thread while this one waits.
  SequenceEngineOptions so;
  so.n_ctx = lm.n_ctx;
  so.pool = lm.pool.get();
  auto se = make_sequence_engine(*lm.model, o.backend, so);
  const GenerateStats st = generate_or_throw(*se, ids, g, on_token);
  const std::string device = device_of(*se);
  if (o.json) {
    nlohmann::json j;
    j["text"] = out;
    j["prompt_tokens"] = st.prompt_tokens;
    j["completion_tokens"] = st.completion_tokens;
    j["stats"] = {{"prefill_ms", st.prefill_ms},
                  {"decode_ms", st.decode_ms},
                  {"prefill_tok_s", st.prefill_tok_s()},
                  {"decode_tok_s", st.decode_tok_s()},
                  {"kv_bytes", st.kv_bytes},
                  {"policy", st.policy},
                  {"selected_fraction", st.sparse.selected_fraction()},
                  {"mean_selected_tokens", st.sparse.mean_selected()},
                  {"selection_cache_hit_rate", st.sparse.hit_rate()},
                  {"selection_cache_lookups", st.sparse.cache_lookups},
                  {"bytes_read", st.sparse.bytes_read},
                  {"tokens_evicted", st.sparse.tokens_evicted},
                  {"prefill_row_fraction", st.sparse.prefill_row_fraction()},
                  {"prefill_tokens_dropped", st.sparse.prefill_dropped},
                  {"kv_bytes_per_token_full_layers", st.kv_bytes_per_token_full},
                  {"kv_bytes_window_layers_max", st.kv_bytes_window_max},
                  {"n_layers_full", st.n_layers_full},
                  {"n_layers_window", st.n_layers_window},
                  {"n_kv_streams_window", st.n_streams_window},
                  {"cached_tokens", st.cached_tokens},
                  {"threads", lm.pool->size()},
                  {"n_ctx", lm.n_ctx},
                  {"backend", o.backend},
                  {"device", device},
                  {"stopped_by_eog", st.stopped_by_eog},
                  {"model", lm.path}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(pending.data(), 1, pending.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    if (log_level() <= LogLevel::info) {
      const std::string where =
          o.backend == "cuda" ? device : std::to_string(lm.pool->size()) + " threads";
      std::fprintf(
          stderr,
          "[sieve] prompt %lld tok, prefill %.0f ms (%.1f tok/s) | %lld tok, decode %.0f ms "
          "(%.1f tok/s) | KV %.1f MiB | policy %s | read %.1f%% of KV, cache hits %.0f%%, "
          "evicted %lld, prefill rows %.1f%% | %s\n",
          static_cast<long long>(st.prompt_tokens), st.prefill_ms, st.prefill_tok_s(),
          static_cast<long long>(st.completion_tokens), st.decode_ms, st.decode_tok_s(),
          st.kv_bytes / 1048576.0, st.policy.c_str(), 100.0 * st.sparse.selected_fraction(),
          100.0 * st.sparse.hit_rate(), static_cast<long long>(st.sparse.tokens_evicted),
          100.0 * st.sparse.prefill_row_fraction(), where.c_str());
    }
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  add_model_flags(app, o->model);
  app.add_option("-p,--prompt", o->prompt,
                 "the prompt, or the question about the document given with -f");
  app.add_option("-f,--file", o->file, "a document to answer questions about (text file)");
  app.add_flag("--chat", o->chat, "format the prompt with the model's chat template");
  app.add_option("-n,--n-predict", o->n_predict, "max tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  add_sampling_flags(app, o->sampling);
  add_policy_flags(app, o->policy);
  add_backend_flag(app, o->backend);
  app.add_flag("--json", o->json, "print one JSON object on stdout instead of streaming text");
  return [o]() { return run(*o); };
}

SIEVE_COMMAND("run", "generate text for a prompt, optionally about a document (-f)", setup);

}  // namespace
}  // namespace sieve::cli
