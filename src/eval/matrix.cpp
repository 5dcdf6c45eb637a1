#include "eval/matrix.h"

#include <algorithm>

#include "eval/eval_rng.h"

namespace sieve::eval {

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

  std::vector<SampleRecord> out;
  std::string last_group;
  const auto render = [&](const TaskText& t) { return enc.render(t); };
  for (const Planned& p : plan) {
    const std::string key = record_key(p.key);
    if (const SampleRecord* r = store.find(key)) {
      out.push_back(*r);
      continue;
    }
    const std::string group = fmt::format("{}|{}|{}", p.key.policy, p.spec.task, p.spec.ctx);
    if (group != last_group && ev.group_started)
      ev.group_started(p.key.policy, p.spec.task, p.spec.ctx);
    last_group = group;

    auto fitted = fit_sample(*p.task, p.spec, tc, render);
    if (!fitted)
      return make_error("{} at {} tokens: {}", p.spec.task, p.spec.ctx, fitted.message());
    CompletionRequest req;
    req.tokens = fitted->prompt.tokens;
    req.text = fitted->prompt.text;
    req.max_new_tokens = fitted->max_new_tokens;
    req.policy = p.policy;
    req.stop_at_newline = spec.stop_at_newline;
    auto c = runner.complete(req);
    if (!c)
      return make_error("{} ({} tokens, policy {}): {}", p.key.id, fitted->prompt.tokens.size(),
                        p.key.policy, c.message());

    SampleRecord r = p.key;
    r.depth = fitted->text.depth;
    r.units = fitted->units;
    r.pad = fitted->pad;
    r.prompt_tokens = static_cast<int64_t>(fitted->prompt.tokens.size());
    uint64_t h = fnv1a64("");
    for (int32_t t : fitted->prompt.tokens) {
      h = fnv1a64(std::string_view(reinterpret_cast<const char*>(&t), sizeof t), h);
    }
    r.prompt_hash = fmt::format("{:016x}", h);
    r.answers = fitted->text.answers;
    r.output = c->text;
    r.score = score(p.task->info().metric, c->text, r.answers);
    r.prefill_tokens = c->prefill_tokens;
    r.reused_tokens = c->reused_tokens;
    r.completion_tokens = c->completion_tokens;
    r.prefill_ms = c->prefill_ms;
    r.decode_ms = c->decode_ms;
    r.selected_fraction = c->selected_fraction;
    r.mean_selected = c->mean_selected;
    r.policy_ran = c->policy;
    r.finished_at = utc_now_iso();
    SIEVE_TRY(store.append(r));
    if (ev.sample_done) ev.sample_done(r, p.spec.ctx);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace sieve::eval
