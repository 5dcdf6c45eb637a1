// Needle in a haystack over a depth x length grid (after gkamradt's LLMTest_NeedleInAHaystack):
// one needle placed at an exact depth of the essay haystack, at a sentence boundary. The
// original's LLM judge is replaced by a checkable answer: the needle carries a random 7-digit
// number for a random key, scored by exact substring match (RULER-style).
#include <algorithm>
#include <cmath>

#include "eval/eval_rng.h"
#include "eval/task.h"
#include "eval/word_lists.h"

namespace sieve::eval {
namespace {

class NiahGridTask final : public Task {
 public:
  NiahGridTask() {
    info_.name = "niah";
    info_.suite = "niah";
    info_.metric = Metric::string_match_all;
    info_.max_new_tokens = 32;
    info_.needs_essays = true;
    info_.depth_sweep = true;
    info_.description =
        "needle-in-a-haystack grid: one needle at each requested depth of the essays";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t units_guess(int64_t tokens) const override { return tokens * 3 / 4; }

  // The first letters of the next essay word.
  int64_t max_pad() const override { return 6; }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext& tc) const override {
    if (!tc.essays) return make_error("task niah needs the essay corpus, which is not loaded");
    Rng rng(s.seed);
    const auto adj = adjectives();
    const auto noun = nouns();
    const std::string key =
        adj[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(adj.size()) - 1))] + "-" +
        noun[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(noun.size()) - 1))];
    const std::string value = std::to_string(rng.uniform_int(1'000'000, 9'999'999));
    const std::string needle = "The special magic number for " + key + " is: " + value + ".";

    const std::vector<std::string> sents = split_sentences(tc.essays->first_words(units, pad));
    const double depth = std::clamp(s.target_depth < 0 ? 50.0 : s.target_depth, 0.0, 100.0);
    // int(len * depth / 100) as the original; the needle goes before that sentence, so it
    // always sits at a sentence boundary (depth 100: after the last sentence).
    const auto at = static_cast<size_t>(static_cast<double>(sents.size()) * depth / 100.0);
    std::string context;
    for (size_t i = 0; i <= sents.size(); ++i) {
      if (i == at) context += (context.empty() ? "" : " ") + needle;
      if (i < sents.size()) context += (context.empty() ? "" : " ") + sents[i];
    }
    TaskText t;
    t.input =
        "You are a helpful AI bot that answers questions for a user. Keep your response short and "
        "direct.\n\n" +
        context + "\n\nWhat is the special magic number for " + key +
        "? Don't give information outside the document or repeat your findings.";
    t.answer_prefix = "\n\nThe special magic number for " + key + " is";
    t.answers = {value};
    t.depth = depth_of(context, needle);
    return t;
  }

 private:
  TaskInfo info_;
};

}  // namespace

std::unique_ptr<Task> make_niah_grid_task() {
  return std::make_unique<NiahGridTask>();
}

}  // namespace sieve::eval
