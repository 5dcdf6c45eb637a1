// RULER's synthetic tasks (NVIDIA/RULER scripts/synthetic.yaml): eight NIAH variants, variable
// tracking, common-words and frequent-words extraction. Templates, answer prefixes, needle
// wording and task parameters follow RULER; the random streams are Sieve's (eval_rng.h).
// The qa tasks are absent: their documents (SQuAD, HotpotQA) are not shipped.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "eval/eval_rng.h"
#include "eval/task.h"
#include "eval/word_lists.h"

namespace sieve::eval {
namespace {

enum class Hay { noise, essay, needle };
enum class Kind { words, numbers, uuids };

struct NiahConfig {
  const char* name;
  Hay hay;
  Kind key, value;
  int num_k, num_v, num_q;
  const char* description;
};

constexpr NiahConfig k_niah[] = {
    {"niah_single_1", Hay::noise, Kind::words, Kind::numbers, 1, 1, 1,
     "one needle (word key, 7-digit value) in repeated noise sentences"},
    {"niah_single_2", Hay::essay, Kind::words, Kind::numbers, 1, 1, 1,
     "one needle (word key, 7-digit value) in essays"},
    {"niah_single_3", Hay::essay, Kind::words, Kind::uuids, 1, 1, 1,
     "one needle (word key, UUID value) in essays"},
    {"niah_multikey_1", Hay::essay, Kind::words, Kind::numbers, 4, 1, 1,
     "four needles with different keys in essays, one queried"},
    {"niah_multikey_2", Hay::needle, Kind::words, Kind::numbers, 1, 1, 1,
     "one needle among distractor needles with other word keys"},
    {"niah_multikey_3", Hay::needle, Kind::uuids, Kind::uuids, 1, 1, 1,
     "one UUID->UUID needle among UUID distractor needles"},
    {"niah_multivalue", Hay::essay, Kind::words, Kind::numbers, 1, 4, 1,
     "four values for one key in essays, all to be retrieved"},
    {"niah_multiquery", Hay::essay, Kind::words, Kind::numbers, 4, 1, 4,
     "four keys in essays, all four queried"},
};

constexpr std::string_view k_niah_template =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all "
    "the special magic {type_needle_v} for {query} mentioned in the provided text?";
constexpr std::string_view k_niah_answer_prefix =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";
constexpr std::string_view k_niah_needle =
    "One of the special magic {type_needle_v} for {key} is: {value}.";

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// RULER's singular rewrite, applied to the templates before the context goes in.
std::string singularize(std::string t) {
  t = replace_all(std::move(t), "Some", "A");
  t = replace_all(std::move(t), "are all", "is");
  t = replace_all(std::move(t), "are", "is");
  return replace_all(std::move(t), "answers", "answer");
}

std::string word_key(Rng& rng) {
  const auto adj = adjectives();
  const auto noun = nouns();
  return adj[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(adj.size()) - 1))] + "-" +
         noun[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(noun.size()) - 1))];
}

std::string draw(Kind k, Rng& rng) {
  switch (k) {
    case Kind::words:
      return word_key(rng);
    case Kind::numbers:
      return std::to_string(rng.uniform_int(1'000'000, 9'999'999));
    case Kind::uuids:
      return rng.uuid4();
  }
  return {};
}

// A draw not in `used` (which it joins).
std::string draw_unique(Kind k, Rng& rng, std::set<std::string>& used) {
  for (;;) {
    std::string v = draw(k, rng);
    if (used.insert(v).second) return v;
  }
}

const char* type_name(Kind k) {
  switch (k) {
    case Kind::words:
      return "words";
    case Kind::numbers:
      return "numbers";
    case Kind::uuids:
      return "uuids";
  }
  return "";
}

// round(linspace(0, 100, 40)), RULER's essay insertion depths.
std::vector<int> ruler_depths() {
  std::vector<int> d;
  for (int i = 0; i < 40; ++i) d.push_back(static_cast<int>(std::lround(100.0 * i / 39.0)));
  return d;
}

class NiahTask final : public Task {
 public:
  explicit NiahTask(const NiahConfig& c) : c_(c) {
    info_.name = c.name;
    info_.suite = "ruler";
    info_.metric = Metric::string_match_all;
    info_.max_new_tokens = 128;
    info_.needs_essays = c.hay == Hay::essay;
    info_.description = c.description;
  }
  const TaskInfo& info() const override { return info_; }
  int64_t min_units() const override { return c_.hay == Hay::essay ? 1 : n_needles(); }
  // Noise: the first words of one more noise line. Needle haystack: the first characters of
  // one more distractor (a UUID key alone is some 25 tokens, too coarse a step). Essays: the
  // first letters of the next word (the units are words already).
  int64_t max_pad() const override {
    switch (c_.hay) {
      case Hay::noise:
        return noise_sentence_words - 1;
      case Hay::needle:
        return c_.key == Kind::uuids ? 120 : 80;  // cut at the line's length - 1
      case Hay::essay:
        return 6;
    }
    return 0;
  }
  int64_t units_guess(int64_t tokens) const override {
    switch (c_.hay) {
      case Hay::noise:
        return tokens / 25;
      case Hay::essay:
        return tokens * 3 / 4;
      case Hay::needle:
        return tokens / (c_.key == Kind::uuids ? 60 : 22);
    }
    return tokens / 25;
  }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext& tc) const override {
    Rng rng(s.seed);
    // Needles first, so that they do not depend on the amount of haystack.
    std::set<std::string> used_keys, used_values;
    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> values(static_cast<size_t>(c_.num_k));
    for (int i = 0; i < c_.num_k; ++i) keys.push_back(draw_unique(c_.key, rng, used_keys));
    for (int i = 0; i < c_.num_k; ++i) {
      for (int j = 0; j < c_.num_v; ++j)
        values[i].push_back(draw_unique(c_.value, rng, used_values));
    }
    struct Needle {
      std::string text;
      int key;
    };
    std::vector<Needle> needles;
    for (int i = 0; i < c_.num_k; ++i) {
      for (const std::string& v : values[i]) {
        needles.push_back({fill_template(k_niah_needle, {{"type_needle_v", type_name(c_.value)},
                                                         {"key", keys[i]},
                                                         {"value", v}}),
                           i});
      }
    }
    rng.shuffle(needles);
    std::vector<int64_t> queried = rng.sample(c_.num_k, c_.num_q);
    std::vector<std::string> answers, query_keys;
    for (int64_t q : queried) {
      query_keys.push_back(keys[q]);
      answers.insert(answers.end(), values[q].begin(), values[q].end());
    }
    std::string query = query_keys.front();
    if (query_keys.size() > 1) {
      query.clear();
      for (size_t i = 0; i + 1 < query_keys.size(); ++i) query += query_keys[i] + ", ";
      query += "and " + query_keys.back();
    }

    std::string context;
    if (c_.hay == Hay::essay) {
      if (!tc.essays)
        return make_error("task {} needs the essay corpus, which is not loaded", c_.name);
      const std::vector<std::string> sents = split_sentences(tc.essays->first_words(units, pad));
      const std::vector<int> depths = ruler_depths();
      std::vector<int64_t> pick =
          rng.sample(static_cast<int64_t>(depths.size()), static_cast<int64_t>(needles.size()));
      std::vector<size_t> pos;
      for (int64_t p : pick) {
        pos.push_back(static_cast<size_t>(static_cast<double>(sents.size()) * depths[p] / 100.0));
      }
      std::sort(pos.begin(), pos.end());
      // RULER: sentences between consecutive insertion points, each followed by a needle.
      std::vector<std::string> parts;
      size_t last = 0;
      for (size_t i = 0; i <= pos.size(); ++i) {
        const size_t next = i < pos.size() ? pos[i] : sents.size();
        std::string chunk;
        for (size_t k = last; k < next; ++k) chunk += (k > last ? " " : "") + sents[k];
        parts.push_back(std::move(chunk));
        if (i < needles.size()) parts.push_back(needles[i].text);
        last = next;
      }
      for (size_t i = 0; i < parts.size(); ++i) context += (i ? " " : "") + parts[i];
    } else {
      std::vector<std::string> lines;
      lines.reserve(static_cast<size_t>(units) + needles.size() + 1);
      std::string pad_line;
      if (c_.hay == Hay::noise) {
        lines.assign(static_cast<size_t>(units), std::string(noise_sentence));
        pad_line = noise_words(pad);
      } else {
        // Distractor needles: fresh keys (never a real key) and values of the same kinds.
        std::set<std::string> distractor_keys = used_keys;
        const auto distractor = [&] {
          return fill_template(k_niah_needle, {{"type_needle_v", type_name(c_.value)},
                                               {"key", draw_unique(c_.key, rng, distractor_keys)},
                                               {"value", draw(c_.value, rng)}});
        };
        for (int64_t i = 0; i < units; ++i) lines.push_back(distractor());
        // The pad: one more distractor cut short (drawn whatever the pad, so that the other
        // lines do not depend on it).
        const std::string extra = distractor();
        pad_line = extra.substr(0, std::min(static_cast<size_t>(pad), extra.size() - 1));
      }
      std::vector<int64_t> at = rng.sample(units, static_cast<int64_t>(needles.size()));
      std::sort(at.begin(), at.end(), std::greater<>());
      for (size_t i = 0; i < at.size(); ++i) {
        lines.insert(lines.begin() + at[i], needles[i].text);
      }
      if (!pad_line.empty()) lines.push_back(std::move(pad_line));
      for (size_t i = 0; i < lines.size(); ++i) context += (i ? "\n" : "") + lines[i];
    }

    std::string tmpl(k_niah_template), prefix(k_niah_answer_prefix);
    std::string type_v = type_name(c_.value);
    if (c_.num_q * c_.num_v == 1) {
      tmpl = singularize(tmpl);
      prefix = singularize(prefix);
      type_v.pop_back();
    }
    TaskText t;
    t.input =
        fill_template(tmpl, {{"type_needle_v", type_v}, {"context", context}, {"query", query}});
    t.answer_prefix = fill_template(prefix, {{"type_needle_v", type_v}, {"query", query}});
    t.answers = std::move(answers);
    for (const Needle& n : needles) {  // the first needle of a queried key in the context
      if (n.key != queried.front()) continue;
      const double d = depth_of(context, n.text);
      if (d >= 0 && (t.depth < 0 || d < t.depth)) t.depth = d;
    }
    return t;
  }

 private:
  int64_t n_needles() const { return static_cast<int64_t>(c_.num_k) * c_.num_v; }
  NiahConfig c_;
  TaskInfo info_;
};

// Variable tracking: one chain of 4 hops (5 variables) hidden in noise, with a one-shot example.
// As in RULER, each noise line keeps its own "\n" and lines are joined with "\n" (so noise
// lines are separated by blank lines) and hop lines end with a space.
constexpr std::string_view k_vt_template =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    "{context}\nQuestion: Find all variables that are assigned the value {query} in the text "
    "above.";
constexpr std::string_view k_vt_answer_prefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: ";

class VariableTrackingTask final : public Task {
 public:
  VariableTrackingTask() {
    info_.name = "vt";
    info_.suite = "ruler";
    info_.metric = Metric::string_match_all;
    info_.max_new_tokens = 30;
    info_.description = "variable tracking: a 4-hop chain of VAR X = VAR Y assignments in noise";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t min_units() const override { return k_hops + 1; }
  int64_t max_pad() const override { return noise_sentence_words - 1; }
  int64_t units_guess(int64_t tokens) const override { return (tokens - 500) / 26; }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext&) const override {
    Rng rng(s.seed);
    std::set<std::string> names;
    // RULER's one-shot example: a short instance with 3-letter names, answer included.
    std::vector<std::string> ex_vars = chain_vars(rng, 3, names);
    const std::string ex_value = std::to_string(rng.uniform_int(10000, 99999));
    std::vector<std::string> vars = chain_vars(rng, 5, names);
    const std::string value = std::to_string(rng.uniform_int(10000, 99999));
    const std::string example = instance(rng, ex_vars, ex_value, k_example_lines, 0);
    std::string ex_answer;
    for (size_t i = 0; i < ex_vars.size(); ++i) ex_answer += (i ? " " : "") + ex_vars[i];
    const std::string num_v = std::to_string(k_hops + 1);

    TaskText t;
    const std::string body = instance(rng, vars, value, units, pad);
    // RULER appends the example's answer as " " + " ".join(vars) after the answer prefix.
    t.input = example + fill_template(k_vt_answer_prefix, {{"num_v", num_v}, {"query", ex_value}}) +
              " " + ex_answer + "\n\n" + body;
    t.answer_prefix = fill_template(k_vt_answer_prefix, {{"num_v", num_v}, {"query", value}});
    t.answers = vars;
    t.depth = depth_of(body, "VAR " + vars[0] + " = " + value);
    return t;
  }

 private:
  static constexpr int k_hops = 4;
  // RULER fits the example into 500 tokens, about 16 noise lines.
  static constexpr int64_t k_example_lines = 16;

  static std::vector<std::string> chain_vars(Rng& rng, int len, std::set<std::string>& used) {
    std::vector<std::string> out;
    while (static_cast<int>(out.size()) < k_hops + 1) {
      std::string v;
      for (int i = 0; i < len; ++i) v += static_cast<char>('A' + rng.uniform_int(0, 25));
      if (used.insert(v).second) out.push_back(v);
    }
    return out;
  }

  // The task text (template with context, no answer prefix) for one chain in `lines` of noise,
  // plus the first `pad` words of one more noise line at the end.
  static std::string instance(Rng& rng, const std::vector<std::string>& vars,
                              const std::string& value, int64_t lines, int64_t pad) {
    std::vector<std::string> chain = {"VAR " + vars[0] + " = " + value};
    for (int j = 0; j < k_hops; ++j)
      chain.push_back("VAR " + vars[j + 1] + " = VAR " + vars[j] + " ");
    std::vector<std::string> sentences(static_cast<size_t>(lines),
                                       std::string(noise_sentence) + "\n");
    std::vector<int64_t> pos = rng.sample(lines, static_cast<int64_t>(chain.size()));
    std::sort(pos.begin(), pos.end());
    for (size_t j = 0; j < chain.size(); ++j) {
      sentences.insert(sentences.begin() + pos[j] + static_cast<int64_t>(j), chain[j]);
    }
    if (pad > 0) sentences.emplace_back(noise_words(pad));
    std::string context;
    for (size_t i = 0; i < sentences.size(); ++i) context += (i ? "\n" : "") + sentences[i];
    return fill_template(k_vt_template, {{"context", context}, {"query", value}});
  }

  TaskInfo info_;
};

// Common words extraction: 10 words repeated often among many repeated rarely.
constexpr std::string_view k_cwe_template =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common "
    "words in the above list?";
constexpr std::string_view k_cwe_answer_prefix =
    " Answer: The top 10 words that appear most often in the list are:";

class CommonWordsTask final : public Task {
 public:
  CommonWordsTask() {
    info_.name = "cwe";
    info_.suite = "ruler";
    info_.metric = Metric::string_match_all;
    info_.max_new_tokens = 120;
    info_.description = "common words extraction: the 10 most frequent words of a numbered list";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t min_units() const override { return k_num_cw + 1; }
  // The first characters of two more entries listed once at the end (" 1234. word 1235.
  // word"): a whole entry is up to 7 tokens with tokenizers that split digits.
  int64_t max_pad() const override { return 40; }
  // RULER switches frequencies at 4K; the guess only needs to be near.
  int64_t units_guess(int64_t tokens) const override {
    return std::max<int64_t>(k_num_cw + 1, tokens / 16);
  }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext&) const override {
    Rng rng(s.seed);
    const bool long_ctx = s.ctx >= 4096;
    const int64_t ex_words = long_ctx ? 40 : 20;
    // Vocabulary: the real words shuffled, then made-up words when a long list needs more.
    std::vector<std::string> pool(all_words().begin(), all_words().end());
    rng.shuffle(pool);
    for (uint64_t i = 0; static_cast<int64_t>(pool.size()) < units + ex_words + 2; ++i) {
      pool.push_back(pseudo_word(i));
    }
    std::vector<std::string> ex(pool.begin() + units, pool.begin() + units + ex_words);
    std::vector<std::string> main(pool.begin(), pool.begin() + units);
    std::vector<std::string> ex_answer;
    const std::string ex_list = long_ctx ? numbered_list(rng, ex, 10, 3, ex_answer)
                                         : numbered_list(rng, ex, 3, 1, ex_answer);
    std::vector<std::string> answer;
    std::string list = long_ctx ? numbered_list(rng, main, k_freq_cw, k_freq_ucw, answer)
                                : numbered_list(rng, main, 6, 1, answer);
    const int64_t listed = long_ctx ? k_num_cw * k_freq_cw + (units - k_num_cw) * k_freq_ucw
                                    : k_num_cw * 6 + (units - k_num_cw);
    if (pad > 0) {
      std::string extra;
      for (int64_t i = 0; i < 2; ++i) {
        extra += " " + std::to_string(listed + i + 1) + ". " +
                 pool[static_cast<size_t>(units + ex_words + i)];
      }
      list += extra.substr(0, std::min(static_cast<size_t>(pad), extra.size() - 1));
    }
    std::string ex_answer_text;
    for (size_t i = 0; i < ex_answer.size(); ++i) {
      ex_answer_text += " " + std::to_string(i + 1) + ". " + ex_answer[i];
    }
    TaskText t;
    t.input = fill_template(k_cwe_template, {{"context", ex_list}}) +
              std::string(k_cwe_answer_prefix) + ex_answer_text + "\n" +
              fill_template(k_cwe_template, {{"context", list}});
    t.answer_prefix = std::string(k_cwe_answer_prefix);
    t.answers = answer;
    return t;
  }

 private:
  static constexpr int64_t k_num_cw = 10, k_freq_cw = 30, k_freq_ucw = 3;

  // "1. w 2. w ...": the first 10 words repeated cw times, the rest ucw times, shuffled.
  static std::string numbered_list(Rng& rng, const std::vector<std::string>& words, int cw, int ucw,
                                   std::vector<std::string>& common) {
    common.assign(words.begin(), words.begin() + std::min<int64_t>(k_num_cw, words.size()));
    std::vector<const std::string*> list;
    for (size_t i = 0; i < words.size(); ++i) {
      const int reps = static_cast<int64_t>(i) < k_num_cw ? cw : ucw;
      for (int r = 0; r < reps; ++r) list.push_back(&words[i]);
    }
    rng.shuffle(list);
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      out += (i ? " " : "") + std::to_string(i + 1) + ". " + *list[i];
    }
    return out;
  }

  TaskInfo info_;
};

// Frequent words extraction: Zipf-distributed coded words; the 2nd-4th most frequent count.
constexpr std::string_view k_fwe_template =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the above "
    "coded text?";
constexpr std::string_view k_fwe_answer_prefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";

class FrequentWordsTask final : public Task {
 public:
  FrequentWordsTask() {
    info_.name = "fwe";
    info_.suite = "ruler";
    info_.metric = Metric::string_match_all;
    info_.max_new_tokens = 50;
    info_.description =
        "frequent words extraction: the 3 most frequent coded words (Zipf, alpha 2)";
  }
  const TaskInfo& info() const override { return info_; }
  int64_t min_units() const override { return 50; }
  // More of the noise word "..." at the end (already the most frequent, so the answer stays).
  // One more unit can add a word of several ranks at once, some 30 tokens.
  int64_t max_pad() const override { return 48; }
  int64_t units_guess(int64_t tokens) const override { return tokens / 2; }

  Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                         const TaskContext&) const override {
    Rng rng(s.seed);
    const int64_t vocab_size = std::max<int64_t>(5, s.ctx / 50);
    std::set<std::string> uniq;
    while (static_cast<int64_t>(uniq.size()) < vocab_size) {
      std::string w;
      for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng.uniform_int(0, 25));
      uniq.insert(std::move(w));
    }
    std::vector<std::string> vocab(uniq.begin(), uniq.end());
    rng.shuffle(vocab);
    vocab[0] = "...";  // the most frequent "word" is noise, as in RULER
    const double zeta2 = std::numbers::pi * std::numbers::pi / 6.0;
    std::vector<const std::string*> words;
    for (size_t k = 0; k < vocab.size(); ++k) {
      const double r = static_cast<double>(k + 1);
      const auto cnt = static_cast<int64_t>(static_cast<double>(units) / (r * r) / zeta2);
      for (int64_t i = 0; i < cnt; ++i) words.push_back(&vocab[k]);
    }
    rng.shuffle(words);
    std::string context;
    for (size_t i = 0; i < words.size(); ++i) context += (i ? " " : "") + *words[i];
    for (int64_t i = 0; i < pad; ++i) context += " " + vocab[0];
    TaskText t;
    t.input = fill_template(k_fwe_template, {{"context", context}});
    t.answer_prefix = std::string(k_fwe_answer_prefix);
    t.answers = {vocab[1], vocab[2], vocab[3]};
    return t;
  }

 private:
  TaskInfo info_;
};

}  // namespace

std::vector<std::string> ruler_task_names() {
  std::vector<std::string> v;
  for (const NiahConfig& c : k_niah) v.emplace_back(c.name);
  v.insert(v.end(), {"vt", "cwe", "fwe"});
  return v;
}

std::unique_ptr<Task> make_ruler_task(std::string_view name) {
  for (const NiahConfig& c : k_niah) {
    if (name == c.name) return std::make_unique<NiahTask>(c);
  }
  if (name == "vt") return std::make_unique<VariableTrackingTask>();
  if (name == "cwe") return std::make_unique<CommonWordsTask>();
  if (name == "fwe") return std::make_unique<FrequentWordsTask>();
  return nullptr;
}

}  // namespace sieve::eval
