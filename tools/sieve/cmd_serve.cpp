// sieve serve: the OpenAI-compatible HTTP server (docs/server.md).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "model_cache.h"
#include "run_common.h"
#include "server/server.h"

namespace sieve::cli {
namespace {

struct ServeOptions {
  ModelOptions model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string alias;
  int32_t max_running = 16;
  int32_t max_batch_tokens = 512;
  std::string max_step_ms = "auto";
  int64_t kv_mib = 0;
  bool no_prefix_cache = false;
  int32_t max_concurrent = 64;
  int32_t max_tokens = 0;
  int64_t max_body_bytes = 32ll << 20;
  int32_t max_conns_per_client = 64;
  int64_t max_inflight_mib = 1024;
  double ping_interval = 15;
  double progress_interval = 1;
  double shutdown_timeout = 30;
  SamplingFlags sampling;
  PolicyFlags policy;
  std::vector<std::string> head_plans;    // --head-plan NAME=FILE | FILE (repeatable)
  std::vector<std::string> sketch_bases;  // --sketch-basis NAME=FILE | FILE (repeatable)
  std::string backend = "cpu";
  double gpu_mem_fraction = 0.9;
};

int serve(CLI::App& app, const ServeOptions& o) {
  if (o.api_key.empty() == false && o.api_key.size() < 8)
    throw UserError("--api-key: use at least 8 characters");
  server::ServerConfig cfg;
  cfg.host = o.host;
  cfg.port = o.port;
  cfg.api_key = o.api_key;
  if (cfg.api_key.empty()) {
    if (const char* k = std::getenv("SIEVE_API_KEY"); k && *k) cfg.api_key = k;
  }
  cfg.model_id = o.alias;
  cfg.engine.model_path =
      resolve_model(o.model.model, o.model.model.empty() || find_known_model(o.model.model));
  cfg.engine.n_ctx = o.model.n_ctx;
  cfg.engine.threads = o.model.threads;
  cfg.engine.max_running = o.max_running;
  cfg.engine.max_batch_tokens = o.max_batch_tokens;
  if (o.max_step_ms == "auto") {
    // The budget's cost model is fitted to CPU steps; the GPU serves with plain token-budget
    // steps until it is measured there (docs/gpu.md).
    cfg.engine.max_step_ms = o.backend == "cuda" ? 0 : -1;
  } else {
    char* end = nullptr;
    const double ms = std::strtod(o.max_step_ms.c_str(), &end);
    if (o.max_step_ms.empty() || *end != '\0' || !(ms >= 0) || ms > 1e6)
      throw UserError("--max-step-ms: expected auto or milliseconds in [0, 1e6], not '" +
                      o.max_step_ms + "'");
    cfg.engine.max_step_ms = ms;
  }
  cfg.engine.kv_budget_bytes = o.kv_mib << 20;
  cfg.engine.prefix_cache = !o.no_prefix_cache;
  cfg.engine.runner_factory = runner_factory_for(o.backend, o.gpu_mem_fraction);
  cfg.engine.prepare_model = [mo = o.model](Model& m) -> Status {
    try {
      apply_rope_flags(mo,
                       m);  // --rope-scaling / --rope-scale / --yarn-* as `sieve run` takes them
    } catch (const UserError& e) {
      return make_error("{}", e.what());
    }
    return {};
  };
  cfg.max_concurrent = o.max_concurrent;
  cfg.max_tokens = o.max_tokens;
  cfg.http.max_body_bytes = o.max_body_bytes;
  cfg.http.max_connections_per_client = o.max_conns_per_client;
  cfg.http.max_inflight_bytes = o.max_inflight_mib << 20;
  if (cfg.http.max_inflight_bytes < o.max_body_bytes)
    throw UserError("--max-inflight-mib must hold at least one --max-body-bytes body");
  cfg.sampling = o.sampling.params();
  cfg.fixed_seed = app.get_option("--seed")->count() > 0;
  // Files a request may name: loaded (and validated) once, here. A plain FILE for --head-plan
  // is also the default policy's plan, as `sieve run --head-plan FILE`.
  PolicyFlags pf = o.policy;
  for (const std::string& spec : o.head_plans) {
    if (Status st = cfg.policy_files.add_head_plan(spec); !st) throw UserError(st.message());
    const size_t eq = spec.find('=');
    const bool named = eq != std::string::npos && spec.find('/') > eq;
    if (!named) {
      if (!pf.head_plan.empty())
        throw UserError("--head-plan: give one plain FILE (the default policy's); name the others");
      pf.head_plan = spec;
    }
  }
  for (const std::string& spec : o.sketch_bases)
    if (Status st = cfg.policy_files.add_sketch_basis(spec); !st) throw UserError(st.message());
  cfg.default_policy = policy_from_flags(pf);
  cfg.ping_interval_s = o.ping_interval;
  cfg.progress_interval_s = o.progress_interval;
  cfg.shutdown_timeout_s = o.shutdown_timeout;

  // Signals are taken by one thread with sigwait (blocked everywhere else, so no handler runs
  // inside the engine or a connection). The first SIGTERM/SIGINT drains; a second exits now.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::Server srv(cfg);
  if (Status s = srv.start(); !s) throw UserError(s.message());
  log_info("server: listening on http://{}:{} (loading {})", cfg.host, srv.port(),
           cfg.engine.model_path);

  // Shared with the signal thread, which outlives this function (it stays in sigwait).
  struct SignalState {
    sigset_t set;
    std::mutex mu;
    std::condition_variable cv;
    int n = 0;
  };
  auto sig = std::make_shared<SignalState>();
  sig->set = set;
  std::thread([sig] {
    for (;;) {
      int s = 0;
      if (sigwait(&sig->set, &s) != 0) continue;
      std::lock_guard<std::mutex> lock(sig->mu);
      if (++sig->n > 1) {
        std::fprintf(stderr, "error: second signal: exiting without draining\n");
        std::_Exit(1);
      }
      sig->cv.notify_all();
    }
  }).detach();

  if (Status s = srv.load(); !s) {
    srv.stop();
    throw UserError(s.message());
  }
  log_info("server: ready on http://{}:{}", cfg.host, srv.port());
  {
    std::unique_lock<std::mutex> lock(sig->mu);
    sig->cv.wait(lock, [&] { return sig->n > 0; });
  }
  log_info("server: draining (up to {} s for in-flight requests)", o.shutdown_timeout);
  const int cancelled =
      srv.drain(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000)));
  if (cancelled)
    log_warn("server: {} request(s) did not finish in time and were aborted", cancelled);
  srv.stop();
  log_info("server: stopped");
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  add_model_flags(app, o->model);
  app.add_option("--host", o->host,
                 "address to bind (default 127.0.0.1; 0.0.0.0 for every interface)");
  app.add_option("--port", o->port, "TCP port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535));
  app.add_option(
      "--api-key", o->api_key,
      "require 'Authorization: Bearer KEY' on every path but /health (or set SIEVE_API_KEY)");
  app.add_option("-a,--alias", o->alias,
                 "model id in /v1/models and responses (default: the file name)");
  app.add_option("--max-running", o->max_running, "sequences the engine decodes together")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-batch-tokens", o->max_batch_tokens,
                 "tokens per engine step (prefill chunk)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option(
      "--max-step-ms", o->max_step_ms,
      "engine step time budget: a running stream waits at most about this long for its next token "
      "while prompts prefill (auto: the shortest step that keeps prefill throughput within 90% of "
      "--max-batch-tokens chunks, from a cost model fitted to measured steps; 0: off, steps are "
      "sized "
      "by --max-batch-tokens only)");
  app.add_option("--kv-mib", o->kv_mib,
                 "KV memory budget in MiB (0: room for max-running full contexts; --backend cuda: "
                 "all the device memory left)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_flag("--no-prefix-cache", o->no_prefix_cache,
               "do not reuse KV of shared prompt prefixes");
  add_backend_flag(app, o->backend);
  app.add_option("--gpu-mem-fraction", o->gpu_mem_fraction,
                 "--backend cuda: share of the GPU's memory for weights, workspaces and KV pages; "
                 "the KV pool gets "
                 "what is left (default 0.9; --kv-mib caps it)")
      ->check(CLI::Range(0.05, 1.0));
  app.add_option("--max-concurrent", o->max_concurrent,
                 "generation requests in flight; more get HTTP 429")
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-tokens", o->max_tokens,
                 "largest max_tokens a request may ask for (0: the context size)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--max-body-bytes", o->max_body_bytes, "largest request body; larger get HTTP 413")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  app.add_option("--max-conns-per-client", o->max_conns_per_client,
                 "open connections one client address may hold; beyond, its oldest idle or "
                 "stalled one is closed (0: no cap; default 64 of the 256 in all)")
      ->check(CLI::Range(0, 256));
  app.add_option("--max-inflight-mib", o->max_inflight_mib,
                 "MiB of request bodies, parsed JSON and token arrays all requests in flight may "
                 "hold together; a request that would exceed it gets HTTP 503 (default 1024)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--ping-interval", o->ping_interval,
                 "seconds between SSE comment pings on a silent stream (0: off)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--progress-interval", o->progress_interval,
                 "seconds between prompt_progress events for requests with return_progress")
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--shutdown-timeout", o->shutdown_timeout,
                 "seconds in-flight requests may finish after SIGTERM")
      ->check(CLI::Range(0.0, 86400.0));
  // Request defaults follow OpenAI's (temperature 1, no top-k/top-p/min-p truncation); the
  // sampling flags change them for requests that leave a field out.
  o->sampling.temp = 1.0f;
  o->sampling.top_k = 0;
  o->sampling.top_p = 1.0f;
  o->sampling.min_p = 0.0f;
  add_sampling_flags(app, o->sampling);
  add_policy_flags(app, o->policy);
  // The server's own --head-plan: repeatable, and what a request's head_plan knob may name.
  app.remove_option(app.get_option("--head-plan"));
  app.add_option("--head-plan", o->head_plans,
                 "register a head plan from `sieve calibrate` as NAME=FILE (a request selects it "
                 "with \"sieve\": {\"head_plan\": NAME}); a plain FILE is also the default "
                 "policy's plan (rtpurbo) and is named by its file name (repeatable)");
  app.add_option("--sketch-basis", o->sketch_bases,
                 "register a sketch basis from `sieve calibrate --sketch-basis` as NAME=FILE (a "
                 "request selects it with \"sieve\": {\"sketch_basis\": NAME}; repeatable)");
  return [o, &app]() { return serve(app, *o); };
}

SIEVE_COMMAND("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)",
              setup);

}  // namespace
}  // namespace sieve::cli
