#include "model/unicode.h"

#include <array>

namespace sieve {

bool utf8_decode(std::string_view s, size_t& pos, uint32_t& cp) {
  const size_t n = s.size();
  if (pos >= n) return false;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  }
  size_t len;
  uint32_t c;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return false;  // continuation byte or 0xF8..0xFF as a lead
  }
  if (n - pos < len) return false;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  cp = c;
  pos += len;
  return true;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view s) {
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    // Fast path for ASCII, which dominates real text.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (!utf8_decode(s, pos, cp)) return false;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    const size_t start = pos;
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      out.push_back(s[pos++]);
    } else if (utf8_decode(s, pos, cp)) {
      out.append(s.substr(start, pos - start));
    } else {
      utf8_append(out, kReplacementChar);
      ++pos;
    }
  }
  return out;
}

size_t utf8_count(std::string_view s) {
  size_t pos = 0, n = 0;
  uint32_t cp;
  while (pos < s.size()) {
    if (!utf8_decode(s, pos, cp)) ++pos;
    ++n;
  }
  return n;
}

namespace {

struct Gpt2Tables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte{};  // every image codepoint is below U+0200

  Gpt2Tables() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = static_cast<int16_t>(b);
      utf8_append(byte_to_utf8[b], cp);
    }
  }
};

const Gpt2Tables& gpt2_tables() {
  static const Gpt2Tables t;
  return t;
}

}  // namespace

uint32_t gpt2_byte_to_cp(uint8_t b) {
  return gpt2_tables().byte_to_cp[b];
}

int gpt2_cp_to_byte(uint32_t cp) {
  return cp < 512 ? gpt2_tables().cp_to_byte[cp] : -1;
}

const std::string& gpt2_byte_to_utf8(uint8_t b) {
  return gpt2_tables().byte_to_utf8[b];
}

std::string gpt2_decode_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  uint32_t cp;
  while (pos < text.size()) {
    const size_t start = pos;
    if (!utf8_decode(text, pos, cp)) {
      // Not produced by byte-level BPE; keep the raw byte rather than lose it.
      out.push_back(text[pos++]);
      continue;
    }
    const int b = gpt2_cp_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

}  // namespace sieve
