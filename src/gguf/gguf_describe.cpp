// gguf_describe(): the text `sieve inspect` prints. Every file-supplied string goes through
// escape() so a hostile file cannot inject terminal escapes or fake lines.
#include <algorithm>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "gguf/gguf_internal.h"

namespace sieve {
namespace {

using gguf_detail::escape;

constexpr uint64_t kShownElems = 8;        // array elements shown without show_all
constexpr size_t kShownStringBytes = 160;  // string value bytes shown without show_all
constexpr size_t kShownElemBytes = 48;     // per string element inside an abbreviated array
constexpr size_t kMaxKeyColumn = 44;

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(n);
  int u = -1;
  while (x >= 1024 && u < 3) {
    x /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", x, units[u]);
}

std::string scalar_text(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64:
      return fmt::format("{}", v.u);
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64:
      return fmt::format("{}", v.i);
    case GgufValueType::FLOAT32:
      return fmt::format("{}", static_cast<float>(v.f));
    case GgufValueType::FLOAT64:
      return fmt::format("{}", v.f);
    case GgufValueType::BOOL:
      return v.u ? "true" : "false";
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      break;
  }
  return "?";
}

std::string string_text(std::string_view s, size_t max_bytes) {
  std::string out = fmt::format("\"{}\"", escape(s, max_bytes));
  if (s.size() > max_bytes) out += fmt::format(" ({} bytes)", s.size());
  return out;
}

std::string array_text(const GgufValue& v, bool show_all) {
  const uint64_t shown = show_all ? v.n_elems : std::min(v.n_elems, kShownElems);
  const size_t elem_bytes = show_all ? SIZE_MAX : kShownElemBytes;
  std::string out = "[";
  const uint8_t* p = v.data;
  const uint64_t es = gguf_detail::fixed_value_size(v.elem_type);
  GgufValue e{};
  e.type = v.elem_type;
  for (uint64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    if (v.elem_type == GgufValueType::STRING) {
      const uint64_t len = gguf_detail::load<uint64_t>(p);
      out += string_text(std::string_view(reinterpret_cast<const char*>(p + 8), len), elem_bytes);
      p += 8 + len;
    } else {
      gguf_detail::decode_scalar(p + i * es, e);
      out += scalar_text(e);
    }
  }
  if (shown < v.n_elems) out += fmt::format(", ... {} more", v.n_elems - shown);
  out += "]";
  return out;
}

std::string dims_text(const GgufTensorInfo& t) {
  std::string out;
  for (uint32_t d = 0; d < t.n_dims; ++d) {
    if (d > 0) out += " x ";
    out += fmt::format("{}", t.ne[d]);
  }
  return out;
}

template <class... A>
void line(std::string& out, fmt::format_string<A...> f, A&&... a) {
  fmt::format_to(std::back_inserter(out), f, std::forward<A>(a)...);
  out += '\n';
}

struct TypeTotals {
  uint64_t n_tensors = 0;
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

}  // namespace

std::string gguf_describe(const GgufFile& f, bool show_all_arrays) {
  std::string out;
  line(out, "GGUF file: {}", escape(f.path()));
  line(out, "  version:      {}", f.version());
  line(out, "  file size:    {} bytes ({})", f.file_size(), human_bytes(f.file_size()));
  line(out, "  alignment:    {}{}", f.alignment(), f.find("general.alignment") ? "" : " (default)");
  line(out, "  tensors:      {}", f.tensors().size());
  line(out, "  metadata:     {} key/value pairs", f.kvs().size());
  line(out, "  data offset:  {} ({} bytes of tensor data and padding follow)", f.data_offset(),
       f.file_size() - f.data_offset());

  size_t key_w = 0;
  for (const GgufKv& kv : f.kvs()) key_w = std::max(key_w, kv.key.size());
  key_w = std::min(key_w, kMaxKeyColumn);
  line(out, "");
  line(out, "metadata ({}):", f.kvs().size());
  for (const GgufKv& kv : f.kvs()) {
    const GgufValue& v = kv.value;
    std::string type(gguf_value_type_name(v.type));
    std::string value;
    if (v.type == GgufValueType::ARRAY) {
      type = fmt::format("ARRAY<{}>[{}]", gguf_value_type_name(v.elem_type), v.n_elems);
      value = array_text(v, show_all_arrays);
    } else if (v.type == GgufValueType::STRING) {
      value = string_text(v.str, show_all_arrays ? SIZE_MAX : kShownStringBytes);
    } else {
      value = scalar_text(v);
    }
    line(out, "  {:<{}}  {:<20} {}", escape(kv.key), key_w, type, value);
  }

  size_t name_w = 4;
  for (const GgufTensorInfo& t : f.tensors()) name_w = std::max(name_w, t.name.size());
  std::map<uint32_t, TypeTotals> by_type;
  TypeTotals all;
  bool any_unsupported = false;
  line(out, "");
  line(out, "tensors ({}):", f.tensors().size());
  line(out, "  {:>5}  {:<{}}  {:<8} {:<24} {:>14} {:>14}", "#", "name", name_w, "type", "dims",
       "offset", "bytes");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    const bool supported = t.type_supported();
    any_unsupported |= !supported;
    const std::string type = fmt::format("{}{}", type_name(t.type), supported ? "" : "*");
    line(out, "  {:>5}  {:<{}}  {:<8} {:<24} {:>14} {:>14}", i, escape(t.name), name_w, type,
         dims_text(t), t.offset, t.n_bytes);
    for (TypeTotals* tt : {&by_type[static_cast<uint32_t>(t.type)], &all}) {
      tt->n_tensors += 1;
      tt->n_elements += static_cast<uint64_t>(t.n_elements());
      tt->n_bytes += t.n_bytes;
    }
  }
  if (any_unsupported) {
    line(out, "  * type not supported by Sieve's compute backends: the model cannot be run");
  }

  line(out, "");
  line(out, "totals by type:");
  line(out, "  {:<8} {:>8} {:>16} {:>16}", "type", "tensors", "elements", "bytes");
  for (const auto& [id, tt] : by_type) {
    line(out, "  {:<8} {:>8} {:>16} {:>16}  ({})", type_name(static_cast<GgmlType>(id)),
         tt.n_tensors, tt.n_elements, tt.n_bytes, human_bytes(tt.n_bytes));
  }
  line(out, "  {:<8} {:>8} {:>16} {:>16}  ({})", "all", all.n_tensors, all.n_elements, all.n_bytes,
       human_bytes(all.n_bytes));
  return out;
}

}  // namespace sieve
