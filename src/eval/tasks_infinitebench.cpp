// InfiniteBench's retrieval tasks (OpenBMB/InfiniteBench data/construct_synthetic_dataset.py,
// src/prompt.py): passkey and number_string in repeated noise lines, kv_retrieval over a JSON
// object of UUID pairs. Prompts are the open-model ones (yarn-mistral style, ending with an
// answer prefix the model continues). The needle position sweeps the context across samples.
#include <algorithm>
#include <cmath>
#include <set>

#include "eval/eval_rng.h"
#include "eval/task.h"
#include "eval/word_lists.h"

namespace sieve::eval {
namespace {

constexpr std::string_view k_retrieval_preface =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information.\n\n";

// Needle line index for a target depth among `lines` noise lines (0 = before the first line).
int64_t line_at_depth(double depth, int64_t lines) {
  const double d = std::clamp(depth < 0 ? 50.0 : depth, 0.0, 100.0);
  return std::clamp<int64_t>(std::llround(d / 100.0 * static_cast<double>(lines)), 0, lines);
}

class NoiseNeedleTask final : public Task {
 public:
  // passkey: 5 random digits; number_string: 10 digits with adjacent repeats.
  explicit NoiseNeedleTask(bool number_string) : number_string_(number_string) {
    info_.name = number_string ? "number_string" : "passkey";
    info_.suite = "infinitebench";
    info_.metric = Metric::first_int_match;
    info_.max_new_tokens = number_string ? 12 : 6;
    info_.depth_sweep = true;
    info_.description = number_string ? "a 10-digit sequence hidden in repeated noise lines"
                                      : "a 5-digit pass key hidden in repeated noise lines";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t units_guess(int64_t tokens) const override { return tokens / 25; }
  // The first words of one more noise line after the last (all of them: the line's newline
  // is what a unit has more).
  int64_t max_pad() const override { return noise_sentence_words; }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext&) const override {
    Rng rng(s.seed);
    std::string key = rng.digits(5);
    if (number_string_) {
      // InfiniteBench: five times, duplicate a random digit in place.
      for (int k = 0; k < 5; ++k) {
        const auto pos = static_cast<size_t>(rng.uniform_int(0, 5 + k - 1));
        key.insert(key.begin() + static_cast<std::ptrdiff_t>(pos), key[pos]);
      }
    }
    const std::string needle =
        number_string_ ? "The sequence of digits is " + key + ". Remember it. " + key +
                             " is the sequence of digits.\n"
                       : "The pass key is " + key + ". Remember it. " + key + " is the pass key.\n";
    const std::string noise = std::string(noise_sentence) + "\n";
    const int64_t j = line_at_depth(s.target_depth, units);
    std::string context;
    context.reserve(static_cast<size_t>(units + 1) * noise.size());
    for (int64_t i = 0; i < j; ++i) context += noise;
    context += needle;
    for (int64_t i = j; i < units; ++i) context += noise;
    context += noise_words(pad);  // a line cut short; the question follows after "\n\n"
    TaskText t;
    t.input = std::string(k_retrieval_preface) + context + "\n\n" +
              (number_string_ ? "What is the sequence of digits?" : "What is the pass key?");
    t.answer_prefix = number_string_ ? "\n\nThe sequence of digits is" : "\n\nThe pass key is";
    t.answers = {key};
    t.depth = depth_of(context, needle);
    return t;
  }

 private:
  bool number_string_;
  TaskInfo info_;
};

class KvRetrievalTask final : public Task {
 public:
  KvRetrievalTask() {
    info_.name = "kv_retrieval";
    info_.suite = "infinitebench";
    info_.metric = Metric::kv_word_match;
    info_.max_new_tokens = 50;
    info_.depth_sweep = true;
    info_.description = "the value of one key in a JSON object of UUID -> UUID pairs";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t units_guess(int64_t tokens) const override { return tokens / 55; }
  // One more pair cut short: pad p gives it a key of the first min(p, 36) characters of a
  // UUID and a value of the first p - 36 (so the JSON stays valid and no key repeats).
  int64_t max_pad() const override { return 2 * 36 - 1; }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext&) const override {
    Rng rng(s.seed);
    std::set<std::string> used;
    const std::string key = rng.uuid4(), value = rng.uuid4();
    used.insert(key);
    // The gold pair sits at the target depth among the pairs (InfiniteBench sweeps ans_id).
    const int64_t gold = std::min(line_at_depth(s.target_depth, units), units - 1);
    std::string pairs, gold_text;
    for (int64_t i = 0; i < units; ++i) {
      std::string k, v;
      if (i == gold) {
        k = key;
        v = value;
      } else {
        do {
          k = rng.uuid4();
        } while (!used.insert(k).second);
        v = rng.uuid4();
      }
      const std::string pair = "\"" + k + "\": \"" + v + "\"";
      if (i == gold) gold_text = pair;
      pairs += (i ? ", " : "") + pair;
    }
    std::string pad_key, pad_value;  // drawn whatever the pad
    do {
      pad_key = rng.uuid4();
    } while (used.count(pad_key));
    pad_value = rng.uuid4();
    if (pad > 0) {
      pairs += ", \"" + pad_key.substr(0, static_cast<size_t>(std::min<int64_t>(pad, 36))) +
               "\": \"" + pad_value.substr(0, static_cast<size_t>(std::max<int64_t>(pad - 36, 0))) +
               "\"";
    }
    const std::string context = "JSON data:\n{" + pairs + "}";
    TaskText t;
    t.input = "Extract the value corresponding to the specified key in the JSON object below.\n\n" +
              context + "\n\n\nKey: \"" + key + "\"";
    t.answer_prefix = "\nThe value associated with the specified key is: ";
    t.answers = {value};
    t.depth = depth_of(context, gold_text);
    return t;
  }

 private:
  TaskInfo info_;
};

}  // namespace

std::vector<std::string> infinitebench_task_names() {
  return {"passkey", "number_string", "kv_retrieval"};
}

std::unique_ptr<Task> make_infinitebench_task(std::string_view name) {
  if (name == "passkey") return std::make_unique<NoiseNeedleTask>(false);
  if (name == "number_string") return std::make_unique<NoiseNeedleTask>(true);
  if (name == "kv_retrieval") return std::make_unique<KvRetrievalTask>();
  return nullptr;
}

}  // namespace sieve::eval
