// UTF-8 helpers for the tokenizers: strict and lenient decoding, sanitising invalid input,
// and GPT-2's reversible byte <-> printable-codepoint mapping used by byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sieve {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Strict decode of one codepoint at s[pos] (no overlongs, surrogates or values above
// U+10FFFF). On success advances pos and returns true; on failure leaves pos unchanged.
bool utf8_decode(std::string_view s, size_t& pos, uint32_t& cp);

// Appends the UTF-8 encoding of cp (cp must be <= 0x10FFFF).
void utf8_append(std::string& out, uint32_t cp);

bool utf8_is_valid(std::string_view s);

// Copies s, replacing every byte that does not start a valid sequence with U+FFFD (one
// replacement per bad byte, the way llama.cpp's decoder treats it), so that regex engines
// that require valid UTF-8 can run on any input.
std::string utf8_sanitize(std::string_view s);

// Number of codepoints (invalid bytes count as one each).
size_t utf8_count(std::string_view s);

// GPT-2 byte-level mapping: each byte 0..255 maps to one printable codepoint (printable
// Latin-1 bytes map to themselves, the rest to U+0100 onwards), so that any byte string
// becomes a string of visible characters and back.
uint32_t gpt2_byte_to_cp(uint8_t b);
// The byte a codepoint stands for, or -1 if cp is not in the mapping's image.
int gpt2_cp_to_byte(uint32_t cp);
// UTF-8 text of gpt2_byte_to_cp(b) (1 or 2 bytes).
const std::string& gpt2_byte_to_utf8(uint8_t b);
// Inverse on a whole token text: mapped codepoints become bytes; codepoints outside the
// mapping (not produced by byte-level BPE) are kept as their UTF-8.
std::string gpt2_decode_text(std::string_view text);

}  // namespace sieve
