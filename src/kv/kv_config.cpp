#include "kv/kv_config.h"

#include <fmt/format.h>

#include <limits>

namespace sieve {

int32_t kv_dtype_size(KvDtype dtype) {
  return dtype == KvDtype::f32 ? 4 : 2;
}

const char* kv_dtype_name(KvDtype dtype) {
  return dtype == KvDtype::f32 ? "f32" : "f16";
}

Result<KvGeometry> make_kv_geometry(const KvConfig& c) {
  // Bounds keep every derived product far inside int64 and every page/slot id in int32.
  constexpr int32_t kMaxDim = 1 << 16;
  if (c.n_layer <= 0 || c.n_layer > kMaxDim)
    return make_error("kv config: n_layer = {} must be in 1..{}", c.n_layer, kMaxDim);
  if (c.n_kv_head <= 0 || c.n_kv_head > kMaxDim)
    return make_error("kv config: n_kv_head = {} must be in 1..{}", c.n_kv_head, kMaxDim);
  if (c.head_dim <= 0 || c.head_dim > kMaxDim)
    return make_error("kv config: head_dim = {} must be in 1..{}", c.head_dim, kMaxDim);
  if (c.n_head_group <= 0 || c.n_kv_head % c.n_head_group != 0)
    return make_error("kv config: n_head_group = {} must divide n_kv_head = {}", c.n_head_group,
                      c.n_kv_head);
  if (c.page_size <= 0 || c.page_size > 4096)
    return make_error("kv config: page_size = {} must be in 1..4096 (16 is the default)",
                      c.page_size);
  if (c.sketch_dim < 0 || c.sketch_dim > kMaxDim)
    return make_error("kv config: sketch_dim = {} must be in 0..{}", c.sketch_dim, kMaxDim);
  if (c.n_token_scores < 0 || c.n_token_scores > kMaxDim)
    return make_error("kv config: n_token_scores = {} must be in 0..{}", c.n_token_scores, kMaxDim);
  if (c.dtype != KvDtype::f32 && c.dtype != KvDtype::f16)
    return make_error("kv config: unknown dtype {}", static_cast<int>(c.dtype));

  KvGeometry g;
  g.n_layer = c.n_layer;
  g.n_head_group = c.n_head_group;
  g.n_stream = c.n_layer * c.n_head_group;
  g.n_head = c.n_kv_head / c.n_head_group;
  g.head_dim = c.head_dim;
  g.page_size = c.page_size;
  g.dtype = c.dtype;
  g.sketch_dim = c.sketch_dim;
  g.n_token_scores = c.n_token_scores;
  g.hash_salt = c.hash_salt;
  g.prefix_cache = c.prefix_cache;
  g.host_rows = c.host_rows;
  if (g.n_stream > kMaxDim)
    return make_error("kv config: n_layer * n_head_group = {} streams, at most {}", g.n_stream,
                      kMaxDim);

  if (c.capacity.empty()) {
    g.capacity.assign(g.n_stream, KvCapacity::full());
  } else if (static_cast<int64_t>(c.capacity.size()) == c.n_layer) {
    for (int32_t l = 0; l < c.n_layer; ++l)
      for (int32_t h = 0; h < c.n_head_group; ++h) g.capacity.push_back(c.capacity[l]);
  } else if (static_cast<int64_t>(c.capacity.size()) == g.n_stream) {
    g.capacity = c.capacity;
  } else {
    return make_error(
        "kv config: capacity has {} entries; give none (all full), n_layer = {} or "
        "n_layer * n_head_group = {}",
        c.capacity.size(), c.n_layer, g.n_stream);
  }
  for (int32_t s = 0; s < g.n_stream; ++s) {
    const KvCapacity& cap = g.capacity[s];
    if (cap.kind == KvCapacityKind::full) continue;
    if (cap.kind != KvCapacityKind::window)
      return make_error("kv config: capacity of stream {} has an unknown kind", s);
    if (cap.window <= 0 || cap.n_sink < 0)
      return make_error(
          "kv config: window stream {} (layer {}) needs window > 0 and n_sink >= 0, got window "
          "= {}, n_sink = {}",
          s, g.layer_of(s), cap.window, cap.n_sink);
  }

  g.kv_row_bytes = int64_t{g.n_head} * g.head_dim * kv_dtype_size(g.dtype);
  // sketch keys: f32 rows in host memory, bf16 beside the device pages (the CUDA runner)
  const int64_t sketch_value_bytes = g.host_rows ? 4 : 2;
  g.token_bytes = 2 * g.kv_row_bytes + int64_t{g.n_head} * g.sketch_dim * sketch_value_bytes +
                  int64_t{g.n_token_scores} * 4 + 4 /* position */;
  g.page_bytes = g.token_bytes * g.page_size;
  if (c.budget_bytes < g.page_bytes)
    return make_error(
        "kv config: budget_bytes = {} holds no page; one page of {} tokens takes {} bytes "
        "(raise the KV budget)",
        c.budget_bytes, g.page_size, g.page_bytes);
  // Page ids are int32 and slot ids (page * page_size + offset) must fit int64 comfortably.
  const int64_t n_pages = c.budget_bytes / g.page_bytes;
  constexpr int64_t kMaxPages = std::numeric_limits<int32_t>::max() / 2;
  if (n_pages > kMaxPages)
    return make_error("kv config: budget_bytes = {} gives {} pages, more than {} supported",
                      c.budget_bytes, n_pages, kMaxPages);
  g.n_pages = static_cast<int32_t>(n_pages);
  return g;
}

std::string describe(const KvGeometry& g) {
  int32_t n_window = 0;
  for (const KvCapacity& c : g.capacity) n_window += c.is_window() ? 1 : 0;
  return fmt::format(
      "kv: {} pages x {} tokens ({} B/page, {} MiB), {} streams ({} full, {} window), {} heads "
      "x {} {}, sketch {} x {}, {} scores/token",
      g.n_pages, g.page_size, g.page_bytes, (int64_t{g.n_pages} * g.page_bytes) >> 20, g.n_stream,
      g.n_stream - n_window, n_window, g.n_head, g.head_dim, kv_dtype_name(g.dtype), g.n_head,
      g.sketch_dim, g.n_token_scores);
}

}  // namespace sieve
