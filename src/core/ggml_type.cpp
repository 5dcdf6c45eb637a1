#include "core/ggml_type.h"

#include <array>

namespace sieve {
namespace {

constexpr std::array<TypeInfo, kGgmlTypeCount> make_table() {
  std::array<TypeInfo, kGgmlTypeCount> t{};
  auto set = [&t](uint32_t id, std::string_view n, int64_t bs, int64_t ts, bool sup) {
    t[id] = TypeInfo{n, bs, ts, sup};
  };
  set(0, "F32", 1, 4, true);
  set(1, "F16", 1, 2, true);
  set(2, "Q4_0", 32, 18, true);
  set(3, "Q4_1", 32, 20, true);
  set(6, "Q5_0", 32, 22, true);
  set(7, "Q5_1", 32, 24, true);
  set(8, "Q8_0", 32, 34, true);
  set(9, "Q8_1", 32, 36, false);
  set(10, "Q2_K", 256, 84, false);
  set(11, "Q3_K", 256, 110, false);
  set(12, "Q4_K", 256, 144, true);
  set(13, "Q5_K", 256, 176, true);
  set(14, "Q6_K", 256, 210, true);
  set(15, "Q8_K", 256, 292, false);
  set(16, "IQ2_XXS", 256, 66, false);
  set(17, "IQ2_XS", 256, 74, false);
  set(18, "IQ3_XXS", 256, 98, false);
  set(19, "IQ1_S", 256, 50, false);
  set(20, "IQ4_NL", 32, 18, false);
  set(21, "IQ3_S", 256, 110, false);
  set(22, "IQ2_S", 256, 82, false);
  set(23, "IQ4_XS", 256, 136, false);
  set(24, "I8", 1, 1, false);
  set(25, "I16", 1, 2, false);
  set(26, "I32", 1, 4, false);
  set(27, "I64", 1, 8, false);
  set(28, "F64", 1, 8, false);
  set(29, "IQ1_M", 256, 56, false);
  set(30, "BF16", 1, 2, true);
  set(34, "TQ1_0", 256, 54, false);
  set(35, "TQ2_0", 256, 66, false);
  set(39, "MXFP4", 32, 17, false);
  set(40, "NVFP4", 64, 36, false);
  set(41, "Q1_0", 128, 18, false);
  set(42, "Q2_0", 128, 34, false);
  return t;
}

constexpr auto kTable = make_table();

}  // namespace

const TypeInfo* type_info(uint32_t id) {
  if (id >= kGgmlTypeCount || kTable[id].block_size == 0) return nullptr;
  return &kTable[id];
}

std::string_view type_name(GgmlType t) {
  const TypeInfo* ti = type_info(t);
  return ti ? ti->name : std::string_view("unknown");
}

}  // namespace sieve
