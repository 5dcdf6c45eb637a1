#include "eval/prompt.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace sieve::eval {

std::string_view format_name(PromptFormat f) {
  return f == PromptFormat::chat ? "chat" : "raw";
}

Result<RenderedPrompt> PromptEncoder::render(const TaskText& t) const {
  RenderedPrompt p;
  if (format_ == PromptFormat::raw) {
    p.text = t.input + t.answer_prefix;
    p.tokens = tok_.encode(p.text, /*add_bos=*/true, /*parse_special=*/false);
    return p;
  }
  const ChatMessage user{"user", t.input};
  auto chat = apply_chat_template(tok_, std::span<const ChatMessage>(&user, 1), true);
  if (!chat) return chat.error();
  std::string_view prefix = t.answer_prefix;
  while (!prefix.empty() && (prefix.front() == ' ' || prefix.front() == '\n'))
    prefix.remove_prefix(1);
  p.text = *chat + std::string(prefix);
  p.tokens = tok_.encode(p.text, /*add_bos=*/true, /*parse_special=*/true);
  return p;
}

Result<FittedSample> fit_sample(const Task& task, const SampleSpec& spec, const TaskContext& tc,
                                const RenderFn& render) {
  const TaskInfo& info = task.info();
  const int64_t budget = static_cast<int64_t>(spec.ctx) - info.max_new_tokens;
  FittedSample best;
  best.spec = spec;
  best.max_new_tokens = info.max_new_tokens;
  std::map<int64_t, int64_t> count;  // units -> prompt tokens
  int32_t probes = 0;
  bool have_best = false;

  auto probe = [&](int64_t u) -> Result<int64_t> {
    if (auto it = count.find(u); it != count.end()) return it->second;
    auto text = task.build(spec, u, 0, tc);
    if (!text) return text.error();
    auto p = render(*text);
    if (!p) return p.error();
    ++probes;
    const auto n = static_cast<int64_t>(p->tokens.size());
    count[u] = n;
    if (n <= budget && (!have_best || u > best.units)) {
      best.units = u;
      best.text = std::move(*text);
      best.prompt = std::move(*p);
      have_best = true;
    }
    return n;
  };

  int64_t lo = task.min_units();
  auto t_lo = probe(lo);
  if (!t_lo) return t_lo.error();
  if (*t_lo > budget) {
    return make_error(
        "context {} is too short for task {}: its smallest instance has {} prompt tokens and {} "
        "more are generated; use a longer --ctx",
        spec.ctx, info.name, *t_lo, info.max_new_tokens);
  }
  int64_t hi = -1;  // smallest known units that do not fit; -1 = none yet
  int64_t t_hi = 0;
  int64_t base_u = lo, base_t = *t_lo;  // the smallest instance, for the first slope estimate
  for (int step = 0; step < 200 && (hi < 0 || hi - lo > 1); ++step) {
    int64_t cand;
    if (hi < 0) {
      if (lo == base_u) {
        cand = std::max(lo + 1, task.units_guess(budget));
      } else {
        // Extend by the slope seen so far; never by less than double the distance when the
        // estimate keeps falling short (keeps the bracket search logarithmic).
        const double slope =
            std::max(1e-3, static_cast<double>(*t_lo - base_t) / static_cast<double>(lo - base_u));
        const auto ext =
            static_cast<int64_t>(std::floor(static_cast<double>(budget - *t_lo) / slope));
        cand = lo + std::max<int64_t>(1, ext);
        if (step % 3 == 2) cand = std::max(cand, lo * 2);
      }
    } else if (step % 3 == 2) {
      cand = lo + (hi - lo) / 2;
    } else {
      const double slope =
          std::max(1e-3, static_cast<double>(t_hi - *t_lo) / static_cast<double>(hi - lo));
      cand = lo + static_cast<int64_t>(std::floor(static_cast<double>(budget - *t_lo) / slope));
      cand = std::clamp(cand, lo + 1, hi - 1);
    }
    auto t = probe(cand);
    if (!t) return t.error();
    if (*t <= budget) {
      lo = cand;
      t_lo = *t;
    } else {
      hi = cand;
      t_hi = *t;
    }
  }

  // Top-up: the units leave up to one unit's tokens unused; filler pieces close the gap.
  // Bisection on the pad, then a few pads above the result: a piece can merge with its
  // neighbour, so the count is not quite monotonic in the pad.
  const int64_t units = best.units;
  const auto n_best = [&] { return static_cast<int64_t>(best.prompt.tokens.size()); };
  const auto try_pad = [&](int64_t p) -> Result<bool> {  // true: fits
    auto text = task.build(spec, units, p, tc);
    if (!text) return text.error();
    auto rendered = render(*text);
    if (!rendered) return rendered.error();
    ++probes;
    const auto n = static_cast<int64_t>(rendered->tokens.size());
    if (n > budget) return false;
    if (n > n_best() || (n == n_best() && p < best.pad)) {
      best.pad = p;
      best.text = std::move(*text);
      best.prompt = std::move(*rendered);
    }
    return true;
  };
  int64_t pad_lo = 0, pad_hi = task.max_pad() + 1;  // fits at pad_lo; pad_hi is out of range
  while (pad_hi - pad_lo > 1 && n_best() < budget) {
    const int64_t p = pad_lo + (pad_hi - pad_lo) / 2;
    auto fits = try_pad(p);
    if (!fits) return fits.error();
    (*fits ? pad_lo : pad_hi) = p;
  }
  for (int64_t p = pad_lo + 1; p <= std::min(pad_lo + 8, task.max_pad()) && n_best() < budget;
       ++p) {
    if (p == pad_hi) continue;  // known not to fit
    auto fits = try_pad(p);
    if (!fits) return fits.error();
  }
  best.probes = probes;
  return best;
}

}  // namespace sieve::eval
