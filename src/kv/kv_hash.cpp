#include "kv/kv_hash.h"

#include <openssl/evp.h>

#include <memory>

#include "core/assert.h"

namespace sieve {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// One SHA-256 computation fed piecewise. EVP failures only happen on allocation failure or a
// broken OpenSSL build, which the engine cannot recover from: they are invariants, not input.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    SIEVE_ASSERT(ctx_ != nullptr);
    SIEVE_ASSERT(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1);
  }
  void update(const void* data, size_t n) {
    SIEVE_ASSERT(EVP_DigestUpdate(ctx_.get(), data, n) == 1);
  }
  void update_u32(uint32_t v) {
    const uint8_t le[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                           static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    update(le, 4);
  }
  KvDigest finish() {
    KvDigest d;
    unsigned int n = 0;
    SIEVE_ASSERT(EVP_DigestFinal_ex(ctx_.get(), d.bytes.data(), &n) == 1 && n == 32);
    return d;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx_;
};

constexpr std::string_view kSaltTag = "sieve.kv.salt.v1";
constexpr std::string_view kPageTag = "sieve.kv.page.v1";

}  // namespace

std::string KvDigest::hex() const {
  static const char* const kHex = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    s[2 * i] = kHex[bytes[i] >> 4];
    s[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return s;
}

KvDigest kv_salt_digest(std::string_view store_salt, std::string_view seq_salt) {
  // Lengths are hashed before the strings so ("ab", "c") and ("a", "bc") differ.
  Sha256 h;
  h.update(kSaltTag.data(), kSaltTag.size());
  h.update_u32(static_cast<uint32_t>(store_salt.size()));
  h.update(store_salt.data(), store_salt.size());
  h.update_u32(static_cast<uint32_t>(seq_salt.size()));
  h.update(seq_salt.data(), seq_salt.size());
  return h.finish();
}

KvDigest kv_page_digest(const KvDigest& parent, std::span<const int32_t> tokens,
                        const KvDigest& salt) {
  Sha256 h;
  h.update(kPageTag.data(), kPageTag.size());
  h.update(parent.bytes.data(), parent.bytes.size());
  h.update_u32(static_cast<uint32_t>(tokens.size()));
  for (int32_t t : tokens) h.update_u32(static_cast<uint32_t>(t));
  h.update(salt.bytes.data(), salt.bytes.size());
  return h.finish();
}

}  // namespace sieve
