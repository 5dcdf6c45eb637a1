#include "model/unicode.h"

#include <gtest/gtest.h>

#include <set>

namespace sieve {
namespace {

TEST(Unicode, DecodeStrict) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x8D\x95";
  size_t pos = 0;
  uint32_t cp = 0;
  std::vector<uint32_t> cps;
  while (utf8_decode(s, pos, cp)) cps.push_back(cp);
  EXPECT_EQ(cps, (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F355}));
  EXPECT_EQ(pos, s.size());
  for (std::string bad :
       {"\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\xFF", "\xC3("}) {
    size_t p = 0;
    EXPECT_FALSE(utf8_decode(bad, p, cp)) << bad;
    EXPECT_EQ(p, 0u);
  }
}

TEST(Unicode, EncodeRoundTrip) {
  for (uint32_t cp : {0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    utf8_append(s, cp);
    size_t pos = 0;
    uint32_t back = 0;
    ASSERT_TRUE(utf8_decode(s, pos, back));
    EXPECT_EQ(back, cp);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(Unicode, Sanitize) {
  EXPECT_EQ(utf8_sanitize("ok é"), "ok é");
  EXPECT_EQ(utf8_sanitize("a\xFF"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  // A truncated sequence: one replacement per byte, the next valid char kept.
  EXPECT_EQ(utf8_sanitize("\xE2\x82"
                          "x"),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "x");
  EXPECT_TRUE(utf8_is_valid(utf8_sanitize("\xC0\x80\xED\xA0\x80\xF8")));
  EXPECT_FALSE(utf8_is_valid("\xC0\x80"));
  EXPECT_EQ(utf8_count("aé\xFF"), 3u);
}

TEST(Unicode, Gpt2ByteMapIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = gpt2_byte_to_cp(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(gpt2_cp_to_byte(cp), b);
  }
  EXPECT_EQ(gpt2_byte_to_cp(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(gpt2_byte_to_cp('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(gpt2_byte_to_cp('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(gpt2_byte_to_cp(0xAD), 0x143u);  // soft hyphen is remapped
  EXPECT_EQ(gpt2_cp_to_byte(0x2581), -1);
  EXPECT_EQ(gpt2_decode_text("\xC4\xA0the\xC4\x8A"), " the\n");
}

}  // namespace
}  // namespace sieve
