// From a task instance to the tokens the model sees, and the length search that makes a
// sample fill its context: the largest haystack for which
//   prompt tokens + max_new_tokens <= ctx
// with the model's own tokenizer, as RULER's generators do, then topped up with filler
// pieces so that the prompt ends within a token or two of that budget.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "eval/task.h"
#include "model/tokenizer.h"

namespace sieve::eval {

// raw: the text is input + answer_prefix, tokenized as is (RULER's "base" template).
// chat: the input is the user turn of the model's chat template, and the answer prefix
// (leading whitespace removed) starts the assistant turn, as RULER's chat templates do.
enum class PromptFormat { raw, chat };
std::string_view format_name(PromptFormat f);

struct RenderedPrompt {
  std::string text;
  std::vector<int32_t> tokens;
};

class PromptEncoder {
 public:
  PromptEncoder(const Tokenizer& tok, PromptFormat format) : tok_(tok), format_(format) {}
  PromptFormat format() const { return format_; }
  const Tokenizer& tokenizer() const { return tok_; }
  Result<RenderedPrompt> render(const TaskText& t) const;

 private:
  const Tokenizer& tok_;
  PromptFormat format_;
};

// A sample ready to run.
struct FittedSample {
  SampleSpec spec;
  TaskText text;
  RenderedPrompt prompt;
  int64_t units = 0;  // haystack units chosen
  int64_t pad = 0;    // filler pieces chosen
  int32_t max_new_tokens = 0;
  int32_t probes = 0;  // instances rendered by the search (cost diagnostics)
};

// Renders and tokenizes an instance; the search's only contact with the tokenizer, so tests
// can count tokens their own way.
using RenderFn = std::function<Result<RenderedPrompt>(const TaskText&)>;

// The largest units u >= task.min_units() with tokens(build(u, 0)) + max_new_tokens <= ctx,
// then the largest pad p <= task.max_pad() with tokens(build(u, p)) within the same budget.
// Token counts grow almost linearly with u, so the search interpolates inside a bracket
// (bisecting every third step, in case the count is not smooth) and needs only a handful of
// tokenizations; the pad is bisected. An error when even min_units does not fit, naming the
// task and the lengths.
Result<FittedSample> fit_sample(const Task& task, const SampleSpec& spec, const TaskContext& tc,
                                const RenderFn& render);

}  // namespace sieve::eval
