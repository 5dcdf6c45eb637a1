// Prefix-cache keys: a SHA-256 chain over the full token pages of a sequence.
// digest(page j) = SHA-256("sieve.kv.page.v1" | digest(page j-1) | n | tokens[j*ps, j*ps+n) |
// salt), with 32 zero bytes as the parent of page 0 and every integer little-endian. A strong
// hash (never std::hash or a rolling hash) because a collision would hand one request another
// request's K/V.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace sieve {

struct KvDigest {
  std::array<uint8_t, 32> bytes{};

  bool operator==(const KvDigest&) const = default;
  // First 8 bytes: uniformly distributed for SHA-256 output, enough to bucket a hash table
  // (equality still compares all 32 bytes).
  uint64_t prefix64() const {
    uint64_t v;
    std::memcpy(&v, bytes.data(), 8);
    return v;
  }
  std::string hex() const;
};

// Salt of a sequence: the store's salt (the model) and the request's namespace salt.
KvDigest kv_salt_digest(std::string_view store_salt, std::string_view seq_salt);

// The chain step; parent is KvDigest{} (all zero) for page 0.
KvDigest kv_page_digest(const KvDigest& parent, std::span<const int32_t> tokens,
                        const KvDigest& salt);

}  // namespace sieve
