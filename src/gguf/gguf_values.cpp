// Value decoding and printable escaping shared by the parser and gguf_describe().
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "gguf/gguf_internal.h"

namespace sieve {

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
      return "UINT8";
    case GgufValueType::INT8:
      return "INT8";
    case GgufValueType::UINT16:
      return "UINT16";
    case GgufValueType::INT16:
      return "INT16";
    case GgufValueType::UINT32:
      return "UINT32";
    case GgufValueType::INT32:
      return "INT32";
    case GgufValueType::FLOAT32:
      return "FLOAT32";
    case GgufValueType::BOOL:
      return "BOOL";
    case GgufValueType::STRING:
      return "STRING";
    case GgufValueType::ARRAY:
      return "ARRAY";
    case GgufValueType::UINT64:
      return "UINT64";
    case GgufValueType::INT64:
      return "INT64";
    case GgufValueType::FLOAT64:
      return "FLOAT64";
  }
  return "INVALID";
}

namespace gguf_detail {
namespace {

template <class U>
void set_unsigned(GgufValue& v, U x) {
  v.u = x;
  // Mirror into i when representable so callers need not care how a writer typed a count.
  if (v.u <= static_cast<uint64_t>(INT64_MAX)) v.i = static_cast<int64_t>(v.u);
}

template <class S>
void set_signed(GgufValue& v, S x) {
  v.i = x;
  if (v.i >= 0) v.u = static_cast<uint64_t>(v.i);
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

void decode_scalar(const uint8_t* p, GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
      set_unsigned(v, load<uint8_t>(p));
      break;
    case GgufValueType::INT8:
      set_signed(v, load<int8_t>(p));
      break;
    case GgufValueType::UINT16:
      set_unsigned(v, load<uint16_t>(p));
      break;
    case GgufValueType::INT16:
      set_signed(v, load<int16_t>(p));
      break;
    case GgufValueType::UINT32:
      set_unsigned(v, load<uint32_t>(p));
      break;
    case GgufValueType::INT32:
      set_signed(v, load<int32_t>(p));
      break;
    case GgufValueType::UINT64:
      set_unsigned(v, load<uint64_t>(p));
      break;
    case GgufValueType::INT64:
      set_signed(v, load<int64_t>(p));
      break;
    case GgufValueType::FLOAT32:
      v.f = load<float>(p);
      break;
    case GgufValueType::FLOAT64:
      v.f = load<double>(p);
      break;
    case GgufValueType::BOOL:
      v.u = load<uint8_t>(p);
      break;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      break;
  }
}

std::string escape(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 8);
  size_t i = 0;
  while (i < s.size()) {
    if (i >= max_bytes) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\' || c == '"') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          out += fmt::format("\\x{:02x}", c);
      }
      ++i;
      continue;
    }
    const size_t n = utf8_len(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
      // C1 controls (U+0080..U+009F) act as terminal escapes too.
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace gguf_detail
}  // namespace sieve
