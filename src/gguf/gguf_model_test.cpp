// The reader on real files (skipped when the models are absent; see test_models.h).
#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf_file.h"
#include "gguf/test_models.h"

namespace sieve {
namespace {

std::unique_ptr<GgufFile> open_model(const char* name) {
  const std::string path = test_model_path(name);
  if (path.empty()) return nullptr;
  auto r = GgufFile::open(path);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Invariants every accepted file satisfies, checked independently of the parser.
void expect_sane(const GgufFile& f) {
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.n_bytes, f.file_size()) << t.name;
    const TypeInfo* ti = type_info(t.type);
    ASSERT_NE(ti, nullptr) << t.name;
    EXPECT_EQ(t.n_bytes,
              static_cast<uint64_t>(t.ne[0] / ti->block_size * ti->type_size * t.n_rows()))
        << t.name;
  }
}

TEST(GgufModel, SmolLM2) {
  auto f = open_model("smollm2.gguf");
  if (!f && test_model_path("smollm2.gguf").empty()) {
    GTEST_SKIP() << "smollm2.gguf not found in $SIEVE_TEST_MODEL_DIR, $SIEVE_HOME/models, "
                    "~/.cache/sieve/models or /tmp/models";
  }
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f->get_uint("llama.embedding_length"), 576u);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::Q8_0);
  EXPECT_EQ(emb->n_dims, 2u);
  EXPECT_EQ(emb->ne[0], 576);
  EXPECT_EQ(emb->ne[1], 49152);
  EXPECT_EQ(emb->n_bytes, 576u / 32 * 34 * 49152);
  for (int layer : {0, 17, 29}) {
    const std::string name = "blk." + std::to_string(layer) + ".attn_q.weight";
    const GgufTensorInfo* q = f->find_tensor(name);
    ASSERT_NE(q, nullptr) << name;
    EXPECT_EQ(q->type, GgmlType::Q4_1) << name;
    EXPECT_TRUE(q->type_supported());
  }
  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  expect_sane(*f);
  const std::string d = gguf_describe(*f);
  EXPECT_NE(d.find("ARRAY<STRING>[49152]"), std::string::npos);
  EXPECT_NE(d.find("token_embd.weight"), std::string::npos);
}

TEST(GgufModel, Gemma3) {
  auto f = open_model("gemma3-270m.gguf");
  if (!f && test_model_path("gemma3-270m.gguf").empty()) {
    GTEST_SKIP() << "gemma3-270m.gguf not found in $SIEVE_TEST_MODEL_DIR, $SIEVE_HOME/models, "
                    "~/.cache/sieve/models or /tmp/models";
  }
  ASSERT_TRUE(f);
  EXPECT_EQ(f->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f->tensors().size(), 236u);
  EXPECT_NE(f->find_tensor("token_embd.weight"), nullptr);
  expect_sane(*f);
}

}  // namespace
}  // namespace sieve
