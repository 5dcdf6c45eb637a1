#include "sparse/sketch_basis.h"

#include <cmath>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "core/text_file.h"
#include "sparse/indexer.h"

namespace sieve {

using nlohmann::json;

constexpr const char* kFormat = "sieve-sketch-basis";
constexpr int kVersion = 1;

KeyMoments::KeyMoments(int32_t n_layer, int32_t n_kv_head, int32_t head_dim)
    : n_layer_(n_layer),
      n_kv_head_(n_kv_head),
      d_(head_dim),
      m_(static_cast<size_t>(n_layer) * n_kv_head * head_dim * head_dim, 0.0),
      count_(static_cast<size_t>(n_layer) * n_kv_head, 0) {}

void KeyMoments::add(int32_t layer, int32_t kv_head, const float* keys, int64_t n) {
  const size_t u = static_cast<size_t>(layer) * n_kv_head_ + kv_head;
  double* m = m_.data() + u * d_ * d_;
  for (int64_t t = 0; t < n; ++t) {
    const float* k = keys + t * d_;
    for (int32_t i = 0; i < d_; ++i) {
      const double ki = k[i];
      double* row = m + static_cast<size_t>(i) * d_;
      for (int32_t j = i; j < d_; ++j) row[j] += ki * k[j];
    }
  }
  count_[u] += n;
}

SketchBasis KeyMoments::fit(int32_t dim) const {
  SketchBasis b;
  b.n_layer = n_layer_;
  b.n_kv_head = n_kv_head_;
  b.head_dim = d_;
  b.dim = dim;
  b.fitted.assign(n_layer_, 0);
  b.p.assign(static_cast<size_t>(n_layer_) * n_kv_head_ * d_ * dim, 0.0f);
  b.captured.assign(static_cast<size_t>(n_layer_) * n_kv_head_, 0.0);
  for (int32_t l = 0; l < n_layer_; ++l) {
    bool any = true;
    for (int32_t h = 0; h < n_kv_head_; ++h)
      any = any && count_[static_cast<size_t>(l) * n_kv_head_ + h] > 0;
    if (!any) continue;
    b.fitted[l] = 1;
    for (int32_t h = 0; h < n_kv_head_; ++h) {
      const size_t u = static_cast<size_t>(l) * n_kv_head_ + h;
      b.tokens = count_[u];
      std::vector<double> a(static_cast<size_t>(d_) * d_);
      const double* m = m_.data() + u * d_ * d_;
      for (int32_t i = 0; i < d_; ++i) {
        for (int32_t j = i; j < d_; ++j) {
          const double v = m[static_cast<size_t>(i) * d_ + j] / static_cast<double>(count_[u]);
          a[static_cast<size_t>(i) * d_ + j] = v;
          a[static_cast<size_t>(j) * d_ + i] = v;
        }
      }
      std::vector<double> values, vecs;
      symmetric_eigen(std::move(a), d_, values, vecs);
      double total = 0, kept = 0;
      for (int32_t i = 0; i < d_; ++i) total += std::max(0.0, values[i]);
      for (int32_t c = 0; c < dim; ++c) kept += std::max(0.0, values[c]);
      b.captured[u] = total > 0 ? kept / total : 0.0;
      float* p = b.p.data() + u * d_ * dim;
      for (int32_t r = 0; r < d_; ++r) {
        for (int32_t c = 0; c < dim; ++c)
          p[static_cast<size_t>(r) * dim + c] =
              static_cast<float>(vecs[static_cast<size_t>(r) * d_ + c]);
      }
    }
  }
  return b;
}

Status save_sketch_basis(const SketchBasis& b, const std::string& path) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] = {{"name", b.model_name}, {"arch", b.model_arch}};
  j["n_layer"] = b.n_layer;
  j["n_kv_head"] = b.n_kv_head;
  j["head_dim"] = b.head_dim;
  j["dim"] = b.dim;
  j["tokens"] = b.tokens;
  j["fitted"] = b.fitted;
  j["captured"] = b.captured;
  j["p"] = b.p;
  std::ofstream out(path, std::ios::binary);
  out << j.dump();
  out.close();
  if (!out) return make_error("cannot write the sketch basis {}", path);
  return {};
}

namespace {

Result<SketchBasis> basis_from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // the position only: the parser's message quotes the text it read
    return make_error("not JSON (parse error at byte {})", e.byte);
  } catch (const json::exception&) {  // out_of_range for a number like 8e8888 (sketch_basis_fuzz)
    return make_error("not JSON (a number out of range)");
  }
  // Types are checked before values are read: value() and get() throw on a wrong type, and
  // get<uint8_t>() of 1e300 is an out-of-range cast (sketch_basis_fuzz).
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() || j["format"] != kFormat)
    return make_error("field 'format' is not \"{}\"", kFormat);
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int>() != kVersion) {
    return make_error("field 'version' must be {}", kVersion);
  }
  SketchBasis b;
  auto get_int = [&](const char* k, int32_t lo, int32_t hi, int32_t& out) -> Status {
    if (!j.contains(k) || !j[k].is_number_integer())
      return make_error("field '{}' is missing or not an integer", k);
    const int64_t v = j[k].get<int64_t>();
    if (v < lo || v > hi) return make_error("field '{}' = {} is outside [{}, {}]", k, v, lo, hi);
    out = static_cast<int32_t>(v);
    return {};
  };
  if (Status st = get_int("n_layer", 1, 4096, b.n_layer); !st) return st.error();
  if (Status st = get_int("n_kv_head", 1, 1024, b.n_kv_head); !st) return st.error();
  if (Status st = get_int("head_dim", 1, 1024, b.head_dim); !st) return st.error();
  if (Status st = get_int("dim", 1, b.head_dim, b.dim); !st) return st.error();
  if (!j.contains("fitted") || !j["fitted"].is_array())
    return make_error("field 'fitted' must be an array of 0 and 1");
  for (const json& f : j["fitted"]) {
    if (!f.is_number_integer() || (f.get<int64_t>() != 0 && f.get<int64_t>() != 1))
      return make_error("field 'fitted' must be an array of 0 and 1");
    b.fitted.push_back(static_cast<uint8_t>(f.get<int64_t>()));
  }
  if (j.contains("tokens") && !j["tokens"].is_number_integer())
    return make_error("field 'tokens' must be an integer");
  if (j.contains("model")) {  // provenance, optional: {"name": ..., "arch": ...}
    const json& m = j["model"];
    if (!m.is_object()) return make_error("field 'model' must be an object");
    for (auto [key, out] : {std::pair{"name", &b.model_name}, std::pair{"arch", &b.model_arch}}) {
      if (!m.contains(key)) continue;
      if (!m[key].is_string()) return make_error("field 'model.{}' must be a string", key);
      *out = m[key].get<std::string>();
    }
  }
  std::vector<double> p64;
  try {
    b.captured = j.at("captured").get<std::vector<double>>();
    // read as doubles: a value past float's range is rejected below, never cast (UB)
    p64 = j.at("p").get<std::vector<double>>();
    b.tokens = j.value("tokens", int64_t{0});
  } catch (const json::exception& e) {
    return make_error("fields 'captured', 'p' must be arrays of numbers ({})", e.what());
  }
  const size_t units = static_cast<size_t>(b.n_layer) * b.n_kv_head;
  if (b.fitted.size() != static_cast<size_t>(b.n_layer))
    return make_error("field 'fitted' needs n_layer = {} entries", b.n_layer);
  if (b.captured.size() != units)
    return make_error("field 'captured' needs n_layer x n_kv_head = {} entries", units);
  if (p64.size() != units * b.head_dim * b.dim) {
    return make_error("field 'p' needs n_layer x n_kv_head x head_dim x dim = {} values, has {}",
                      units * b.head_dim * b.dim, p64.size());
  }
  b.p.resize(p64.size());
  for (size_t i = 0; i < p64.size(); ++i) {
    if (!narrow_to_float(p64[i], b.p[i]))
      return make_error("field 'p' holds a value that is not a finite float");
  }
  bool any = false;
  for (uint8_t f : b.fitted) any = any || f;
  if (!any) return make_error("no layer is fitted");
  return b;
}

}  // namespace

Result<SketchBasis> load_sketch_basis(const std::string& path) {
  auto text = read_text_file(path, "sketch basis");
  if (!text) return text.error();
  auto b = basis_from_json(*text);
  if (!b) return make_error("sketch basis {}: {}", path, b.message());
  return b;
}

}  // namespace sieve
