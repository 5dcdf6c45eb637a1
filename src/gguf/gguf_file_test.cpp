// Valid files round-trip through the reader; the corruption tests are in gguf_corrupt_test.cpp.
#include "gguf/gguf_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gguf/gguf_test_writer.h"

namespace sieve {
namespace {

using testing::GgufWriter;
using VT = GgufValueType;

std::unique_ptr<GgufFile> must_parse(const std::vector<uint8_t>& b) {
  auto r = GgufFile::from_memory(b.data(), b.size());
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(GgufRoundTrip, EveryScalarType) {
  GgufWriter w;
  w.kv_u8("t.u8", 200);
  w.kv_i8("t.i8", -100);
  w.kv_u16("t.u16", 60000);
  w.kv_i16("t.i16", -30000);
  w.kv_u32("t.u32", 4000000000u);
  w.kv_i32("t.i32", -2000000000);
  w.kv_f32("t.f32", 1.5f);
  w.kv_bool("t.true", true);
  w.kv_bool("t.false", false);
  w.kv_string("t.str", "h\xc3\xa9llo world");
  w.kv_u64("t.u64", std::numeric_limits<uint64_t>::max());
  w.kv_i64("t.i64", std::numeric_limits<int64_t>::min());
  w.kv_f64("t.f64", -2.25);
  w.kv_string("t.empty", "");
  w.kv_i32("t.i32pos", 7);
  GgufWriter::Layout lay;
  const auto b = w.build(&lay);
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->path(), "<memory>");
  EXPECT_EQ(f->file_size(), b.size());
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->kvs().size(), 15u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->kvs()[0].key, "t.u8");  // file order is kept
  EXPECT_EQ(f->kvs()[14].key, "t.i32pos");

  EXPECT_EQ(f->get_uint("t.u8"), 200u);
  EXPECT_EQ(f->get_int("t.u8"), 200);
  EXPECT_EQ(f->get_int("t.i8"), -100);
  EXPECT_EQ(f->get_uint("t.i8"), std::nullopt);  // negative does not fit
  EXPECT_EQ(f->get_uint("t.u16"), 60000u);
  EXPECT_EQ(f->get_int("t.i16"), -30000);
  EXPECT_EQ(f->get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(f->get_int("t.u32"), 4000000000);
  EXPECT_EQ(f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(f->get_uint("t.i32pos"), 7u);
  EXPECT_EQ(f->get_uint("t.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get_int("t.u64"), std::nullopt);  // does not fit int64
  EXPECT_EQ(f->get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get_float("t.f32"), 1.5);
  EXPECT_EQ(f->get_float("t.f64"), -2.25);
  EXPECT_EQ(f->get_bool("t.true"), true);
  EXPECT_EQ(f->get_bool("t.false"), false);
  EXPECT_EQ(f->get_string("t.str"), "h\xc3\xa9llo world");
  EXPECT_EQ(f->get_string("t.empty"), "");

  // Type mismatches and absent keys are nullopt, never a reinterpretation.
  EXPECT_EQ(f->get_float("t.u32"), std::nullopt);
  EXPECT_EQ(f->get_uint("t.f32"), std::nullopt);
  EXPECT_EQ(f->get_uint("t.true"), std::nullopt);
  EXPECT_EQ(f->get_bool("t.u8"), std::nullopt);
  EXPECT_EQ(f->get_string("t.u32"), std::nullopt);
  EXPECT_EQ(f->get_string_array("t.str"), std::nullopt);
  EXPECT_EQ(f->get_uint("missing"), std::nullopt);
  EXPECT_EQ(f->find("missing"), nullptr);

  const GgufValue* v = f->find("t.u16");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type, VT::UINT16);
  EXPECT_EQ(v->offset, lay.kvs[2].value_at);
  const GgufValue* s = f->find("t.str");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->data, b.data() + lay.kvs[9].value_at + 8);  // a view into the buffer, no copy
}

TEST(GgufRoundTrip, ArraysOfEveryType) {
  GgufWriter w;
  w.kv_array<uint8_t>("a.u8", VT::UINT8, {0, 1, 255});
  w.kv_array<int8_t>("a.i8", VT::INT8, {-128, 0, 127});
  w.kv_array<uint16_t>("a.u16", VT::UINT16, {1, 65535});
  w.kv_array<int16_t>("a.i16", VT::INT16, {-32768, 5});
  w.kv_array<uint32_t>("a.u32", VT::UINT32, {4294967295u, 3});
  w.kv_array<int32_t>("a.i32", VT::INT32, {-7, 1, 2, 3});
  w.kv_array<float>("a.f32", VT::FLOAT32, {0.5f, -1.25f, 3e38f});
  w.kv_array<uint8_t>("a.bool", VT::BOOL, {1, 0, 1});
  w.kv_string_array("a.str", {"one", "", "thr\xc3\xa9\xc3\xa9"});
  w.kv_array<uint64_t>("a.u64", VT::UINT64, {uint64_t{1} << 63});
  w.kv_array<uint64_t>("a.u64small", VT::UINT64, {5, 6});
  w.kv_array<int64_t>("a.i64", VT::INT64, {std::numeric_limits<int64_t>::min(), -1});
  w.kv_array<double>("a.f64", VT::FLOAT64, {1e300, -0.0});
  w.kv_array<uint32_t>("a.empty", VT::UINT32, {});
  w.kv_string_array("a.empty_str", {});
  auto b = w.build();
  auto f = must_parse(b);
  ASSERT_TRUE(f);

  using I = std::vector<int64_t>;
  EXPECT_EQ(f->get_int_array("a.u8"), (I{0, 1, 255}));
  EXPECT_EQ(f->get_int_array("a.i8"), (I{-128, 0, 127}));
  EXPECT_EQ(f->get_int_array("a.u16"), (I{1, 65535}));
  EXPECT_EQ(f->get_int_array("a.i16"), (I{-32768, 5}));
  EXPECT_EQ(f->get_int_array("a.u32"), (I{4294967295, 3}));
  EXPECT_EQ(f->get_int_array("a.i32"), (I{-7, 1, 2, 3}));
  EXPECT_EQ(f->get_int_array("a.u64"), std::nullopt);  // 2^63 overflows int64
  EXPECT_EQ(f->get_int_array("a.u64small"), (I{5, 6}));
  EXPECT_EQ(f->get_int_array("a.i64"), (I{std::numeric_limits<int64_t>::min(), -1}));
  EXPECT_EQ(f->get_int_array("a.empty"), I{});
  EXPECT_EQ(f->get_int_array("a.f32"), std::nullopt);
  EXPECT_EQ(f->get_int_array("a.bool"), std::nullopt);
  EXPECT_EQ(f->get_f32_array("a.f32"), (std::vector<float>{0.5f, -1.25f, 3e38f}));
  EXPECT_EQ(f->get_f32_array("a.f64"), std::nullopt);
  EXPECT_EQ(f->get_f32_array("a.i32"), std::nullopt);
  EXPECT_EQ(f->get_string_array("a.str"),
            (std::vector<std::string_view>{"one", "", "thr\xc3\xa9\xc3\xa9"}));
  EXPECT_EQ(f->get_string_array("a.empty_str"), std::vector<std::string_view>{});
  EXPECT_EQ(f->get_string_array("a.u8"), std::nullopt);
  EXPECT_EQ(f->get_int_array("a.str"), std::nullopt);

  const GgufValue* v = f->find("a.f64");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type, VT::ARRAY);
  EXPECT_EQ(v->elem_type, VT::FLOAT64);
  EXPECT_EQ(v->n_elems, 2u);
  const GgufValue* bools = f->find("a.bool");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->elem_type, VT::BOOL);
  EXPECT_EQ(bools->data[0], 1);
  EXPECT_EQ(bools->data[1], 0);
  // Scalar getters never accept arrays.
  EXPECT_EQ(f->get_uint("a.u8"), std::nullopt);
}

// Checks sizes, offsets and that tensor_data() points at the bytes the writer put there.
void expect_tensor_data(const GgufFile& f) {
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    const uint8_t* d = f.tensor_data(t);
    for (uint64_t j = 0; j < t.n_bytes; ++j) {
      ASSERT_EQ(d[j], GgufWriter::expected_byte(i, j)) << t.name << " byte " << j;
    }
  }
}

TEST(GgufRoundTrip, SeveralTensors) {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.tensor("token_embd.weight", GgmlType::Q8_0, {64, 10});
  w.tensor("blk.0.attn_q.weight", GgmlType::Q4_0, {64, 64});
  w.tensor("blk.0.attn_k.weight", GgmlType::Q4_1, {32, 3, 2});
  w.tensor("blk.0.ffn_up.weight", GgmlType::Q4_K, {256, 3, 1, 2});
  w.tensor("output_norm.weight", GgmlType::F32, {64});
  w.tensor("x.f16", GgmlType::F16, {3, 5});
  GgufWriter::Layout lay;
  auto b = w.build(&lay);
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->tensors().size(), 6u);
  EXPECT_EQ(f->data_offset(), lay.data_offset);
  EXPECT_EQ(f->data_offset() % 32, 0u);

  const GgufTensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q4_0);
  EXPECT_EQ(q->n_dims, 2u);
  EXPECT_EQ(q->ne[0], 64);
  EXPECT_EQ(q->ne[1], 64);
  EXPECT_EQ(q->ne[2], 1);
  EXPECT_EQ(q->n_bytes, 64u / 32 * 18 * 64);
  EXPECT_EQ(q->n_elements(), 64 * 64);
  EXPECT_TRUE(q->type_supported());

  const GgufTensorInfo* k = f->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->n_dims, 3u);
  EXPECT_EQ(k->n_rows(), 6);
  EXPECT_EQ(k->n_bytes, 20u * 6);
  const GgufTensorInfo* up = f->find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->n_dims, 4u);
  EXPECT_EQ(up->n_bytes, 144u * 6);
  EXPECT_EQ(f->find_tensor("x.f16")->n_bytes, 30u);
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
  EXPECT_EQ(&f->tensors()[0], f->find_tensor("token_embd.weight"));
  expect_tensor_data(*f);
}

TEST(GgufRoundTrip, CustomAlignment) {
  for (uint32_t a : {1u, 8u, 64u, 4096u}) {
    GgufWriter w;
    w.alignment = a;
    w.kv_u32("general.alignment", a);
    w.tensor("a", GgmlType::F32, {3});
    w.tensor("b", GgmlType::F16, {5, 3});
    w.tensor("c", GgmlType::Q8_0, {32, 3});
    GgufWriter::Layout lay;
    auto b = w.build(&lay);
    auto f = must_parse(b);
    ASSERT_TRUE(f) << a;
    EXPECT_EQ(f->alignment(), a);
    EXPECT_EQ(f->data_offset(), lay.data_offset);
    EXPECT_EQ(f->data_offset() % a, 0u);
    expect_tensor_data(*f);
  }
}

TEST(GgufRoundTrip, Version2IsAccepted) {
  GgufWriter w;
  w.version = 2;
  w.kv_string("general.architecture", "llama");
  w.tensor("t", GgmlType::F32, {4});
  auto b = w.build();
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->version(), 2u);
}

TEST(GgufRoundTrip, EmptyFileBody) {
  GgufWriter w;  // header only: 0 tensors, 0 kvs
  auto b = w.build();
  ASSERT_EQ(b.size(), 24u);
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->kvs().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_LE(f->data_offset(), f->file_size());
}

TEST(GgufRoundTrip, KnownButUnsupportedTypesAreListedAndFlagged) {
  GgufWriter w;
  w.tensor("iq", GgmlType(20), {32, 2});  // IQ4_NL
  w.tensor("q2k", GgmlType::Q2_K, {256});
  w.tensor("i32", GgmlType::I32, {7});
  w.tensor("f32", GgmlType::F32, {7});
  auto b = w.build();
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->find_tensor("iq")->type_supported());
  EXPECT_FALSE(f->find_tensor("q2k")->type_supported());
  EXPECT_FALSE(f->find_tensor("i32")->type_supported());
  EXPECT_TRUE(f->find_tensor("f32")->type_supported());
  EXPECT_EQ(f->find_tensor("iq")->n_bytes, 36u);
  const std::string d = gguf_describe(*f);
  EXPECT_NE(d.find("IQ4_NL*"), std::string::npos) << d;
  EXPECT_NE(d.find("Q2_K*"), std::string::npos) << d;
  EXPECT_NE(d.find("not supported"), std::string::npos) << d;
}

TEST(GgufRoundTrip, TensorOffsetsNeedNotFollowInfoOrder) {
  // ggml writes data in info order, but the format only needs aligned, disjoint ranges.
  GgufWriter w;
  w.tensor("second", GgmlType::F32, {8}, 32);
  w.tensor("first", GgmlType::F32, {8}, 0);
  auto b = w.build();
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->find_tensor("first")->offset, 0u);
  EXPECT_EQ(f->find_tensor("second")->offset, 32u);
}

TEST(GgufDescribe, ShowsHeaderMetadataTensorsAndTotals) {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_u32("llama.block_count", 30);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_bool("tokenizer.ggml.add_bos_token", false);
  std::vector<std::string> toks;
  for (int i = 0; i < 20; ++i) toks.push_back("tok" + std::to_string(i));
  toks[3] = "bad\x1b[31m\n";  // control bytes must not reach the terminal
  w.kv_string_array("tokenizer.ggml.tokens", toks);
  w.kv_array<int32_t>("tokenizer.ggml.token_type", VT::INT32, std::vector<int32_t>(20, 1));
  w.tensor("token_embd.weight", GgmlType::Q8_0, {64, 20});
  w.tensor("blk.0.attn_q.weight", GgmlType::Q4_1, {64, 64});
  w.tensor("blk.1.attn_q.weight", GgmlType::Q4_1, {64, 64});
  auto b = w.build();
  auto f = must_parse(b);
  ASSERT_TRUE(f);
  const std::string d = gguf_describe(*f);
  for (const char* want : {"version:      3",
                           "alignment:    32 (default)",
                           "tensors:      3",
                           "metadata:     6 key/value pairs",
                           "general.architecture",
                           "\"llama\"",
                           "UINT32",
                           "10000",
                           "false",
                           "ARRAY<STRING>[20]",
                           "\"tok0\"",
                           "\"tok7\"",
                           "... 12 more",
                           "bad\\x1b[31m\\n",
                           "ARRAY<INT32>[20]",
                           "token_embd.weight",
                           "64 x 20",
                           "blk.1.attn_q.weight",
                           "Q8_0",
                           "Q4_1",
                           "all"}) {
    EXPECT_NE(d.find(want), std::string::npos) << "missing '" << want << "' in:\n" << d;
  }
  EXPECT_EQ(d.find("\"tok8\""), std::string::npos) << "array not abbreviated:\n" << d;
  EXPECT_EQ(d.find('\x1b'), std::string::npos);
  // totals: 2 Q4_1 tensors of 64*64 elements and 2*64*20 bytes.
  EXPECT_NE(d.find(fmt::format("Q4_1     {:>8} {:>16} {:>16}", 2, 2 * 64 * 64, 2 * 2 * 64 * 20)),
            std::string::npos)
      << d;
  const std::string all = gguf_describe(*f, true);
  EXPECT_NE(all.find("\"tok19\""), std::string::npos) << all;
  EXPECT_EQ(all.find("more"), std::string::npos) << all;
}

// The fuzzer's seeds (fuzz/make_seeds.py) are only useful while they are valid files.
TEST(GgufRoundTrip, FuzzSeedsAreValid) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SIEVE_SOURCE_DIR) / "fuzz" / "corpus" / "gguf";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not found";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto r = GgufFile::open(e.path().string());
    EXPECT_TRUE(r.ok()) << r.message();
    ++n;
  }
  EXPECT_GE(n, 5);
}

class GgufOpenTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_ = std::filesystem::path(::testing::TempDir()) /
                               ("gguf_open_test_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const char* name, const std::vector<uint8_t>& b) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    return p.string();
  }
};

TEST_F(GgufOpenTest, MapsAndParsesAFile) {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.tensor("t", GgmlType::F32, {16});
  const auto b = w.build();
  const std::string path = write("ok.gguf", b);
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ((*r)->path(), path);
  EXPECT_EQ((*r)->file_size(), b.size());
  EXPECT_EQ((*r)->get_string("general.architecture"), "llama");
  expect_tensor_data(**r);
}

TEST_F(GgufOpenTest, MissingEmptyDirectoryAndDeviceAreErrors) {
  auto missing = GgufFile::open((dir_ / "nope.gguf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("nope.gguf"), std::string::npos) << missing.message();
  EXPECT_NE(missing.message().find("No such file"), std::string::npos) << missing.message();

  auto empty = GgufFile::open(write("empty.gguf", {}));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.message();

  auto d = GgufFile::open(dir_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("directory"), std::string::npos) << d.message();

  auto dev = GgufFile::open("/dev/zero");
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.message().find("not a regular file"), std::string::npos) << dev.message();
}

TEST_F(GgufOpenTest, ErrorsNameThePath) {
  auto b = GgufWriter().build();
  b[0] = 'X';
  const std::string path = write("bad.gguf", b);
  auto r = GgufFile::open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind("gguf: " + path + ": ", 0), 0u) << r.message();
  EXPECT_EQ(r.message().find('\n'), std::string::npos);  // one line for the CLI
}

}  // namespace
}  // namespace sieve
