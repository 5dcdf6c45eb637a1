// One test per corruption (after llama.cpp's tests/test-gguf.cpp and reliability-cases.md
// A1-A10): each must fail cleanly, with a message that names the field and its byte offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_test_writer.h"

namespace sieve {
namespace {

using testing::GgufWriter;
using testing::put_u32;
using testing::put_u64;
using VT = GgufValueType;

constexpr uint64_t kMinus1 = std::numeric_limits<uint64_t>::max();

// Parses an exact-size heap copy (so ASan flags any read past the end) and returns the
// error message, or "" when the file was accepted.
std::string parse_error(const std::vector<uint8_t>& b) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[b.size()]);
  if (!b.empty()) std::memcpy(copy.get(), b.data(), b.size());
  auto r = GgufFile::from_memory(copy.get(), b.size());
  return r.ok() ? std::string() : r.message();
}

void expect_error(const std::vector<uint8_t>& b, std::initializer_list<std::string_view> parts) {
  const std::string msg = parse_error(b);
  ASSERT_FALSE(msg.empty()) << "the corrupt file was accepted";
  EXPECT_EQ(msg.rfind("gguf: <memory>: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (std::string_view p : parts) {
    EXPECT_NE(msg.find(p), std::string::npos) << "expected '" << p << "' in: " << msg;
  }
}

// kvs: #0 general.architecture (STRING), #1 llama.block_count (UINT32),
// #2 tokenizer.ggml.tokens (ARRAY<STRING>), #3 tokenizer.ggml.scores (ARRAY<FLOAT32>).
// tensors: #0 token_embd.weight Q8_0 [64,3], #1 blk.0.attn_q.weight Q4_0 [64,64],
// #2 output_norm.weight F32 [64].
GgufWriter base_writer() {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_u32("llama.block_count", 2);
  w.kv_string_array("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.kv_array<float>("tokenizer.ggml.scores", VT::FLOAT32, {0.f, -1.f, -2.f});
  w.tensor("token_embd.weight", GgmlType::Q8_0, {64, 3});
  w.tensor("blk.0.attn_q.weight", GgmlType::Q4_0, {64, 64});
  w.tensor("output_norm.weight", GgmlType::F32, {64});
  return w;
}

std::vector<uint8_t> base_file(GgufWriter::Layout* lay = nullptr) {
  return base_writer().build(lay);
}

std::string at(uint64_t byte) {
  return "(at byte " + std::to_string(byte) + ")";
}

TEST(GgufCorrupt, BaseFileIsValid) {
  EXPECT_EQ(parse_error(base_file()), "");
}

// ---- header -------------------------------------------------------------------------------

TEST(GgufCorrupt, BadMagic) {
  auto b = base_file();
  std::memcpy(b.data(), "GGUX", 4);
  expect_error(b, {"header: magic (at byte 0)", "\"GGUX\"", "not a GGUF file"});
  std::memcpy(b.data(),
              "\x7f"
              "ELF",
              4);
  expect_error(b, {"magic", "\\x7fELF"});
}

TEST(GgufCorrupt, ByteSwappedMagic) {
  auto b = base_file();
  std::memcpy(b.data(), "FUGG", 4);
  expect_error(b, {"magic", "big-endian", "little-endian"});
}

TEST(GgufCorrupt, Version1) {
  auto b = base_file();
  put_u32(b, 4, 1);
  expect_error(b, {"version (at byte 4) is 1", "GGUFv1", "re-convert"});
}

TEST(GgufCorrupt, FutureVersion) {
  auto b = base_file();
  put_u32(b, 4, 4);
  expect_error(b, {"version (at byte 4) is 4", "versions 2 and 3", "update Sieve"});
  put_u32(b, 4, 0xFFFFFFFFu);
  expect_error(b, {"version (at byte 4) is 4294967295"});
  put_u32(b, 4, 0);
  expect_error(b, {"version (at byte 4) is 0"});
}

TEST(GgufCorrupt, ByteSwappedVersion) {
  auto b = base_file();
  put_u32(b, 4, 0x03000000u);
  expect_error(b, {"version", "0x03000000", "byte-swapped 3", "big-endian"});
}

TEST(GgufCorrupt, NTensorsMinus1) {
  auto b = base_file();
  put_u64(b, 8, kMinus1);
  expect_error(b, {"n_tensors = 18446744073709551615 (= -1 as int64) (at byte 8)", "impossible"});
}

TEST(GgufCorrupt, NKvMinus1) {
  auto b = base_file();
  put_u64(b, 16, kMinus1);
  expect_error(b, {"n_kv = 18446744073709551615 (= -1 as int64) (at byte 16)", "impossible"});
}

TEST(GgufCorrupt, ImplausibleCounts) {
  const auto good = base_file();
  const uint64_t rem = good.size() - 24;
  for (uint64_t n : {uint64_t{1} << 63, uint64_t{1} << 32, rem + 1, rem / 33 + 1}) {
    auto b = good;
    put_u64(b, 8, n);
    expect_error(b, {"n_tensors"});
  }
  for (uint64_t n : {uint64_t{1} << 63, uint64_t{1} << 32, rem + 1, rem / 14 + 1}) {
    auto b = good;
    put_u64(b, 16, n);
    expect_error(b, {"n_kv"});
  }
  // Each count alone is plausible, together they are not.
  auto b = good;
  put_u64(b, 8, rem / 33);
  put_u64(b, 16, rem / 14);
  expect_error(b, {"n_tensors", "n_kv", "together"});
}

TEST(GgufCorrupt, EmptyFile) {
  expect_error({}, {"empty"});
  auto r = GgufFile::from_memory(nullptr, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("empty"), std::string::npos) << r.message();
}

TEST(GgufCorrupt, ShortHeaders) {
  const auto good = base_file();
  for (size_t n : {1, 3}) expect_error({good.begin(), good.begin() + n}, {"magic"});
  for (size_t n : {4, 7}) expect_error({good.begin(), good.begin() + n}, {"version"});
  for (size_t n : {8, 15}) expect_error({good.begin(), good.begin() + n}, {"n_tensors"});
  for (size_t n : {16, 23}) expect_error({good.begin(), good.begin() + n}, {"n_kv"});
}

// ---- key/value section -------------------------------------------------------------------

TEST(GgufCorrupt, KeyLengthMinus1) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u64(b, lay.kvs[1].start, kMinus1);
  expect_error(b, {"kv #1 (at byte " + std::to_string(lay.kvs[1].start) + ")",
                   "key length 18446744073709551615 (= -1 as int64)", "65535"});
}

TEST(GgufCorrupt, KeyLengthPastEnd) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u64(b, lay.kvs[0].start, 60000);
  expect_error(b, {"key length 60000 " + at(lay.kvs[0].start), "runs past the end"});
}

TEST(GgufCorrupt, EmptyKey) {
  GgufWriter w;
  w.kv_u32("", 1);
  expect_error(w.build(), {"kv #0", "key (at byte 24) is empty"});
}

TEST(GgufCorrupt, KeyWithControlCharacters) {
  GgufWriter w;
  w.kv_u32(std::string("general.a\0b", 11), 1);
  expect_error(w.build(), {"control characters", "general.a\\x00b"});
  GgufWriter w2;
  w2.kv_u32("evil\n[info] fake log line", 1);
  expect_error(w2.build(), {"control characters", "evil\\n[info]"});
}

TEST(GgufCorrupt, BadValueType) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  for (uint32_t t : {13u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    auto b = good;
    put_u32(b, lay.kvs[1].type_at, t);
    expect_error(b, {"key 'llama.block_count' (kv #1 at byte",
                     "value type " + std::to_string(t) + " " + at(lay.kvs[1].type_at), "0..12"});
  }
}

TEST(GgufCorrupt, DuplicateKey) {
  GgufWriter w;
  w.kv_u32("a.key", 1);
  w.kv_string("b.key", "x");
  w.kv_u32("a.key", 2);
  expect_error(w.build(), {"key 'a.key' (kv #2", "duplicate key", "kv #0"});
}

TEST(GgufCorrupt, BadAlignmentValue) {
  for (uint32_t a : {13u, 0u, 3u, 0xFFFFFFFFu}) {
    GgufWriter w;
    w.kv_u32("general.alignment", a);
    w.tensor("t", GgmlType::F32, {4});
    expect_error(w.build(), {"general.alignment", "value " + std::to_string(a), "power of two"});
  }
}

TEST(GgufCorrupt, HugeAlignmentFailsWithoutOverflow) {
  GgufWriter w;
  w.kv_u32("general.alignment", 0x80000000u);
  w.tensor("t", GgmlType::F32, {4});
  w.alignment = 32;  // the file itself cannot be 2 GiB; the data section is then past its end
  expect_error(w.build(), {"data section", "2147483648"});
}

TEST(GgufCorrupt, AlignmentOfWrongType) {
  GgufWriter w1;
  w1.kv_i32("general.alignment", 32);
  expect_error(w1.build(), {"general.alignment", "has type INT32", "must be a UINT32"});
  GgufWriter w2;
  w2.kv_string("general.alignment", "32");
  expect_error(w2.build(), {"general.alignment", "has type STRING"});
  GgufWriter w3;
  w3.kv_u64("general.alignment", 32);
  expect_error(w3.build(), {"general.alignment", "has type UINT64"});
  GgufWriter w4;
  w4.kv_array<uint32_t>("general.alignment", VT::UINT32, {32});
  expect_error(w4.build(), {"general.alignment", "has type ARRAY"});
}

TEST(GgufCorrupt, HugeStringLength) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  const uint64_t len_at = lay.kvs[0].value_at;
  auto b = good;
  put_u64(b, len_at, uint64_t{1} << 62);
  expect_error(b, {"general.architecture", "string value length 4611686018427387904 " + at(len_at),
                   "exceeds 1073741824 bytes"});
  b = good;
  put_u64(b, len_at, uint64_t{1} << 29);  // under the 1 GiB cap, but far past the end
  expect_error(b, {"string value length 536870912 " + at(len_at), "runs past the end"});
}

TEST(GgufCorrupt, HugeArrayCount) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  for (uint64_t n : {uint64_t{1} << 62, uint64_t{1} << 63, kMinus1, uint64_t{1} << 30}) {
    auto b = good;
    put_u64(b, lay.kvs[3].value_at + 4, n);
    expect_error(b,
                 {"tokenizer.ggml.scores", "array count", at(lay.kvs[3].value_at + 4), "FLOAT32"});
    b = good;
    put_u64(b, lay.kvs[2].value_at + 4, n);
    expect_error(b, {"tokenizer.ggml.tokens", "array count", "STRING element"});
  }
}

TEST(GgufCorrupt, StringArrayElementPastEnd) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  // element #1 ("bb") follows element #0 (8 + 1 bytes) after elem type + count (12 bytes)
  const uint64_t elem1 = lay.kvs[2].value_at + 12 + 9;
  put_u64(b, elem1, 1u << 20);
  expect_error(b, {"tokenizer.ggml.tokens", "array element #1 length 1048576 " + at(elem1),
                   "runs past the end"});
}

TEST(GgufCorrupt, NestedArray) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u32(b, lay.kvs[3].value_at, static_cast<uint32_t>(VT::ARRAY));
  expect_error(b, {"tokenizer.ggml.scores", "array element type " + at(lay.kvs[3].value_at),
                   "nested arrays"});
}

TEST(GgufCorrupt, BadArrayElementType) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u32(b, lay.kvs[3].value_at, 13);
  expect_error(b, {"array element type 13 " + at(lay.kvs[3].value_at)});
}

TEST(GgufCorrupt, BoolMustBeZeroOrOne) {
  for (uint8_t v : {2, 255}) {
    GgufWriter w;
    w.kv_raw("flag", static_cast<uint32_t>(VT::BOOL), {v});
    expect_error(w.build(), {"key 'flag'", "BOOL value (at byte 40) is " + std::to_string(v)});
    GgufWriter wa;
    wa.kv_array<uint8_t>("flags", VT::BOOL, {0, 1, v});
    expect_error(wa.build(), {"key 'flags'", "BOOL array element #2", std::to_string(v)});
  }
}

TEST(GgufCorrupt, TruncatedScalarValue) {
  GgufWriter w;
  w.kv_u64("k", 5);
  auto b = w.build();
  b.resize(b.size() - 3);
  expect_error(b, {"key 'k'", "UINT64 value (at byte 37) needs 8 bytes", "truncated"});
}

// ---- tensor infos --------------------------------------------------------------------------

TEST(GgufCorrupt, TensorNameTooLong) {
  GgufWriter ok;
  ok.tensor(std::string(63, 'n'), GgmlType::F32, {4});
  EXPECT_EQ(parse_error(ok.build()), "");
  GgufWriter w;
  w.tensor(std::string(64, 'n'), GgmlType::F32, {4});
  expect_error(w.build(), {"tensor info #0 (at byte 24)", "name length 64", "63 bytes"});
}

TEST(GgufCorrupt, TensorNameEmptyOrWithControlBytes) {
  GgufWriter w;
  w.tensor("", GgmlType::F32, {4});
  expect_error(w.build(), {"tensor info #0", "name (at byte 24) is empty"});
  GgufWriter w2;
  w2.tensor("a\x1b[2Jb", GgmlType::F32, {4});
  expect_error(w2.build(), {"tensor info #0", "control characters", "a\\x1b[2Jb"});
}

TEST(GgufCorrupt, NDims) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  for (uint32_t n : {5u, 0u, 0xFFFFFFFFu}) {
    auto b = good;
    put_u32(b, lay.tensors[1].n_dims_at, n);
    expect_error(b, {"tensor 'blk.0.attn_q.weight' (tensor info #1 at byte",
                     "n_dims = " + std::to_string(n) + " " + at(lay.tensors[1].n_dims_at), "1..4"});
  }
}

TEST(GgufCorrupt, BadDimension) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  for (uint64_t d : {kMinus1, uint64_t{0}, uint64_t{1} << 63}) {
    auto b = good;
    put_u64(b, lay.tensors[1].dims_at + 8, d);
    expect_error(b,
                 {"blk.0.attn_q.weight",
                  "ne[1] (dimension 1 at byte " + std::to_string(lay.tensors[1].dims_at + 8) + ")",
                  "is " + std::to_string(static_cast<int64_t>(d)), ">= 1"});
  }
}

TEST(GgufCorrupt, ElementCountOverflow) {
  // test-gguf's TENSORS_NE_TOO_BIG: every dim 4*INT32_MAX.
  const int64_t big = 4 * int64_t{std::numeric_limits<int32_t>::max()};
  GgufWriter w;
  w.tensor("big", GgmlType::F32, {big, big, big, big}, 0);
  expect_error(w.build(), {"tensor 'big'", "multiply to more than 2^63-1 elements", "ne[1]"});
}

TEST(GgufCorrupt, ByteSizeOverflow) {
  // 2^62 elements fit int64, but 2^62 F64 values need 2^65 bytes.
  GgufWriter w;
  w.tensor("wide", GgmlType::F64, {int64_t{1} << 62}, 0);
  expect_error(w.build(), {"tensor 'wide'", "overflows 64 bits"});
  // CVE-2026-33298 shape: a tiny file declaring a huge quantized tensor. The size (2^57 * 18
  // bytes) must be computed exactly and fail the bounds check, not wrap to something small.
  GgufWriter q;
  q.tensor("q", GgmlType::Q4_0, {int64_t{1} << 58, 16}, 0);
  expect_error(q.build(), {"tensor 'q'", "runs past the end of the file"});
}

TEST(GgufCorrupt, RowNotWholeBlocks) {
  GgufWriter w;
  w.tensor("k", GgmlType::Q4_K, {128, 2}, 0);
  expect_error(w.build(), {"tensor 'k'", "ne[0] = 128", "Q4_K block size 256"});
}

TEST(GgufCorrupt, BadTensorType) {
  GgufWriter::Layout lay;
  const auto good = base_file(&lay);
  for (uint32_t t : {43u, 4u, 5u, 31u, 0xFFFFFFFFu}) {
    auto b = good;
    put_u32(b, lay.tensors[2].type_at, t);
    expect_error(b, {"tensor 'output_norm.weight' (tensor info #2",
                     "type id " + std::to_string(t) + " " + at(lay.tensors[2].type_at),
                     "not a known ggml type"});
  }
}

TEST(GgufCorrupt, OffsetMinus1) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u64(b, lay.tensors[1].offset_at, kMinus1);
  expect_error(b, {"blk.0.attn_q.weight",
                   "offset 18446744073709551615 (= -1 as int64) " + at(lay.tensors[1].offset_at)});
}

TEST(GgufCorrupt, OffsetMinus1WithAlignment1) {
  // With alignment 1 every offset is aligned: the bounds check must catch it, overflow-free.
  GgufWriter w;
  w.alignment = 1;
  w.kv_u32("general.alignment", 1);
  w.tensor("t", GgmlType::F32, {4});
  GgufWriter::Layout lay;
  auto b = w.build(&lay);
  put_u64(b, lay.tensors[0].offset_at, kMinus1);
  expect_error(b, {"tensor 't'", "points past the end of the file"});
  put_u64(b, lay.tensors[0].offset_at, 1);  // in range, but 16 bytes from there run past the end
  expect_error(b, {"tensor 't'", "data [", "runs past the end of the file (size"});
}

TEST(GgufCorrupt, MisalignedOffset) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  put_u64(b, lay.tensors[2].offset_at, 33);  // also test-gguf's TENSORS_BAD_ALIGN
  expect_error(b, {"output_norm.weight", "offset 33 " + at(lay.tensors[2].offset_at),
                   "not a multiple of the alignment 32"});
}

TEST(GgufCorrupt, DuplicateTensorName) {
  GgufWriter w;
  w.tensor("same", GgmlType::F32, {4});
  w.tensor("other", GgmlType::F32, {4});
  w.tensor("same", GgmlType::F32, {4});
  expect_error(w.build(),
               {"tensor 'same' (tensor info #2", "duplicate tensor name", "tensor info #0"});
}

TEST(GgufCorrupt, OverlappingTensors) {
  GgufWriter w;
  w.tensor("a", GgmlType::F32, {32}, 0);  // [0, 128)
  w.tensor("b", GgmlType::F32, {8}, 64);  // inside a
  expect_error(w.build(), {"tensor 'b' (tensor info #1", "overlaps tensor 'a' (tensor info #0)"});
  GgufWriter same;
  same.tensor("a", GgmlType::F32, {8}, 0);
  same.tensor("b", GgmlType::F32, {8}, 0);
  expect_error(same.build(), {"overlaps"});
  // A short tensor between the two must not hide an overlap with an earlier long one.
  GgufWriter hidden;
  hidden.tensor("long", GgmlType::F32, {64}, 0);   // [0, 256)
  hidden.tensor("short", GgmlType::F32, {8}, 64);  // inside long
  hidden.tensor("late", GgmlType::F32, {8}, 128);  // also inside long
  expect_error(hidden.build(), {"overlaps tensor 'long'"});
}

// ---- data section --------------------------------------------------------------------------

TEST(GgufCorrupt, DataOneByteShort) {
  auto b = base_file();
  b.pop_back();
  expect_error(
      b, {"tensor 'output_norm.weight' (tensor info #2 at byte",
          "runs past the end of the file (size " + std::to_string(b.size()) + ")", "re-download"});
}

TEST(GgufCorrupt, DataSectionMissing) {
  GgufWriter::Layout lay;
  auto b = base_file(&lay);
  const uint64_t end_infos = lay.tensors.back().offset_at + 8;
  ASSERT_LT(end_infos, lay.data_offset) << "the base file needs padding before its data";
  b.resize(end_infos);  // the tensor infos are complete, the padding and data are gone
  expect_error(b, {"data section", "starts at byte " + std::to_string(lay.data_offset)});
}

TEST(GgufCorrupt, TruncationAtEveryByte) {
  // Every proper prefix of a valid file must fail cleanly; under ASan this also proves the
  // reader never touches a byte past the end.
  GgufWriter w = base_writer();
  w.kv_bool("flag", true);
  w.kv_f64("f", 1.0);
  w.kv_array<uint8_t>("bools", VT::BOOL, {1, 0});
  const auto good = w.build();
  ASSERT_EQ(parse_error(good), "");
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string msg = parse_error({good.begin(), good.begin() + n});
    EXPECT_FALSE(msg.empty()) << "prefix of " << n << " bytes accepted";
  }
}

TEST(GgufCorrupt, EveryFlippedByteIsHandled) {
  // Not every flip is an error (a flipped data byte is still a valid file), but none may crash
  // and every accepted file must still satisfy the reader's invariants.
  const auto good = base_file();
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      auto b = good;
      b[i] ^= x;
      auto r = GgufFile::from_memory(b.data(), b.size());
      if (!r.ok()) continue;
      for (const GgufTensorInfo& t : (*r)->tensors()) {
        ASSERT_LE((*r)->data_offset() + t.offset + t.n_bytes, b.size());
      }
    }
  }
}

}  // namespace
}  // namespace sieve
