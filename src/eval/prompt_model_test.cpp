// Against the real models' tokenizers (skipped when absent): prompts rendered with their
// BOS and chat templates, and length fitting that fills the context.
#include <gtest/gtest.h>

#include "eval/prompt.h"
#include "gguf/test_models.h"
#include "model/tokenizer_test_util.h"

namespace sieve::eval {
namespace {

#define REQUIRE_TOKENIZER(var, file)           \
  const Tokenizer* var = test_tokenizer(file); \
  if (!var) GTEST_SKIP() << file << " not found (see gguf/test_models.h)"

TaskContext essays_ctx() {
  auto path = find_data_file("haystack/essays.txt", std::string(SIEVE_SOURCE_DIR) + "/data");
  TaskContext tc;
  if (path) tc.essays = EssayCorpus::load(*path).value();
  return tc;
}

TEST(ModelPrompts, RawPromptIsInputPlusAnswerPrefixWithBos) {
  REQUIRE_TOKENIZER(tok, "gemma3-270m.gguf");
  const PromptEncoder enc(*tok, PromptFormat::raw);
  TaskText t;
  t.input = "What is the pass key?";
  t.answer_prefix = "\n\nThe pass key is";
  auto p = enc.render(t);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text, "What is the pass key?\n\nThe pass key is");
  ASSERT_FALSE(p->tokens.empty());
  EXPECT_EQ(p->tokens.front(), tok->bos_id());  // Gemma asks for BOS
  EXPECT_EQ(tok->decode(p->tokens), p->text);
}

TEST(ModelPrompts, ChatPromptWrapsTheInputAndStartsTheAnswer) {
  REQUIRE_TOKENIZER(tok, "smollm2.gguf");
  const PromptEncoder enc(*tok, PromptFormat::chat);
  TaskText t;
  t.input = "Find the number.";
  t.answer_prefix = " The special magic number for x is";
  auto p = enc.render(t);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_NE(p->text.find("<|im_start|>user\nFind the number.<|im_end|>\n<|im_start|>assistant\nThe "
                         "special magic number for x is"),
            std::string::npos)
      << p->text;
  // Special tokens are parsed as such: the prompt holds the <|im_start|> id.
  const int32_t im_start = tok->find_token("<|im_start|>");
  ASSERT_GE(im_start, 0);
  EXPECT_NE(std::find(p->tokens.begin(), p->tokens.end(), im_start), p->tokens.end());
}

// With the model's tokenizer, every task fills its budget (ctx - max_new_tokens) exactly or
// nearly: no prompt is longer, and one more haystack unit would not fit.
TEST(ModelPrompts, EveryTaskFillsItsContextExactly) {
  const TaskContext tc = essays_ctx();
  ASSERT_TRUE(tc.essays);
  for (const char* file : {"smollm2.gguf", "gemma3-270m.gguf"}) {
    const Tokenizer* tok = test_tokenizer(file);
    if (!tok) continue;
    for (PromptFormat f : {PromptFormat::raw, PromptFormat::chat}) {
      if (f == PromptFormat::chat && tok->chat_template().empty())
        continue;  // e.g. this Gemma file
      const PromptEncoder enc(*tok, f);
      const RenderFn render = [&](const TaskText& t) { return enc.render(t); };
      for (const auto& t : all_tasks()) {
        const int32_t ctx = 2048;
        const SampleSpec s = plan_samples(*t, ctx, 1, 1, std::vector<double>{50}, 42)[0];
        auto fit = fit_sample(*t, s, tc, render);
        ASSERT_TRUE(fit.ok()) << file << " " << t->info().name << ": " << fit.message();
        const int64_t budget = ctx - t->info().max_new_tokens;
        const auto n = static_cast<int64_t>(fit->prompt.tokens.size());
        EXPECT_LE(n, budget) << file << " " << t->info().name;
        auto more = t->build(s, fit->units + 1, tc);
        ASSERT_TRUE(more.ok());
        EXPECT_GT(static_cast<int64_t>(enc.render(*more)->tokens.size()), budget)
            << file << " " << t->info().name << " (" << format_name(f) << ")";
        EXPECT_LE(fit->probes, 30) << file << " " << t->info().name;
        // Whole units, then the pad: most prompts hit the budget exactly; the smallest pad
        // piece can cost a few tokens (kv_retrieval's shortest extra pair `, "3": ""`).
        EXPECT_GE(n, budget - 4) << file << " " << t->info().name << " (" << format_name(f)
                                 << ") pad " << fit->pad << " of " << t->max_pad();
      }
    }
  }
}

}  // namespace
}  // namespace sieve::eval
