#include "eval/matrix.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <thread>

#include "eval/eval_rng.h"

namespace sieve::eval {

std::string rope_model_suffix(const RopeScaling& file, const ModelHParams& hp) {
  const RopeScaling& r = hp.rope_scaling;
  const bool same = r.type == file.type && r.factor == file.factor &&
                    r.n_ctx_orig == file.n_ctx_orig && r.ext_factor == file.ext_factor &&
                    r.attn_factor == file.attn_factor && r.beta_fast == file.beta_fast &&
                    r.beta_slow == file.beta_slow;
  if (same) return "";
  if (!r.active()) return "+norope-scaling";
  const bool yarn = r.type == RopeScalingType::yarn;
  std::string t = fmt::format("+{}{:g}", yarn ? "yarn" : "linear", r.factor);
  if (r.n_ctx_orig != hp.n_ctx_train) t += fmt::format("/{}", r.n_ctx_orig);
  const RopeScaling d;  // the other defaults; ext_factor is 1 for YaRN, 0 for linear
  if (r.ext_factor != (yarn ? 1.0f : 0.0f) || r.attn_factor != d.attn_factor ||
      r.beta_fast != d.beta_fast || r.beta_slow != d.beta_slow) {
    t += fmt::format(":ext{:g}:attn{:g}:beta{:g}/{:g}", r.ext_factor, r.attn_factor, r.beta_fast,
                     r.beta_slow);
  }
  return t;
}

Status validate_spec(const MatrixSpec& spec) {
  if (spec.tasks.empty()) return make_error("no tasks to run; give --tasks (e.g. ruler,ib,niah)");
  for (const std::string& t : spec.tasks) {
    if (!find_task(t)) return make_error("unknown task '{}'", t);
  }
  if (spec.lengths.empty()) return make_error("no context lengths; give --ctx (e.g. 1K,2K,4K)");
  for (int32_t L : spec.lengths) {
    if (L < 256)
      return make_error("context length {} is too short; the tasks need at least 256 tokens", L);
  }
  if (spec.policies.empty()) return make_error("no policies; give --policy (e.g. dense)");
  for (size_t i = 0; i < spec.policies.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (policy_label(spec.policies[j]) == policy_label(spec.policies[i]))
        return make_error("policy '{}' is listed twice", policy_label(spec.policies[i]));
    }
  }
  if (spec.n < 1) return make_error("--n {} must be at least 1", spec.n);
  if (spec.grid_n < 1) return make_error("--grid-n {} must be at least 1", spec.grid_n);
  for (double d : spec.depths) {
    if (!(d >= 0 && d <= 100)) return make_error("depth {} is outside 0..100", d);
  }
  return {};
}

SampleRecord planned_record(const SampleSpec& s, const Task& task, const RunIdentity& id,
                            const std::string& format, const std::string& policy,
                            const TaskContext& tc) {
  SampleRecord r;
  r.model = id.model;
  r.backend = id.backend;
  r.format = format;
  r.policy = policy;
  r.task = s.task;
  r.ctx = s.ctx;
  r.index = s.index;
  r.seed = s.seed;
  r.data_version = generator_tag();
  if (task.info().needs_essays && tc.essays) {
    r.data_version += fmt::format("-e{:016x}", tc.essays->fingerprint());
  }
  r.id = sample_id(s);
  r.suite = task.info().suite;
  r.metric = std::string(metric_name(task.info().metric));
  r.target_depth = s.target_depth;
  r.max_new_tokens = task.info().max_new_tokens;
  return r;
}

Result<std::vector<SampleRecord>> run_matrix(const MatrixSpec& spec, const RunIdentity& id,
                                             const TaskContext& tc, const PromptEncoder& enc,
                                             Runner_i& runner, SampleStore& store,
                                             const MatrixEvents& ev) {
  SIEVE_TRY(validate_spec(spec));
  const std::string format(format_name(enc.format()));
  struct Planned {
    const Task* task;
    SampleSpec spec;
    PolicyPtr policy;
    SampleRecord key;
  };
  std::vector<Planned> plan;
  for (const PolicyPtr& policy : spec.policies) {
    const std::string label = policy_label(policy);
    for (int32_t L : spec.lengths) {
      for (const std::string& name : spec.tasks) {
        const Task* task = find_task(name);
        std::vector<SampleSpec> specs =
            plan_samples(*task, L, spec.n, spec.grid_n, spec.depths, spec.seed);
        // Depth sweeps share their haystack: deepest needle first, so that each next prompt
        // shares a long prefix with the one before (the runner's prefix cache serves it).
        if (task->info().depth_sweep) {
          std::stable_sort(specs.begin(), specs.end(),
                           [](const SampleSpec& a, const SampleSpec& b) {
                             return a.target_depth > b.target_depth;
                           });
        }
        for (SampleSpec& s : specs) {
          SampleRecord key = planned_record(s, *task, id, format, label, tc);
          key.stop = spec.stop_at_newline ? "newline" : "";
          plan.push_back({task, std::move(s), policy, std::move(key)});
        }
      }
    }
  }
  int64_t done = 0, work = 0;
  for (const Planned& p : plan) {
    if (store.find(record_key(p.key))) {
      ++done;
    } else {
      work += p.spec.ctx;
    }
  }
  if (ev.planned) ev.planned(static_cast<int64_t>(plan.size()), done, work);

  // Missing samples run in windows of up to max_parallel(), in plan order; their records are
  // appended in plan order once the window is done (a failed one stops the run after the
  // window's finished samples are stored).
  std::vector<std::optional<SampleRecord>> recs(plan.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (const SampleRecord* r = store.find(record_key(plan[i].key))) {
      recs[i] = *r;
    } else {
      missing.push_back(i);
    }
  }
  const size_t window = static_cast<size_t>(std::max<int32_t>(1, runner.max_parallel()));
  std::string last_group;
  const auto render = [&](const TaskText& t) { return enc.render(t); };
  struct Job {
    size_t at = 0;
    FittedSample fitted;
    Result<Completion> done = make_error("not run");
  };
  for (size_t w0 = 0; w0 < missing.size(); w0 += window) {
    std::vector<Job> jobs;
    for (size_t j = w0; j < std::min(missing.size(), w0 + window); ++j) {
      const Planned& p = plan[missing[j]];
      const std::string group = fmt::format("{}|{}|{}", p.key.policy, p.spec.task, p.spec.ctx);
      if (group != last_group && ev.group_started)
        ev.group_started(p.key.policy, p.spec.task, p.spec.ctx);
      last_group = group;
      auto fitted = fit_sample(*p.task, p.spec, tc, render);
      if (!fitted)
        return make_error("{} at {} tokens: {}", p.spec.task, p.spec.ctx, fitted.message());
      jobs.push_back({missing[j], std::move(*fitted), make_error("not run")});
    }
    auto run_one = [&](Job& job) {
      const Planned& p = plan[job.at];
      CompletionRequest req;
      req.tokens = job.fitted.prompt.tokens;
      req.text = job.fitted.prompt.text;
      req.max_new_tokens = job.fitted.max_new_tokens;
      req.policy = p.policy;
      req.stop_at_newline = spec.stop_at_newline;
      job.done = runner.complete(req);
    };
    if (jobs.size() == 1) {
      run_one(jobs[0]);
    } else {
      std::vector<std::thread> threads;
      threads.reserve(jobs.size());
      for (Job& job : jobs) threads.emplace_back(run_one, std::ref(job));
      for (std::thread& t : threads) t.join();
    }
    std::optional<Error> failed;
    for (Job& job : jobs) {
      const Planned& p = plan[job.at];
      const FittedSample& fitted = job.fitted;
      if (!job.done) {
        if (!failed) {
          failed = make_error("{} ({} tokens, policy {}): {}", p.key.id,
                              fitted.prompt.tokens.size(), p.key.policy, job.done.message());
        }
        continue;
      }
      const Completion& c = *job.done;
      SampleRecord r = p.key;
      r.depth = fitted.text.depth;
      r.units = fitted.units;
      r.pad = fitted.pad;
      r.prompt_tokens = static_cast<int64_t>(fitted.prompt.tokens.size());
      uint64_t h = fnv1a64("");
      for (int32_t t : fitted.prompt.tokens) {
        h = fnv1a64(std::string_view(reinterpret_cast<const char*>(&t), sizeof t), h);
      }
      r.prompt_hash = fmt::format("{:016x}", h);
      r.answers = fitted.text.answers;
      r.output = c.text;
      r.score = score(p.task->info().metric, c.text, r.answers);
      r.prefill_tokens = c.prefill_tokens;
      r.reused_tokens = c.reused_tokens;
      r.completion_tokens = c.completion_tokens;
      r.prefill_ms = c.prefill_ms;
      r.decode_ms = c.decode_ms;
      r.selected_fraction = c.selected_fraction;
      r.mean_selected = c.mean_selected;
      r.policy_ran = c.policy;
      r.finished_at = utc_now_iso();
      SIEVE_TRY(store.append(r));
      if (ev.sample_done) ev.sample_done(r, p.spec.ctx);
      recs[job.at] = std::move(r);
    }
    if (failed) return *failed;
  }
  std::vector<SampleRecord> out;
  out.reserve(plan.size());
  for (auto& r : recs) out.push_back(std::move(*r));
  return out;
}

}  // namespace sieve::eval
