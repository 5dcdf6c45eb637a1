#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"
#include "engine/sparse_seq.h"

namespace sieve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
    default:
      return "none";
  }
}

struct Scheduler::Req {
  RequestId id = 0;
  RequestParams p;
  RequestCallback cb;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> tokens;  // prompt + generated: what the KV must end up holding
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  bool has_seq = false;
  KvSeqId seq = 0;
  int32_t cached_tokens = 0;  // from the prefix cache at first admission
  bool admitted_once = false;
  bool cancelled = false;
  bool done = false;
  int32_t n_preempted = 0;
  std::string held;     // generated text not yet released (stop-string prefix, UTF-8 tail)
  PolicyConfig policy;  // resolved (auto -> a preset) at submit
  std::unique_ptr<SparseSeq> sparse;          // nullptr for dense; rebuilt at every admission
  PolicyConfig prefill_policy;                // p.prefill_policy resolved (when set)
  std::unique_ptr<SparseSeq> prefill_sparse;  // its state, for the prompt's chunks
  int64_t kv_bytes = 0;                       // KV held at the last step
  std::chrono::steady_clock::time_point t_submit;
  double ttft_ms = 0;
  double queue_ms = 0;                   // submit -> first admission
  uint64_t arrival = 0;                  // submit order: the tie-break after priority
  std::vector<PromptLogprob> prompt_lp;  // prompt_logprobs: tokens 1.. scored so far
  bool prompt_lp_sent = false;
  // Prompt tokens still to score: their rows are computed (all_logits) and the prefix cache
  // is not used, so that every prompt position runs through the model.
  bool scoring_prompt() const {
    return p.prompt_logprobs && static_cast<int32_t>(prompt_lp.size()) < n_prompt - 1;
  }
};

namespace {

// log p(tok) and the top n alternatives from one row of raw logits: log-softmax at
// temperature 1, before penalties, as OpenAI reports (generated and prompt tokens alike).
PromptLogprob token_logprobs(const float* logits, int32_t V, int32_t tok, int32_t n_top) {
  float mx = logits[0];
  for (int32_t v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
  double sum = 0;
  for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  PromptLogprob out;
  out.logprob = logits[tok] - lse;
  const int32_t k = std::min(n_top, V);
  if (k > 0) {
    std::vector<int32_t> ids(V);
    for (int32_t v = 0; v < V; ++v) ids[v] = v;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int32_t i = 0; i < k; ++i) out.top.push_back({ids[i], logits[ids[i]] - lse});
  }
  return out;
}

// The one order of the scheduler: priority (lower first), then arrival.
template <class R>
bool runs_before(const R& a, const R& b) {
  return a.p.priority != b.p.priority ? a.p.priority < b.p.priority : a.arrival < b.arrival;
}

}  // namespace

void StepTimeBuckets::observe(double ms) {
  size_t i = 0;
  while (i < kUpperMs.size() && ms > kUpperMs[i]) ++i;
  count[i]++;
  sum_ms += ms;
  n++;
}

Scheduler::Scheduler(const Model& model, ThreadPool& pool, KvStore& kv, const SchedulerConfig& cfg,
                     const SketchProjection* sketch)
    : model_(model),
      kv_(kv),
      cfg_(cfg),
      sketch_(sketch),
      own_runner_(std::make_unique<Forward>(model, pool, kv, sketch)),
      runner_(*own_runner_) {
  normalize_config();
}

Scheduler::Scheduler(const Model& model, ModelRunner& runner, KvStore& kv,
                     const SchedulerConfig& cfg, const SketchProjection* sketch)
    : model_(model), kv_(kv), cfg_(cfg), sketch_(sketch), runner_(runner) {
  normalize_config();
}

void Scheduler::normalize_config() {
  if (cfg_.n_ctx <= 0) cfg_.n_ctx = model_.hp.n_ctx_max();
  cfg_.max_batch_tokens = std::max(1, cfg_.max_batch_tokens);
  cfg_.prefill_chunk = std::max(1, std::min(cfg_.prefill_chunk, cfg_.max_batch_tokens));
  cfg_.max_running = std::max(1, cfg_.max_running);
}

Scheduler::~Scheduler() {
  for (auto& r : running_) release_kv(*r);
}

Status Scheduler::check_policy(const PolicyConfig& p) const {
  SIEVE_TRY(check_policy_for_model(p, model_.hp));
  SIEVE_TRY(check_sketch_compatible(p, model_.hp, sketch_ ? sketch_->spec() : SketchSpec{}));
  SIEVE_TRY(check_uniprefill_layers(p, model_.hp));
  SIEVE_TRY(check_layout_compatible(p, model_.hp, cfg_.layout));
  return runner_.supports(p);
}

RequestId Scheduler::submit(RequestParams params, RequestCallback cb, RequestId id) {
  auto r = std::make_unique<Req>();
  r->id = id ? id : next_id_++;
  r->arrival = next_arrival_++;
  r->t_submit = std::chrono::steady_clock::now();
  r->cb = std::move(cb);
  r->n_prompt = static_cast<int32_t>(params.prompt.size());
  r->tokens = params.prompt;
  r->p = std::move(params);
  std::string err, code = "invalid_request";
  if (r->p.prompt.empty())
    err = "the prompt is empty";
  else if (r->n_prompt >= cfg_.n_ctx) {
    err = fmt::format("the prompt has {} tokens; the context is {} (context_length_exceeded)",
                      r->n_prompt, cfg_.n_ctx);
    code = "context_length_exceeded";
  } else if (r->p.max_tokens < 0)
    err = "max_tokens must be >= 0";
  else if (Status s = validate(r->p.sampling); !s)
    err = s.message();
  else {
    const PolicyConfig base = r->p.policy           ? *r->p.policy
                              : cfg_.default_policy ? *cfg_.default_policy
                                                    : *make_policy("auto");
    r->policy = resolve_auto(base, r->n_prompt);
    if (Status st = check_policy(r->policy); !st) err = st.message();
    if (err.empty() && r->p.prefill_policy) {
      r->prefill_policy = resolve_auto(*r->p.prefill_policy, r->n_prompt);
      if (Status st = check_policy(r->prefill_policy); !st) err = st.message();
    }
  }
  if (err.empty()) {
    for (int32_t t : r->p.prompt) {
      if (t < 0 || t >= model_.hp.n_vocab) {
        err = fmt::format("token id {} is outside the vocabulary [0, {})", t, model_.hp.n_vocab);
        break;
      }
    }
  }
  id = r->id;
  if (!err.empty()) {
    finish(*r, FinishReason::error, err, code);
    return id;
  }
  r->sampler = std::make_unique<Sampler>(r->p.sampling);
  enqueue_waiting(std::move(r));
  stats_.waiting = static_cast<int32_t>(waiting_.size());
  return id;
}

void Scheduler::cancel(RequestId id) {
  for (auto& r : waiting_)
    if (r->id == id) r->cancelled = true;
  for (auto& r : running_)
    if (r->id == id) r->cancelled = true;
}

void Scheduler::release_kv(Req& r) {
  if (!r.has_seq) return;
  Status s = kv_.free_sequence(r.seq);
  SIEVE_ASSERT(s.ok());
  r.has_seq = false;
}

void Scheduler::finish(Req& r, FinishReason reason, const std::string& error,
                       const std::string& error_code) {
  if (r.done) return;
  r.done = true;
  release_kv(r);
  RequestEvent ev;
  ev.id = r.id;
  ev.finished = true;
  ev.reason = reason;
  ev.error = error;
  ev.error_code = error_code;
  // Text held back for a possible stop string is released unless a stop string matched.
  if (reason != FinishReason::error) ev.text = std::move(r.held);
  if (r.p.prompt_logprobs && !r.prompt_lp_sent) {
    ev.prompt_logprobs = std::move(r.prompt_lp);
    r.prompt_lp_sent = true;
  }
  ev.prompt_tokens = r.n_prompt;
  ev.cached_tokens = r.cached_tokens;
  ev.completion_tokens = r.n_generated;
  ev.ttft_ms = r.ttft_ms;
  ev.queue_ms = r.queue_ms;
  ev.n_preempted = r.n_preempted;
  ev.policy = r.policy.describe();
  if (r.sparse) ev.sparse = r.sparse->stats;
  if (r.prefill_sparse) ev.sparse.add(r.prefill_sparse->stats);
  ev.sparse.kv_bytes_held = r.kv_bytes;
  if (reason == FinishReason::cancelled)
    stats_.cancelled++;
  else
    stats_.finished++;
  if (r.cb) r.cb(ev);
}

void Scheduler::preempt(Req& r) {
  release_kv(r);
  r.n_preempted++;
  stats_.preemptions++;
  log_debug("scheduler: preempted request {} ({} tokens to recompute)", r.id, r.tokens.size());
}

void Scheduler::enqueue_waiting(std::unique_ptr<Req> r) {
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), r,
                             [](const auto& a, const auto& b) { return runs_before(*a, *b); });
  waiting_.insert(at, std::move(r));
}

void Scheduler::order_running() {
  std::stable_sort(running_.begin(), running_.end(),
                   [](const auto& a, const auto& b) { return runs_before(*a, *b); });
}

// Priority preemption at admission: `r` (waiting) takes the place of the last running request
// when that one's priority is strictly worse. Equal priorities never preempt each other here
// (first come, first served), so two requests cannot evict each other in turn.
bool Scheduler::preempt_for(const Req& r) {
  if (running_.empty() || running_.back()->p.priority <= r.p.priority) return false;
  preempt(*running_.back());
  enqueue_waiting(std::move(running_.back()));
  running_.pop_back();
  return true;
}

void Scheduler::reap() {
  auto drop_cancelled = [&](auto& list) {
    for (auto& r : list) {
      if (r->cancelled && !r->done) finish(*r, FinishReason::cancelled);
    }
  };
  drop_cancelled(waiting_);
  drop_cancelled(running_);
  std::erase_if(waiting_, [](const auto& r) { return r->done; });
  std::erase_if(running_, [](const auto& r) { return r->done; });
}

void Scheduler::admit() {
  while (!waiting_.empty()) {
    Req& r = *waiting_.front();
    if (static_cast<int32_t>(running_.size()) >= cfg_.max_running) {
      if (preempt_for(r)) continue;
      break;
    }
    // A prompt being scored is computed whole: offered one token, the cache matches nothing.
    const std::span<const int32_t> lookup =
        r.scoring_prompt() ? std::span<const int32_t>(r.tokens).first(1) : r.tokens;
    auto added =
        kv_.add_sequence(lookup, r.p.cache_salt ? *r.p.cache_salt : policy_cache_salt(r.policy));
    if (!added) {
      finish(r, FinishReason::error, added.message());
      waiting_.pop_front();
      continue;
    }
    // Admission by capacity: the whole remaining prompt must fit now, so that admitted
    // prompts do not preempt each other in a loop.
    const int32_t have = added->n_cached;
    const KvAppend app{added->seq, std::span<const int32_t>(r.tokens).subspan(have)};
    auto room = kv_.plan(std::span<const KvAppend>(&app, 1));
    if (!room || !room->fits()) {
      (void)kv_.free_sequence(added->seq);
      // A prompt that needs more pages than the whole pool could never run: refuse it now,
      // not after every running request has left (alone, not fitting means the same).
      if (running_.empty() || (room && room->n_pages_needed > kv_.pool().n_pages())) {
        finish(
            r, FinishReason::error,
            room ? fmt::format("the prompt needs {} KV pages but the pool has only {} ({} "
                               "of them free now); raise the KV memory budget",
                               room->n_pages_needed, kv_.pool().n_pages(), room->n_pages_available)
                 : room.message(),
            room ? "context_length_exceeded" : "");
        waiting_.pop_front();
        continue;
      }
      if (preempt_for(r)) continue;
      break;  // in order: later requests wait behind this one (no starvation)
    }
    r.seq = added->seq;
    r.has_seq = true;
    if (!r.policy.is_dense()) {
      SparseStats kept = r.sparse ? r.sparse->stats : SparseStats{};
      r.sparse = std::make_unique<SparseSeq>(r.policy, model_.hp);
      r.sparse->stats = kept;  // a preempted request keeps counting
      r.sparse->prompt_tokens = r.n_prompt;
    }
    if (r.p.prefill_policy && !r.prefill_policy.is_dense()) {
      SparseStats kept = r.prefill_sparse ? r.prefill_sparse->stats : SparseStats{};
      r.prefill_sparse = std::make_unique<SparseSeq>(r.prefill_policy, model_.hp);
      r.prefill_sparse->stats = kept;
      r.prefill_sparse->prompt_tokens = r.n_prompt;
    }
    if (!r.admitted_once) {
      r.queue_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.t_submit)
              .count();
      r.cached_tokens = have;
      stats_.cached_tokens += have;
      stats_.prompt_tokens += r.n_prompt;
      r.admitted_once = true;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  order_running();
}

void Scheduler::emit_token(Req& r, int32_t tok, const float* logits) {
  RequestEvent ev;
  ev.id = r.id;
  ev.token = tok;
  if (r.sparse) ev.sparse = r.sparse->stats;
  if (r.p.logprobs || r.p.n_logprobs > 0) {
    PromptLogprob lp = token_logprobs(logits, model_.hp.n_vocab, tok, r.p.n_logprobs);
    ev.logprob = lp.logprob;
    ev.top = std::move(lp.top);
  }
  if (r.p.prompt_logprobs && !r.prompt_lp_sent) {
    ev.prompt_logprobs = std::move(r.prompt_lp);
    r.prompt_lp_sent = true;
  }
  if (r.n_generated == 1) {
    r.ttft_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.t_submit)
            .count();
  }
  const bool eog = r.p.stop_at_eog && model_.tokenizer->is_eog(tok);
  if (!eog) r.held += model_.tokenizer->token_to_piece(tok);
  // Stop strings: cut at the first match; otherwise release all but the longest tail that
  // could still begin a stop string, and never split a UTF-8 character.
  for (const std::string& s : r.p.stop) {
    if (s.empty()) continue;
    const size_t at = r.held.find(s);
    if (at != std::string::npos) {
      ev.text = r.held.substr(0, at);
      r.held.clear();
      if (r.cb) r.cb(ev);
      finish(r, FinishReason::stop);
      return;
    }
  }
  size_t keep = 0;
  for (const std::string& s : r.p.stop) {
    for (size_t n = std::min(s.size() - 1, r.held.size()); n > keep; --n) {
      if (r.held.compare(r.held.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  size_t cut = r.held.size() - keep;
  // back off to a UTF-8 boundary
  size_t i = cut;
  int back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(r.held[i - 1]) & 0xC0) == 0x80)
    --i, ++back;
  if (i > 0) {
    const unsigned char c = static_cast<unsigned char>(r.held[i - 1]);
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 1;
    if (cut - (i - 1) < len) cut = i - 1;
  }
  ev.text = r.held.substr(0, cut);
  r.held.erase(0, cut);
  if (r.cb) r.cb(ev);
  if (eog)
    finish(r, FinishReason::stop);
  else if (r.n_generated >= r.p.max_tokens || static_cast<int32_t>(r.tokens.size()) >= cfg_.n_ctx)
    finish(r, FinishReason::length);
}

bool Scheduler::step() {
  // The gauges hold at every exit (requests that finish without running, failed steps).
  struct CountsOnExit {
    Scheduler& s;
    ~CountsOnExit() {
      s.stats_.running = static_cast<int32_t>(s.running_.size());
      s.stats_.waiting = static_cast<int32_t>(s.waiting_.size());
    }
  } counts{*this};
  reap();
  admit();
  stats_.waiting = static_cast<int32_t>(waiting_.size());
  stats_.running = static_cast<int32_t>(running_.size());
  if (running_.empty()) return false;

  // Requests that generate nothing finish after their prompt is known (max_tokens == 0),
  // unless their prompt is to be scored.
  for (auto& r : running_) {
    if (r->p.max_tokens == 0 && !r->scoring_prompt()) finish(*r, FinishReason::length);
  }
  std::erase_if(running_, [](const auto& r) { return r->done; });
  if (running_.empty()) return true;

  // Plan the step: every decode first (one token each), then prefill chunks in (priority,
  // arrival) order, sized to the step's budget (step_planner.h).
  struct Item {
    Req* r;
    int32_t begin, n;
  };
  std::vector<Item> items;
  StepShape decodes;
  std::vector<PrefillSlot> slots;
  std::vector<Req*> slot_req;
  for (auto& rp : running_) {
    Req& r = *rp;
    const int32_t have = kv_.n_tokens(r.seq);
    const int32_t pending = static_cast<int32_t>(r.tokens.size()) - have;
    if (pending <= 0) continue;
    if (pending == 1) {
      if (static_cast<int32_t>(items.size()) >= cfg_.max_batch_tokens) continue;
      items.push_back({&r, have, 1});
      decodes.add_decode(have);
      continue;
    }
    PrefillSlot slot{pending, have, 0};
    // A UniPrefill prompt goes in one chunk of up to up_chunk tokens (its importance comes
    // from the prompt's last tokens): it may overrun this step's budgets, and the decodes
    // planned before it still ride along.
    const SparseSeq* pre = r.p.prefill_policy ? r.prefill_sparse.get() : r.sparse.get();
    if (pre && pre->policy().drops_prefill())
      slot.fixed = prefill_chunk_for(pre->policy(), r.n_prompt, cfg_.prefill_chunk);
    slots.push_back(slot);
    slot_req.push_back(&r);
  }
  PlannerConfig pc;
  pc.max_batch_tokens = cfg_.max_batch_tokens;
  pc.max_chunk = cfg_.prefill_chunk;
  pc.min_chunk = cfg_.min_prefill_chunk;
  pc.row_group = cfg_.row_group;
  // No decode in the step: nobody waits on it, so prefill takes the token budget.
  if (decodes.decode_tokens > 0) {
    pc.max_step_ms =
        cfg_.max_step_ms >= 0 ? cfg_.max_step_ms : auto_step_budget(cost_, pc, decodes, slots);
  }
  const std::vector<int32_t> chunks = plan_prefill_chunks(cost_, pc, decodes, slots);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (chunks[i] > 0) items.push_back({slot_req[i], slots[i].depth, chunks[i]});
  }
  // Reserve all-or-nothing; on no room, preempt the newest running request and retry.
  for (;;) {
    std::vector<KvAppend> apps;
    for (const Item& it : items) {
      apps.push_back({it.r->seq, std::span<const int32_t>(it.r->tokens).subspan(it.begin, it.n)});
    }
    if (apps.empty()) return true;
    auto room = kv_.reserve(apps);
    if (!room) {
      // An engine bug, not user input: fail the requests of this step rather than crash.
      for (const Item& it : items) finish(*it.r, FinishReason::error, room.message());
      std::erase_if(running_, [](const auto& r) { return r->done; });
      return true;
    }
    if (room->fits()) break;
    Req* victim = running_.back().get();
    if (running_.size() == 1) {
      finish(*victim, FinishReason::error,
             fmt::format("the KV pool is too small for this request ({} pages missing); raise the "
                         "KV memory budget",
                         room->n_pages_missing()),
             "context_length_exceeded");
      running_.clear();
      return true;
    }
    preempt(*victim);
    std::erase_if(items, [&](const Item& it) { return it.r == victim; });
    enqueue_waiting(std::move(running_.back()));
    running_.pop_back();
  }

  StepShape shape;  // what runs, after any preemption
  for (const Item& it : items) {
    if (it.n == 1)
      shape.add_decode(it.begin);
    else
      shape.add_prefill(it.n, it.begin);
  }
  const auto t_step = std::chrono::steady_clock::now();
  std::vector<BatchEntry> batch;
  for (const Item& it : items) {
    SparseSeq* sp = it.r->p.prefill_policy && it.begin < it.r->n_prompt ? it.r->prefill_sparse.get()
                                                                        : it.r->sparse.get();
    batch.push_back({it.r->seq, std::span<const int32_t>(it.r->tokens).subspan(it.begin, it.n),
                     it.r->scoring_prompt(), sp});
  }
  Status s = runner_.run(batch, logits_);
  stats_.steps++;
  if (!s) {
    for (const Item& it : items) finish(*it.r, FinishReason::error, s.message());
    std::erase_if(running_, [](const auto& r) { return r->done; });
    return true;
  }
  const int32_t V = model_.hp.n_vocab;
  size_t row0 = 0;  // the first logits row of item i: all_logits entries have one per token
  for (size_t i = 0; i < items.size(); ++i) {
    Req& r = *items[i].r;
    const size_t n_rows = batch[i].all_logits ? static_cast<size_t>(items[i].n) : 1;
    const float* rows = logits_.data() + row0 * static_cast<size_t>(V);
    row0 += n_rows;
    if (batch[i].all_logits) {
      // Row j predicts token begin + j + 1: score the prompt tokens not scored yet.
      for (int32_t j = 0; j < items[i].n; ++j) {
        const int32_t target = items[i].begin + j + 1;
        if (target != static_cast<int32_t>(r.prompt_lp.size()) + 1 || target >= r.n_prompt)
          continue;
        r.prompt_lp.push_back(
            token_logprobs(rows + static_cast<size_t>(j) * V, V, r.tokens[target], r.p.n_logprobs));
      }
    }
    if (r.sparse) {
      if (Status es = sparse_after_step(kv_, r.seq, *r.sparse, model_.hp); !es) {
        finish(r, FinishReason::error, es.message());
        continue;
      }
    }
    r.kv_bytes = kv_bytes_held(kv_, r.seq, r.sparse.get());
    (void)kv_.publish(r.seq);
    if (r.p.on_prefill && items[i].begin < r.n_prompt)
      r.p.on_prefill(std::min(items[i].begin + items[i].n, r.n_prompt), r.n_prompt);
    if (items[i].begin + items[i].n < static_cast<int32_t>(r.tokens.size()))
      continue;                 // more prompt
    if (r.cancelled) continue;  // reaped next step
    if (r.p.max_tokens == 0) {  // a prompt scored, nothing to generate
      finish(r, FinishReason::length);
      continue;
    }
    const float* row = rows + (n_rows - 1) * static_cast<size_t>(V);
    const int32_t tok = r.sampler->sample(std::span<const float>(row, V), r.tokens);
    r.tokens.push_back(tok);
    r.n_generated++;
    stats_.generated_tokens++;
    emit_token(r, tok, row);
  }
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_step).count();
  log_debug(
      "scheduler: step {}: {} decodes, {} prefill tokens, {} keys; predicted {:.1f} ms (budget "
      "{:.1f}), took {:.1f}",
      stats_.steps, shape.decode_tokens, shape.prefill_tokens, shape.kv_reads,
      cost_.predict_ms(shape), pc.max_step_ms, step_ms);
  cost_.observe(shape, step_ms);
  stats_.last_step_ms = step_ms;
  stats_.last_step_prefill_tokens = static_cast<int32_t>(shape.prefill_tokens);
  stats_.step_budget_ms = pc.max_step_ms;
  stats_.step_ms.observe(step_ms);
  stats_.cost_coef = cost_.per_unit();
  std::erase_if(running_, [](const auto& r) { return r->done; });
  stats_.running = static_cast<int32_t>(running_.size());
  stats_.waiting = static_cast<int32_t>(waiting_.size());
  return true;
}

}  // namespace sieve
