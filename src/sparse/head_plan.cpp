#include "sparse/head_plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "core/text_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace sieve {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "sieve-head-plan";
constexpr int kVersion = 1;

size_t lh(const HeadShape& s, int32_t layer, int32_t head) {
  return static_cast<size_t>(layer) * s.n_head + head;
}

// A float as the shortest decimal that reads back to the same float: weights stay exact
// through JSON without 17-digit doubles.
json short_float(float f) {
  return std::strtod(fmt::format("{}", f).c_str(), nullptr);
}

json float_array(const std::vector<float>& v) {
  json a = json::array();
  for (float f : v) a.push_back(short_float(f));
  return a;
}

// Parsing helpers: every error names the field.
Result<int64_t> get_int(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) return make_error("{}: missing \"{}\"", where, key);
  const json& v = obj.at(key);
  if (!v.is_number_integer()) return make_error("{}: \"{}\" must be an integer", where, key);
  return v.get<int64_t>();
}

// An optional field of the plan's record (model, calibration, indexer fit): absent or null
// keeps `out`; otherwise it must have the field's type and range. Never a json exception or a
// cast out of range (`value()` throws on a wrong type and casts 1e300 to int).
template <class T>
Status opt_field(const json& obj, const char* key, const std::string& where, T& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return make_error("{}: \"{}\" must be a string", where, key);
    out = it->get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    bool ok = it->is_number_integer();
    if (ok && it->is_number_unsigned()) {
      ok = it->get<uint64_t>() <= static_cast<uint64_t>(L::max());
    } else if (ok) {
      const int64_t i = it->get<int64_t>();
      ok = i >= static_cast<int64_t>(L::min()) &&
           (i < 0 || static_cast<uint64_t>(i) <= static_cast<uint64_t>(L::max()));
    }
    if (!ok) {
      return make_error("{}: \"{}\" must be an integer in [{}, {}]", where, key, L::min(),
                        L::max());
    }
    out = it->is_number_unsigned() ? static_cast<T>(it->get<uint64_t>())
                                   : static_cast<T>(it->get<int64_t>());
  } else {
    if (!it->is_number()) return make_error("{}: \"{}\" must be a number", where, key);
    out = static_cast<T>(it->get<double>());
  }
  return {};
}

Result<std::vector<float>> get_floats(const json& v, size_t n, const std::string& where) {
  if (!v.is_array()) return make_error("{} must be an array of numbers", where);
  if (v.size() != n) return make_error("{} has {} entries, expected {}", where, v.size(), n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (!v[i].is_number()) return make_error("{}[{}] is not a number", where, i);
    if (!narrow_to_float(v[i].get<double>(), out[i]))
      return make_error("{}[{}] is not a finite float", where, i);
  }
  return out;
}

// [n_rows][n_cols] array of arrays into a flat vector.
template <class T, class Conv>
Status get_matrix(const json& root, const char* key, int32_t n_rows, int32_t n_cols,
                  std::vector<T>& out, Conv conv) {
  if (!root.contains(key)) return make_error("missing \"{}\"", key);
  const json& m = root.at(key);
  if (!m.is_array()) return make_error("\"{}\" must be an array with one array per layer", key);
  if (static_cast<int32_t>(m.size()) != n_rows) {
    return make_error("\"{}\" has {} layers, the plan says n_layer = {}", key, m.size(), n_rows);
  }
  out.assign(static_cast<size_t>(n_rows) * n_cols, T{});
  for (int32_t r = 0; r < n_rows; ++r) {
    const json& row = m[r];
    if (!row.is_array() || static_cast<int32_t>(row.size()) != n_cols) {
      return make_error("\"{}\"[{}] must have {} entries (one per query head), has {}", key, r,
                        n_cols, row.is_array() ? row.size() : 0);
    }
    for (int32_t c = 0; c < n_cols; ++c) {
      Status st = conv(row[c], out[static_cast<size_t>(r) * n_cols + c],
                       fmt::format("\"{}\"[{}][{}]", key, r, c));
      if (!st) return st;
    }
  }
  return {};
}

}  // namespace

HeadPlan HeadPlan::empty(const HeadShape& shape) {
  HeadPlan p;
  p.shape = shape;
  const size_t n = static_cast<size_t>(shape.n_layer) * shape.n_head;
  p.retrieval.assign(n, 0);
  p.scores.assign(n, 0.0f);
  return p;
}

bool HeadPlan::kv_group_full(int32_t layer, int32_t kv_head) const {
  const int32_t g = group_size();
  for (int32_t h = kv_head * g; h < (kv_head + 1) * g; ++h) {
    if (is_retrieval(layer, h)) return true;
  }
  return false;
}

int32_t HeadPlan::n_retrieval() const {
  return static_cast<int32_t>(std::count(retrieval.begin(), retrieval.end(), uint8_t{1}));
}

int32_t HeadPlan::n_retrieval(int32_t layer) const {
  int32_t c = 0;
  for (int32_t h = 0; h < shape.n_head; ++h) c += is_retrieval(layer, h);
  return c;
}

double HeadPlan::retrieval_share() const {
  return retrieval.empty()
             ? 0.0
             : static_cast<double>(n_retrieval()) / static_cast<double>(retrieval.size());
}

int32_t HeadPlan::n_kv_full() const {
  int32_t c = 0;
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    for (int32_t g = 0; g < shape.n_head_kv; ++g) c += kv_group_full(l, g);
  }
  return c;
}

const float* HeadPlan::indexer_q(int32_t layer, int32_t head) const {
  if (d_idx <= 0) return nullptr;
  const std::vector<float>& w = w_q[lh(shape, layer, head)];
  return w.empty() ? nullptr : w.data();
}

const float* HeadPlan::indexer_k(int32_t layer, int32_t kv_head) const {
  if (d_idx <= 0) return nullptr;
  const std::vector<float>& w = w_k[static_cast<size_t>(layer) * shape.n_head_kv + kv_head];
  return w.empty() ? nullptr : w.data();
}

Status validate_head_plan(const HeadPlan& p) {
  const HeadShape& s = p.shape;
  if (s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0) {
    return make_error(
        "head plan: shape n_layer={} n_head={} n_head_kv={} head_dim={} must be positive",
        s.n_layer, s.n_head, s.n_head_kv, s.head_dim);
  }
  if (s.n_head % s.n_head_kv != 0) {
    return make_error("head plan: n_head = {} is not a multiple of n_head_kv = {}", s.n_head,
                      s.n_head_kv);
  }
  const size_t n = static_cast<size_t>(s.n_layer) * s.n_head;
  if (p.retrieval.size() != n || p.scores.size() != n) {
    return make_error("head plan: masks/scores hold {}/{} heads, the shape has {}",
                      p.retrieval.size(), p.scores.size(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    if (p.retrieval[i] > 1)
      return make_error("head plan: mask of layer {} head {} is not 0/1", i / s.n_head,
                        i % s.n_head);
    if (!std::isfinite(p.scores[i]))
      return make_error("head plan: score of layer {} head {} is not finite", i / s.n_head,
                        i % s.n_head);
  }
  if (!(p.ratio >= 0.0f && p.ratio <= 1.0f))
    return make_error("head plan: ratio {} is not in [0, 1]", p.ratio);
  if (p.d_idx < 0 || p.d_idx > s.head_dim) {
    return make_error("head plan: indexer d_idx = {} is not in [0, head_dim = {}]", p.d_idx,
                      s.head_dim);
  }
  if (p.d_idx > 0) {
    const size_t w = static_cast<size_t>(s.head_dim) * p.d_idx;
    if (p.w_q.size() != n || p.w_k.size() != static_cast<size_t>(s.n_layer) * s.n_head_kv) {
      return make_error(
          "head plan: indexer tables have {} query / {} KV heads, the shape has {} / {}",
          p.w_q.size(), p.w_k.size(), n, static_cast<size_t>(s.n_layer) * s.n_head_kv);
    }
    for (size_t i = 0; i < p.w_q.size(); ++i) {
      const int32_t l = static_cast<int32_t>(i / s.n_head), h = static_cast<int32_t>(i % s.n_head);
      if (!p.w_q[i].empty() && p.w_q[i].size() != w) {
        return make_error(
            "head plan: indexer W_Q of layer {} head {} has {} values, expected head_dim * d_idx = "
            "{}",
            l, h, p.w_q[i].size(), w);
      }
      if (!p.w_q[i].empty() &&
          p.w_k[static_cast<size_t>(l) * s.n_head_kv + h / (s.n_head / s.n_head_kv)].empty()) {
        return make_error(
            "head plan: indexer of layer {} head {} has W_Q but its KV head has no W_K", l, h);
      }
    }
    for (size_t i = 0; i < p.w_k.size(); ++i) {
      if (!p.w_k[i].empty() && p.w_k[i].size() != w) {
        return make_error(
            "head plan: indexer W_K of layer {} KV head {} has {} values, expected {}",
            i / s.n_head_kv, i % s.n_head_kv, p.w_k[i].size(), w);
      }
    }
  }
  return {};
}

Status check_head_plan_shape(const HeadPlan& p, const HeadShape& m) {
  const HeadShape& s = p.shape;
  if (s.n_layer != m.n_layer)
    return make_error("head plan has {} layers, the model {}", s.n_layer, m.n_layer);
  if (s.n_head != m.n_head)
    return make_error("head plan has {} query heads per layer, the model {}", s.n_head, m.n_head);
  if (s.n_head_kv != m.n_head_kv) {
    return make_error("head plan has {} KV heads per layer, the model {}", s.n_head_kv,
                      m.n_head_kv);
  }
  if (s.head_dim != m.head_dim)
    return make_error("head plan has head_dim {}, the model {}", s.head_dim, m.head_dim);
  return {};
}

std::string head_plan_to_json(const HeadPlan& p) {
  const HeadShape& s = p.shape;
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] = {{"name", p.model_name}, {"arch", p.model_arch}, {"sha256", p.model_sha256}};
  j["shape"] = {{"n_layer", s.n_layer},
                {"n_head", s.n_head},
                {"n_head_kv", s.n_head_kv},
                {"head_dim", s.head_dim}};
  j["calibration"] = {{"ratio", short_float(p.ratio)},
                      {"seed", p.seed},
                      {"samples", p.samples},
                      {"ctx", p.ctx},
                      {"score", p.score_method}};
  j["n_retrieval"] = p.n_retrieval();  // informational (recomputed on read)
  j["retrieval_share"] = p.retrieval_share();
  json mask = json::array(), scores = json::array();
  for (int32_t l = 0; l < s.n_layer; ++l) {
    json m = json::array(), sc = json::array();
    for (int32_t h = 0; h < s.n_head; ++h) {
      m.push_back(static_cast<int>(p.retrieval[lh(s, l, h)]));
      sc.push_back(short_float(p.scores[lh(s, l, h)]));
    }
    mask.push_back(std::move(m));
    scores.push_back(std::move(sc));
  }
  j["retrieval"] = std::move(mask);
  j["scores"] = std::move(scores);
  if (p.d_idx > 0) {
    json ix;
    ix["d_idx"] = p.d_idx;
    ix["input"] =
        "pre-RoPE q and k; W row-major [head_dim, d_idx]; logit = (q W_Q).(k W_K) * attn_scale";
    ix["recall_k"] = p.recall_k;
    ix["recall_of"] = p.recall_of;
    ix["fit_ms"] = p.fit_ms;
    json layers = json::array();
    for (int32_t l = 0; l < s.n_layer; ++l) {
      json wq = json::array(), wk = json::array(), fit = json::array();
      for (int32_t h = 0; h < s.n_head; ++h) {
        const std::vector<float>& w = p.w_q[lh(s, l, h)];
        wq.push_back(w.empty() ? json(nullptr) : float_array(w));
        if (w.empty() || p.fit.size() != p.w_q.size()) {
          fit.push_back(nullptr);
        } else {
          const IndexerFit& f = p.fit[lh(s, l, h)];
          json o = {{"kl_init", f.kl_init},
                    {"kl_fit", f.kl_fit},
                    {"recall_init", f.recall_init},
                    {"recall_fit", f.recall_fit}};
          if (f.keep > 0) {
            o["keep"] = f.keep;
            o["keep_oracle"] = f.keep_oracle;
            o["coverage"] = f.coverage;
          }
          fit.push_back(std::move(o));
        }
      }
      for (int32_t g = 0; g < s.n_head_kv; ++g) {
        const std::vector<float>& w = p.w_k[static_cast<size_t>(l) * s.n_head_kv + g];
        wk.push_back(w.empty() ? json(nullptr) : float_array(w));
      }
      layers.push_back({{"w_q", std::move(wq)}, {"w_k", std::move(wk)}, {"fit", std::move(fit)}});
    }
    ix["layers"] = std::move(layers);
    j["indexer"] = std::move(ix);
  }
  return j.dump(1) + "\n";
}

Result<HeadPlan> head_plan_from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // the position only: the parser's message quotes the text it read
    return make_error("head plan is not valid JSON (parse error at byte {})", e.byte);
  } catch (const json::exception&) {  // out_of_range for a number like 1e999
    return make_error("head plan is not valid JSON (a number out of range)");
  }
  if (!j.is_object()) return make_error("head plan: expected a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) {
    return make_error("head plan: \"format\" must be \"{}\" (written by sieve calibrate)", kFormat);
  }
  auto version = get_int(j, "version", "head plan");
  if (!version) return version.error();
  if (*version != kVersion)
    return make_error("head plan: version {} is not supported (this build reads {})", *version,
                      kVersion);
  HeadPlan p;
  if (!j.contains("shape")) return make_error("head plan: missing \"shape\"");
  const json& sh = j["shape"];
  int32_t* dims[] = {&p.shape.n_layer, &p.shape.n_head, &p.shape.n_head_kv, &p.shape.head_dim};
  const char* names[] = {"n_layer", "n_head", "n_head_kv", "head_dim"};
  for (int i = 0; i < 4; ++i) {
    auto v = get_int(sh, names[i], "head plan shape");
    if (!v) return v.error();
    if (*v <= 0 || *v > (1 << 16))
      return make_error("head plan shape: {} = {} is out of range", names[i], *v);
    *dims[i] = static_cast<int32_t>(*v);
  }
  if (p.shape.n_head % p.shape.n_head_kv != 0) {
    return make_error("head plan: n_head = {} is not a multiple of n_head_kv = {}", p.shape.n_head,
                      p.shape.n_head_kv);
  }
  if (j.contains("model") && j["model"].is_object()) {
    const json& m = j["model"];
    for (auto [key, out] : {std::pair{"name", &p.model_name}, std::pair{"arch", &p.model_arch},
                            std::pair{"sha256", &p.model_sha256}}) {
      SIEVE_TRY(opt_field(m, key, "head plan model", *out));
    }
  }
  if (j.contains("calibration") && j["calibration"].is_object()) {
    const json& c = j["calibration"];
    const std::string where = "head plan calibration";
    SIEVE_TRY(opt_field(c, "ratio", where, p.ratio));
    SIEVE_TRY(opt_field(c, "seed", where, p.seed));
    SIEVE_TRY(opt_field(c, "samples", where, p.samples));
    SIEVE_TRY(opt_field(c, "ctx", where, p.ctx));
    SIEVE_TRY(opt_field(c, "score", where, p.score_method));
  }
  const HeadShape s = p.shape;
  Status st =
      get_matrix(j, "retrieval", s.n_layer, s.n_head, p.retrieval,
                 [](const json& v, uint8_t& out, const std::string& where) -> Status {
                   if (!v.is_number_integer() || (v.get<int64_t>() != 0 && v.get<int64_t>() != 1)) {
                     return make_error("head plan: {} must be 0 or 1", where);
                   }
                   out = static_cast<uint8_t>(v.get<int64_t>());
                   return {};
                 });
  if (!st) return st.error();
  st = get_matrix(j, "scores", s.n_layer, s.n_head, p.scores,
                  [](const json& v, float& out, const std::string& where) -> Status {
                    if (!v.is_number() || !narrow_to_float(v.get<double>(), out))
                      return make_error("head plan: {} is not a finite float", where);
                    return {};
                  });
  if (!st) return st.error();
  if (j.contains("indexer") && !j["indexer"].is_null()) {
    const json& ix = j["indexer"];
    auto d = get_int(ix, "d_idx", "head plan indexer");
    if (!d) return d.error();
    if (*d <= 0 || *d > s.head_dim)
      return make_error("head plan indexer: d_idx = {} is not in [1, head_dim = {}]", *d,
                        s.head_dim);
    p.d_idx = static_cast<int32_t>(*d);
    SIEVE_TRY(opt_field(ix, "recall_k", "head plan indexer", p.recall_k));
    SIEVE_TRY(opt_field(ix, "recall_of", "head plan indexer", p.recall_of));
    SIEVE_TRY(opt_field(ix, "fit_ms", "head plan indexer", p.fit_ms));
    if (!ix.contains("layers") || !ix["layers"].is_array() ||
        static_cast<int32_t>(ix["layers"].size()) != s.n_layer) {
      return make_error("head plan indexer: \"layers\" must be an array of {} layers", s.n_layer);
    }
    const size_t w = static_cast<size_t>(s.head_dim) * p.d_idx;
    p.w_q.assign(static_cast<size_t>(s.n_layer) * s.n_head, {});
    p.w_k.assign(static_cast<size_t>(s.n_layer) * s.n_head_kv, {});
    p.fit.assign(p.w_q.size(), IndexerFit{});
    for (int32_t l = 0; l < s.n_layer; ++l) {
      const json& L = ix["layers"][l];
      if (!L.is_object() || !L.contains("w_q") || !L.contains("w_k") || !L["w_q"].is_array() ||
          !L["w_k"].is_array() || static_cast<int32_t>(L["w_q"].size()) != s.n_head ||
          static_cast<int32_t>(L["w_k"].size()) != s.n_head_kv) {
        return make_error(
            "head plan indexer layer {}: needs \"w_q\" ({} entries) and \"w_k\" ({} entries)", l,
            s.n_head, s.n_head_kv);
      }
      for (int32_t h = 0; h < s.n_head; ++h) {
        if (L["w_q"][h].is_null()) continue;
        auto v =
            get_floats(L["w_q"][h], w, fmt::format("head plan indexer layer {} w_q[{}]", l, h));
        if (!v) return v.error();
        p.w_q[lh(s, l, h)] = std::move(*v);
        if (L.contains("fit") && L["fit"].is_array() &&
            static_cast<int32_t>(L["fit"].size()) == s.n_head && L["fit"][h].is_object()) {
          const json& f = L["fit"][h];
          IndexerFit& o = p.fit[lh(s, l, h)];
          const std::string where = fmt::format("head plan indexer layer {} fit[{}]", l, h);
          for (auto [key, out] :
               {std::pair{"kl_init", &o.kl_init}, std::pair{"kl_fit", &o.kl_fit},
                std::pair{"recall_init", &o.recall_init}, std::pair{"recall_fit", &o.recall_fit},
                std::pair{"keep", &o.keep}, std::pair{"keep_oracle", &o.keep_oracle},
                std::pair{"coverage", &o.coverage}}) {
            SIEVE_TRY(opt_field(f, key, where, *out));
          }
        }
      }
      for (int32_t g = 0; g < s.n_head_kv; ++g) {
        if (L["w_k"][g].is_null()) continue;
        auto v =
            get_floats(L["w_k"][g], w, fmt::format("head plan indexer layer {} w_k[{}]", l, g));
        if (!v) return v.error();
        p.w_k[static_cast<size_t>(l) * s.n_head_kv + g] = std::move(*v);
      }
    }
  }
  if (Status v = validate_head_plan(p); !v) return v.error();
  return p;
}

Result<HeadPlan> load_head_plan(const std::string& path, const HeadShape* model) {
  auto text = read_text_file(path, "head plan");
  if (!text) return text.error();
  auto p = head_plan_from_json(*text);
  if (!p) return make_error("{}: {}", path, p.message());
  if (model) {
    if (Status st = check_head_plan_shape(*p, *model); !st) {
      return make_error("{}: {} (calibrate it for this model with sieve calibrate)", path,
                        st.message());
    }
  }
  return p;
}

Status save_head_plan(const HeadPlan& plan, const std::string& path) {
  if (Status st = validate_head_plan(plan); !st) return st;
  std::ofstream out(path, std::ios::binary);
  out << head_plan_to_json(plan);
  out.close();
  if (!out) return make_error("cannot write the head plan {}", path);
  return {};
}

void choose_retrieval_heads(HeadPlan& plan, float ratio) {
  const size_t n = plan.scores.size();
  plan.ratio = ratio;
  plan.retrieval.assign(n, 0);
  if (n == 0) return;
  size_t want =
      static_cast<size_t>(std::llround(static_cast<double>(ratio) * static_cast<double>(n)));
  want = std::clamp<size_t>(want, 1, n);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.scores[a] > plan.scores[b]; });
  for (size_t i = 0; i < want; ++i) plan.retrieval[order[i]] = 1;
}

}  // namespace sieve
