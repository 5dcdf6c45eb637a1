// GGUF parsing and validation. The file is hostile input: every count and length is checked
// against the bytes that remain before it is used and all size arithmetic is checked, so a
// corrupt file never reads outside the buffer and costs memory proportional to its real
// content, never to a count it claims.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "gguf/gguf_internal.h"

namespace sieve::gguf_detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader decodes fields in place and assumes a little-endian host");

constexpr uint32_t kMagic = 0x46554747;                  // bytes "GGUF" read as a little-endian u32
constexpr uint32_t kMagicSwapped = 0x47475546;           // bytes "FUGG": magic written big-endian
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;  // ggml's GGUF_MAX_STRING_LENGTH
constexpr uint64_t kMaxKeyBytes = 65535;                 // the spec's key limit
constexpr uint64_t kMaxNameBytes = 63;  // ggml's GGML_MAX_NAME is 64 including the NUL
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
// The smallest possible encodings, used to bound counts before any loop runs: a KV is a
// length, a one-byte key, a type and a one-byte value; a tensor info is a length, a one-byte
// name, n_dims, one dimension, a type and an offset.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
constexpr uint64_t kNoElem = std::numeric_limits<uint64_t>::max();

constexpr std::string_view kCorrupt = "the file is corrupt - re-download or re-convert it";
constexpr std::string_view kTruncated = "the file is truncated or corrupt - re-download it";

// Counts and lengths are u64 on disk but writers (and attacks) often mean -1: show both.
std::string num(uint64_t v) {
  if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return fmt::format("{}", v);
  return fmt::format("{} (= {} as int64)", v, static_cast<int64_t>(v));
}

// a + b exactly, even when the sum does not fit 64 bits (only used in messages).
std::string sum_str(uint64_t a, uint64_t b) {
  uint64_t s;
  if (!__builtin_add_overflow(a, b, &s)) return fmt::format("{}", s);
  return fmt::format("{} + {}", a, b);
}

// Keys and tensor names end up in logs and terminals: control bytes there are corruption
// (or an attempt to forge output), never a real name.
bool printable(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string_view value_type_str(uint32_t t) {
  return gguf_value_type_name(static_cast<GgufValueType>(t));
}

class Parser {
 public:
  Parser(std::string_view name, const uint8_t* base, uint64_t size, Parsed& out)
      : name_(name), base_(base), size_(size), out_(out) {}

  Result<void> run() {
    if (parse_all()) return {};
    return Error{std::move(err_)};
  }

 private:
  bool parse_all();
  bool parse_header(uint64_t& n_tensors, uint64_t& n_kv);
  bool parse_kv(uint64_t idx);
  bool parse_value(GgufValue& v);
  bool parse_array(GgufValue& v);
  bool check_alignment();
  bool parse_tensor_info(uint64_t idx);
  bool place_tensors();

  uint64_t remaining() const { return size_ - pos_; }
  bool read_u32(std::string_view field, uint32_t& v);
  bool read_u64(std::string_view field, uint64_t& v);
  bool read_string(std::string_view field, uint64_t max_len, std::string_view limit_note,
                   std::string_view& s, uint64_t elem = kNoElem);
  void set_tensor_ctx(size_t idx) {
    ctx_ = fmt::format("tensor '{}' (tensor info #{} at byte {})", escape(out_.tensors[idx].name),
                       idx, info_at_[idx]);
  }

  template <class... A>
  bool fail(fmt::format_string<A...> f, A&&... a) {
    std::string msg = fmt::format(f, std::forward<A>(a)...);
    err_ = ctx_.empty() ? fmt::format("gguf: {}: {}", name_, msg)
                        : fmt::format("gguf: {}: {}: {}", name_, ctx_, msg);
    return false;
  }

  std::string_view name_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  Parsed& out_;
  std::string ctx_;  // which entry is being read, prefixed to every message
  std::string err_;
  std::vector<uint64_t> info_at_;  // where each tensor info starts (for messages)
};

bool Parser::read_u32(std::string_view field, uint32_t& v) {
  if (remaining() < 4) {
    return fail("{} (at byte {}) needs 4 bytes but the file ends at byte {}; {}", field, pos_,
                size_, kTruncated);
  }
  v = load<uint32_t>(base_ + pos_);
  pos_ += 4;
  return true;
}

bool Parser::read_u64(std::string_view field, uint64_t& v) {
  if (remaining() < 8) {
    return fail("{} (at byte {}) needs 8 bytes but the file ends at byte {}; {}", field, pos_,
                size_, kTruncated);
  }
  v = load<uint64_t>(base_ + pos_);
  pos_ += 8;
  return true;
}

bool Parser::read_string(std::string_view field, uint64_t max_len, std::string_view limit_note,
                         std::string_view& s, uint64_t elem) {
  // Messages are built only on failure: this runs once per vocabulary entry.
  const auto what = [&] {
    return elem == kNoElem ? std::string(field) : fmt::format("{} #{}", field, elem);
  };
  const uint64_t at = pos_;
  if (remaining() < 8) {
    return fail("{} length (at byte {}) needs 8 bytes but the file ends at byte {}; {}", what(), at,
                size_, kTruncated);
  }
  const uint64_t len = load<uint64_t>(base_ + pos_);
  pos_ += 8;
  if (len > max_len) {
    return fail("{} length {} (at byte {}) exceeds {} bytes ({}); {}", what(), num(len), at,
                max_len, limit_note, kCorrupt);
  }
  if (len > remaining()) {
    return fail(
        "{} length {} (at byte {}) runs past the end of the file (only {} bytes follow); {}",
        what(), num(len), at, remaining(), kTruncated);
  }
  s = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
  pos_ += len;
  return true;
}

bool Parser::parse_all() {
  uint64_t n_tensors = 0, n_kv = 0;
  if (!parse_header(n_tensors, n_kv)) return false;
  // No reserve() from the counts: even bounded by the file size they could claim far more
  // memory than the entries actually present; vectors grow with what was really parsed.
  for (uint64_t i = 0; i < n_kv; ++i) {
    if (!parse_kv(i)) return false;
  }
  if (!check_alignment()) return false;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    if (!parse_tensor_info(i)) return false;
  }
  return place_tensors();
}

bool Parser::parse_header(uint64_t& n_tensors, uint64_t& n_kv) {
  ctx_ = "header";
  if (size_ == 0) return fail("the file is empty (0 bytes); {}", kTruncated);
  if (size_ < 4) {
    return fail("magic (at byte 0) needs 4 bytes but the file has only {}; {}", size_, kTruncated);
  }
  const uint32_t magic = load<uint32_t>(base_);
  if (magic == kMagicSwapped) {
    return fail(
        "magic (at byte 0) is \"FUGG\": this is a big-endian (byte-swapped) GGUF file; Sieve reads "
        "only little-endian GGUF - convert it back with gguf-py or download the little-endian "
        "file");
  }
  if (magic != kMagic) {
    return fail(
        "magic (at byte 0) is {:02x} {:02x} {:02x} {:02x} (\"{}\"), expected 47 47 55 46 "
        "(\"GGUF\"); "
        "this is not a GGUF file",
        base_[0], base_[1], base_[2], base_[3],
        escape(std::string_view(reinterpret_cast<const char*>(base_), 4)));
  }
  pos_ = 4;
  uint32_t version;
  if (!read_u32("version", version)) return false;
  if (version != 0 && (version & 0xFFFF) == 0) {
    // ggml's own heuristic: a small version number written big-endian lands in the high half.
    return fail(
        "version (at byte 4) is 0x{:08x}, which is a byte-swapped {}: the file was written for a "
        "big-endian host; Sieve reads only little-endian GGUF - convert it with gguf-py",
        version, __builtin_bswap32(version));
  }
  if (version == 1) {
    return fail(
        "version (at byte 4) is 1: GGUFv1 is no longer supported; re-convert the model with a "
        "current llama.cpp convert_hf_to_gguf.py");
  }
  if (version != 2 && version != 3) {
    return fail("version (at byte 4) is {}: this reader supports GGUF versions 2 and 3; {}",
                version, version > 3 ? "the file is from a newer writer - update Sieve" : kCorrupt);
  }
  out_.version = version;
  if (!read_u64("n_tensors", n_tensors)) return false;
  if (!read_u64("n_kv", n_kv)) return false;
  const uint64_t rem = remaining();
  if (n_tensors > rem / kMinTensorInfoBytes) {
    return fail(
        "n_tensors = {} (at byte 8) is impossible: each tensor info takes at least {} bytes and "
        "only "
        "{} bytes follow the header; {}",
        num(n_tensors), kMinTensorInfoBytes, rem, kTruncated);
  }
  if (n_kv > rem / kMinKvBytes) {
    return fail(
        "n_kv = {} (at byte 16) is impossible: each key/value pair takes at least {} bytes and "
        "only "
        "{} bytes follow the header; {}",
        num(n_kv), kMinKvBytes, rem, kTruncated);
  }
  if (n_tensors > (rem - n_kv * kMinKvBytes) / kMinTensorInfoBytes) {
    return fail(
        "n_tensors = {} (at byte 8) and n_kv = {} (at byte 16) are impossible together: they need "
        "at least {} bytes but only {} follow the header; {}",
        n_tensors, n_kv, sum_str(n_kv * kMinKvBytes, n_tensors * kMinTensorInfoBytes), rem,
        kTruncated);
  }
  return true;
}

bool Parser::parse_kv(uint64_t idx) {
  const uint64_t start = pos_;
  ctx_ = fmt::format("kv #{} (at byte {})", idx, start);
  std::string_view key;
  if (!read_string("key", kMaxKeyBytes, "GGUF keys are at most 65535 bytes", key)) return false;
  if (key.empty()) return fail("key (at byte {}) is empty; {}", start, kCorrupt);
  if (!printable(key)) {
    return fail("key '{}' (at byte {}) contains control characters; {}", escape(key, 200),
                start + 8, kCorrupt);
  }
  // Printable already, but may hold invalid UTF-8 or quotes.
  ctx_ = fmt::format("key '{}' (kv #{} at byte {})", escape(key), idx, start);
  if (auto it = out_.kv_index.find(key); it != out_.kv_index.end()) {
    return fail("duplicate key: kv #{} already defines it; {}", it->second, kCorrupt);
  }
  const uint64_t type_at = pos_;
  uint32_t type;
  if (!read_u32("value type", type)) return false;
  if (type >= kNumValueTypes) {
    return fail("value type {} (at byte {}) is not a GGUF value type (valid ids are 0..12); {}",
                type, type_at, kCorrupt);
  }
  GgufValue v{};
  v.type = static_cast<GgufValueType>(type);
  v.offset = pos_;
  if (!parse_value(v)) return false;
  out_.kv_index.emplace(key, out_.kvs.size());
  out_.kvs.push_back(GgufKv{key, v});
  return true;
}

bool Parser::parse_value(GgufValue& v) {
  if (v.type == GgufValueType::STRING) {
    std::string_view s;
    if (!read_string("string value", kMaxStringBytes, "ggml's limit is 1 GiB", s)) return false;
    v.str = s;
    v.data = reinterpret_cast<const uint8_t*>(s.data());
    return true;
  }
  if (v.type == GgufValueType::ARRAY) return parse_array(v);
  const uint64_t n = fixed_value_size(v.type);
  if (remaining() < n) {
    return fail("{} value (at byte {}) needs {} bytes but the file ends at byte {}; {}",
                gguf_value_type_name(v.type), pos_, n, size_, kTruncated);
  }
  if (v.type == GgufValueType::BOOL && base_[pos_] > 1) {
    return fail("BOOL value (at byte {}) is {}; a BOOL must be 0 or 1; {}", pos_, base_[pos_],
                kCorrupt);
  }
  decode_scalar(base_ + pos_, v);
  pos_ += n;
  return true;
}

bool Parser::parse_array(GgufValue& v) {
  const uint64_t type_at = pos_;
  uint32_t et;
  if (!read_u32("array element type", et)) return false;
  if (et >= kNumValueTypes) {
    return fail(
        "array element type {} (at byte {}) is not a GGUF value type (valid ids are 0..12); {}", et,
        type_at, kCorrupt);
  }
  if (et == static_cast<uint32_t>(GgufValueType::ARRAY)) {
    return fail(
        "array element type (at byte {}) is ARRAY: nested arrays are not supported (ggml rejects "
        "them too); {}",
        type_at, kCorrupt);
  }
  const uint64_t count_at = pos_;
  uint64_t count;
  if (!read_u64("array count", count)) return false;
  v.elem_type = static_cast<GgufValueType>(et);
  v.n_elems = count;
  v.data = base_ + pos_;
  if (v.elem_type == GgufValueType::STRING) {
    if (count > remaining() / 8) {
      return fail(
          "array count {} (at byte {}) is impossible: each STRING element takes at least 8 bytes "
          "and only {} bytes follow; {}",
          num(count), count_at, remaining(), kTruncated);
    }
    std::string_view s;
    for (uint64_t i = 0; i < count; ++i) {
      if (!read_string("array element", kMaxStringBytes, "ggml's limit is 1 GiB", s, i)) {
        return false;
      }
    }
    return true;
  }
  const uint64_t es = fixed_value_size(v.elem_type);
  if (count > remaining() / es) {
    return fail(
        "array count {} (at byte {}) of {} elements ({} bytes each) runs past the end of the file "
        "(only {} bytes follow); {}",
        num(count), count_at, value_type_str(et), es, remaining(), kTruncated);
  }
  if (v.elem_type == GgufValueType::BOOL) {
    for (uint64_t i = 0; i < count; ++i) {
      if (base_[pos_ + i] > 1) {
        return fail("BOOL array element #{} (at byte {}) is {}; a BOOL must be 0 or 1; {}", i,
                    pos_ + i, base_[pos_ + i], kCorrupt);
      }
    }
  }
  pos_ += count * es;
  return true;
}

bool Parser::check_alignment() {
  auto it = out_.kv_index.find("general.alignment");
  if (it == out_.kv_index.end()) {
    out_.alignment = 32;  // the GGUF default
    return true;
  }
  const GgufValue& v = out_.kvs[it->second].value;
  ctx_ = fmt::format("key 'general.alignment' (kv #{})", it->second);
  if (v.type != GgufValueType::UINT32) {
    return fail("value (at byte {}) has type {}, but general.alignment must be a UINT32; {}",
                v.offset, gguf_value_type_name(v.type), kCorrupt);
  }
  if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
    return fail("value {} (at byte {}) is not a non-zero power of two; {}", v.u, v.offset,
                kCorrupt);
  }
  out_.alignment = static_cast<uint32_t>(v.u);
  return true;
}

bool Parser::parse_tensor_info(uint64_t idx) {
  static constexpr std::string_view kDimField[kMaxDims] = {"ne[0]", "ne[1]", "ne[2]", "ne[3]"};
  const uint64_t start = pos_;
  ctx_ = fmt::format("tensor info #{} (at byte {})", idx, start);
  std::string_view name;
  if (!read_string("name", kMaxNameBytes, "ggml limits tensor names to 63 bytes", name)) {
    return false;
  }
  if (name.empty()) return fail("name (at byte {}) is empty; {}", start, kCorrupt);
  if (!printable(name)) {
    return fail("name '{}' (at byte {}) contains control characters; {}", escape(name), start + 8,
                kCorrupt);
  }
  ctx_ = fmt::format("tensor '{}' (tensor info #{} at byte {})", escape(name), idx, start);
  if (auto it = out_.tensor_index.find(name); it != out_.tensor_index.end()) {
    return fail("duplicate tensor name: tensor info #{} has the same name; {}", it->second,
                kCorrupt);
  }
  GgufTensorInfo t;
  t.name = name;
  const uint64_t n_dims_at = pos_;
  if (!read_u32("n_dims", t.n_dims)) return false;
  if (t.n_dims < 1 || t.n_dims > kMaxDims) {
    return fail("n_dims = {} (at byte {}) is outside 1..{}; {}", t.n_dims, n_dims_at, kMaxDims,
                kCorrupt);
  }
  const uint64_t dims_at = pos_;
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < t.n_dims; ++d) {
    const uint64_t at = pos_;
    uint64_t raw;
    if (!read_u64(kDimField[d], raw)) return false;
    if (raw == 0 || raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail("{} (dimension {} at byte {}) is {}; dimensions must be >= 1; {}", kDimField[d],
                  d, at, static_cast<int64_t>(raw), kCorrupt);
    }
    t.ne[d] = static_cast<int64_t>(raw);
    if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
      return fail(
          "dimensions (at byte {}) multiply to more than 2^63-1 elements (overflow at {} = {}); {}",
          dims_at, kDimField[d], t.ne[d], kCorrupt);
    }
  }
  const uint64_t type_at = pos_;
  uint32_t type_id;
  if (!read_u32("type", type_id)) return false;
  const TypeInfo* ti = type_info(type_id);
  if (ti == nullptr) {
    return fail("type id {} (at byte {}) is not a known ggml type ({}); {}", type_id, type_at,
                type_id < kGgmlTypeCount ? "the id was removed from ggml"
                                         : "it is newer than this reader or corrupt",
                "re-convert the model or update Sieve");
  }
  t.type = static_cast<GgmlType>(type_id);
  if (t.ne[0] % ti->block_size != 0) {
    return fail(
        "ne[0] = {} (at byte {}) is not a multiple of the {} block size {}: rows must hold whole "
        "blocks; {}",
        t.ne[0], dims_at, ti->name, ti->block_size, kCorrupt);
  }
  const uint64_t blocks_per_row = static_cast<uint64_t>(t.ne[0] / ti->block_size);
  uint64_t row_bytes = 0;
  if (__builtin_mul_overflow(blocks_per_row, static_cast<uint64_t>(ti->type_size), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, static_cast<uint64_t>(t.n_rows()), &t.n_bytes)) {
    return fail("size in bytes of {} x [{}, {}, {}, {}] overflows 64 bits; {}", ti->name, t.ne[0],
                t.ne[1], t.ne[2], t.ne[3], kCorrupt);
  }
  const uint64_t offset_at = pos_;
  if (!read_u64("offset", t.offset)) return false;
  if (t.offset % out_.alignment != 0) {
    return fail("offset {} (at byte {}) is not a multiple of the alignment {}; {}", num(t.offset),
                offset_at, out_.alignment, kCorrupt);
  }
  info_at_.push_back(start);
  out_.tensor_index.emplace(name, out_.tensors.size());
  out_.tensors.push_back(t);
  return true;
}

bool Parser::place_tensors() {
  const uint64_t end_infos = pos_;
  const uint64_t a = out_.alignment;
  const uint64_t pad = (a - end_infos % a) % a;
  uint64_t data_offset;
  if (__builtin_add_overflow(end_infos, pad, &data_offset) || data_offset > size_) {
    if (!out_.tensors.empty()) {
      ctx_ = "data section";
      return fail(
          "starts at byte {} (end of the tensor infos at {} padded to the alignment {}) but the "
          "file "
          "has only {} bytes; {}",
          sum_str(end_infos, pad), end_infos, a, size_, kTruncated);
    }
    data_offset = size_;  // no tensors: writers may omit the final padding
  }
  out_.data_offset = data_offset;
  const uint64_t data_size = size_ - data_offset;
  const size_t n = out_.tensors.size();
  for (size_t i = 0; i < n; ++i) {
    const GgufTensorInfo& t = out_.tensors[i];
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      set_tensor_ctx(i);
      if (t.offset > data_size) {
        return fail(
            "offset {} points past the end of the file: the data section holds only {} bytes (from "
            "byte {} to the end at {}); {}",
            num(t.offset), data_size, data_offset, size_, kTruncated);
      }
      const uint64_t begin = data_offset + t.offset;
      return fail("data [{}, {}) runs past the end of the file (size {}); {}", begin,
                  sum_str(begin, t.n_bytes), size_, kTruncated);
    }
  }
  // Sorted by start, the ranges are disjoint iff each ends before the next starts.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const auto& tx = out_.tensors[x];
    const auto& ty = out_.tensors[y];
    return tx.offset != ty.offset ? tx.offset < ty.offset : x < y;
  });
  for (size_t k = 1; k < n; ++k) {
    const GgufTensorInfo& prev = out_.tensors[order[k - 1]];
    const GgufTensorInfo& cur = out_.tensors[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes) {
      set_tensor_ctx(order[k]);
      return fail("data [{}, {}) overlaps tensor '{}' (tensor info #{}) at [{}, {}); {}",
                  data_offset + cur.offset, data_offset + cur.offset + cur.n_bytes,
                  escape(prev.name), order[k - 1], data_offset + prev.offset,
                  data_offset + prev.offset + prev.n_bytes, kCorrupt);
    }
  }
  return true;
}

}  // namespace

Result<void> parse(std::string_view name, const uint8_t* base, uint64_t size, Parsed& out) {
  return Parser(name, base, size, out).run();
}

}  // namespace sieve::gguf_detail
