#include "engine/sparse_seq.h"

#include <algorithm>

#include "engine/kv_binding.h"
#include "sparse/select.h"
#include "sparse/uniprefill.h"

namespace sieve {

SparseSeq::SparseSeq(PolicyConfig resolved, const ModelHParams& hp)
    : policy_(std::move(resolved)),
      n_ctx_train_(hp.n_ctx_max()),  // with YaRN, the stretched context
      n_units_(policy_.scope == VoteScope::layer ? 1 : hp.n_head_kv),
      head_dim_(hp.head_dim),
      rt_window_(rt_window_for(policy_, hp)),
      plan_ok_(policy_.uses_head_plan() && check_head_plan_for(policy_, hp).ok()),
      n_kv_head_(hp.n_head_kv),
      layers_(hp.n_layer),
      kept_slot_rows_(
          policy_.top_k > 0 ? policy_.sinks + policy_.top_k + std::max(policy_.block, 1) - 1 : 0) {
  reset();
}

void SparseSeq::reset() {
  kept_arena_ = HugeBuffer();  // the kept rows go with the layers that point into them
  for (SparseLayerState& L : layers_) {
    L = SparseLayerState{};
    L.fingerprint.assign(static_cast<size_t>(n_units_) * head_dim_, 0.0f);
    L.picked.assign(n_units_, {});
    L.picked_end.assign(n_units_, 0);
    L.valid.assign(n_units_, 0);
    L.has_pick.assign(n_units_, 0);
    L.generation.assign(n_units_, 0);
    L.votes.assign(n_units_, {});
    L.kept.assign(n_kv_head_, {});
  }
}

int64_t SparseSeq::kept_bytes() const {
  int64_t b = 0;
  for (const SparseLayerState& L : layers_) {
    for (const auto& r : L.kept) {
      if (r.k == nullptr) continue;
      b += r.spill.empty() ? int64_t{kept_slot_rows_} * head_dim_ * 2 * 2
                           : static_cast<int64_t>(r.spill.capacity()) * 2;
    }
  }
  return b;
}

void SparseSeq::kept_storage(int32_t il, int32_t hk, int32_t n) {
  SparseLayerState::KeptRows& r = layers_[il].kept[hk];
  const int64_t slot_elems = int64_t{kept_slot_rows_} * head_dim_;
  if (n <= kept_slot_rows_) {
    if (kept_arena_.empty()) {
      kept_arena_ =
          HugeBuffer(static_cast<size_t>(layers_.size()) * n_kv_head_ * 2 * slot_elems * 2);
    }
    if (!kept_arena_.empty()) {
      auto* base = reinterpret_cast<uint16_t*>(kept_arena_.data()) +
                   (int64_t{il} * n_kv_head_ + hk) * 2 * slot_elems;
      r.k = base;
      r.v = base + slot_elems;
      std::vector<uint16_t>().swap(r.spill);
      return;
    }
  }
  r.spill.resize(static_cast<size_t>(n) * head_dim_ * 2);
  r.k = r.spill.data();
  r.v = r.k + int64_t{n} * head_dim_;
}

int64_t kv_bytes_held(const KvStore& kv, KvSeqId seq, const SparseSeq* sp) {
  return kv.seq_bytes(seq) + (sp ? sp->kept_bytes() : 0);
}

bool SparseSeq::compact(int32_t n_tokens) const {
  switch (policy_.positions) {
    case PositionMode::compact:
      return true;
    case PositionMode::original:
      return false;
    case PositionMode::auto_:
      return n_ctx_train_ > 0 && n_tokens > n_ctx_train_;
  }
  return false;
}

void SparseSeq::invalidate_cache(int32_t il) {
  SparseLayerState& L = layers_[il];
  std::fill(L.valid.begin(), L.valid.end(), 0);
  L.n_blocks = 0;
  L.bmin.clear();
  L.bmax.clear();
}

std::string policy_cache_salt(const PolicyConfig& p) {
  return p.is_dense() ? std::string() : "policy:" + p.describe();
}

int32_t rt_window_for(const PolicyConfig& p, const ModelHParams& hp) {
  if (p.rt_window > 0) return p.rt_window;
  if (hp.n_ctx_train <= 0) return 2048;
  return std::max(64, hp.n_ctx_train / 4);
}

namespace {
HeadShape head_shape_of(const ModelHParams& hp) {
  return HeadShape{hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim};
}
}  // namespace

Status check_head_plan_for(const PolicyConfig& p, const ModelHParams& hp) {
  if (!p.uses_head_plan()) return {};
  SIEVE_TRY(check_policy_complete(p));
  if (Status st = check_head_plan_shape(*p.plan, head_shape_of(hp)); !st) {
    return make_error(
        "head plan '{}': {} (calibrate it for this model: sieve calibrate -m MODEL --out "
        "heads.json)",
        p.head_plan, st.message());
  }
  return {};
}

Status check_sketch_basis_shape(const SketchBasis& b, const ModelHParams& hp) {
  if (b.n_layer != hp.n_layer || b.n_kv_head != hp.n_head_kv || b.head_dim != hp.head_dim) {
    return make_error(
        "the sketch basis is for {} layers x {} KV heads x head_dim {}, the model has {} x {} x {}",
        b.n_layer, b.n_kv_head, b.head_dim, hp.n_layer, hp.n_head_kv, hp.head_dim);
  }
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.layer_kind[il] == LayerKind::full && !b.fitted[il]) {
      return make_error("the sketch basis has no fit for full-attention layer {}", il);
    }
  }
  return {};
}

Status check_policy_for_model(const PolicyConfig& p, const ModelHParams& hp) {
  SIEVE_TRY(check_head_plan_for(p, hp));
  if (p.basis && p.scorer == ScorerKind::sketch) {
    if (Status st = check_sketch_basis_shape(*p.basis, hp); !st) {
      return make_error(
          "sketch basis '{}': {} (fit one for this model: sieve calibrate -m MODEL --sketch-basis "
          "--out basis.json)",
          p.sketch_basis, st.message());
    }
  }
  return {};
}

std::vector<KvCapacity> kv_layout_for(const PolicyConfig* p, const ModelHParams& hp) {
  std::vector<KvCapacity> caps;
  for (LayerKind k : hp.layer_kind) {
    caps.push_back(k == LayerKind::sliding ? KvCapacity::sliding(hp.sliding_window)
                                           : KvCapacity::full());
  }
  if (!p || !p->uses_head_plan() || !check_head_plan_for(*p, hp).ok()) return caps;
  const int32_t w = rt_window_for(*p, hp);
  const int32_t Hkv = hp.n_head_kv, G = hp.n_gqa();
  // A KV head is window-only when none of its query heads is a retrieval head.
  auto local_group = [&](int32_t il, int32_t h) {
    for (int32_t g = 0; g < G; ++g) {
      if (p->plan->is_retrieval(il, h * G + g)) return false;
    }
    return true;
  };
  bool per_head = false;  // some layer keeps one KV head whole and windows another
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.layer_kind[il] != LayerKind::full) continue;
    int32_t n_local = 0;
    for (int32_t h = 0; h < Hkv; ++h) n_local += local_group(il, h);
    if (n_local == Hkv)
      caps[il] = KvCapacity::sliding(w, p->rt_sinks);
    else if (n_local > 0)
      per_head = true;
  }
  if (!per_head) return caps;
  std::vector<KvCapacity> streams;
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    for (int32_t h = 0; h < Hkv; ++h) {
      const bool window = hp.layer_kind[il] == LayerKind::full && local_group(il, h);
      streams.push_back(window ? KvCapacity::sliding(w, p->rt_sinks) : caps[il]);
    }
  }
  return streams;
}

Status check_layout_compatible(const PolicyConfig& p, const ModelHParams& hp,
                               const std::vector<KvCapacity>& have) {
  if (have.empty()) return {};
  const std::vector<KvCapacity> want = kv_layout_for(&p, hp);
  const bool grouped = layout_groups(have, hp) > 1;
  if (grouped && !p.uses_head_plan()) {
    return make_error(
        "policy '{}' cannot run on this engine: its KV store keeps one stream per KV head (the "
        "default "
        "policy's head plan windows some KV heads of layers it keeps); send rtpurbo requests with "
        "that head "
        "plan, or start another engine for this policy",
        p.preset);
  }
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    for (int32_t kh = 0; kh < hp.n_head_kv; ++kh) {
      const KvCapacity& h = layout_at(have, hp, il, kh);
      const KvCapacity& w = layout_at(want, hp, il, kh);
      if (!h.is_window()) continue;
      if (!w.is_window() || w.window > h.window || w.n_sink > h.n_sink) {
        return make_error(
            "policy '{}' reads {} on layer {} (KV head {}), but this engine keeps only {} sinks + "
            "a {}-token "
            "window there (its default policy's head plan has no retrieval head on it); send "
            "requests with "
            "that policy and head plan, or start another engine for this one",
            p.preset,
            w.is_window() ? fmt::format("{} sinks + a {}-token window", w.n_sink, w.window)
                          : "every key",
            il, kh, h.n_sink, h.window);
      }
    }
  }
  return {};
}

SketchSpec sketch_spec_for(const PolicyConfig& p, const ModelHParams& hp) {
  SketchSpec s;
  if (p.uses_head_plan() && p.plan && p.plan->has_indexer() && check_head_plan_for(p, hp).ok()) {
    s.head_dim = hp.head_dim;
    s.dim = p.plan->d_idx;
    s.n_kv_head = hp.n_head_kv;
    s.shared = false;
    s.indexer = true;
    return s;
  }
  if (p.scorer != ScorerKind::sketch) return s;
  s.head_dim = hp.head_dim;
  s.dim = p.sketch_dim > 0 ? p.sketch_dim : std::max(1, hp.head_dim / 8);
  s.n_kv_head = hp.n_head_kv;
  s.shared = p.sketch_shared;
  s.seed = p.seed;
  if (p.basis && check_sketch_basis_shape(*p.basis, hp).ok()) {
    s.dim = p.basis->dim;
    s.shared = false;
    s.seed = 0;
    s.basis_path = p.sketch_basis;
    s.basis = p.basis;
  }
  return s;
}

Status check_sketch_compatible(const PolicyConfig& p, const ModelHParams& hp,
                               const SketchSpec& have) {
  const SketchSpec want = sketch_spec_for(p, hp);
  if (want.dim == 0 || want == have) return {};
  if (want.indexer) {
    return make_error(
        "policy '{}' scores with the head plan's indexer keys (d_idx {}), but this engine's KV "
        "store "
        "keeps {}; start the engine with this policy as its default so that indexer keys are "
        "written",
        p.preset, want.dim,
        have.dim == 0 ? "none" : (have.indexer ? "another plan's" : "JL sketches"));
  }
  if (have.dim == 0) {
    return make_error(
        "policy '{}' ranks with sketch keys, but this engine's KV store keeps none; start it with "
        "a sketch policy (e.g. --policy sketch) so that sketch keys are written",
        p.preset);
  }
  if (want.basis_path != have.basis_path) {
    return make_error(
        "policy '{}' ranks with sketch basis '{}', but the KV store's sketch keys were made with "
        "'{}'; "
        "sketch knobs are fixed when the engine starts",
        p.preset, want.basis_path.empty() ? "random" : want.basis_path,
        have.basis_path.empty() ? "random" : have.basis_path);
  }
  return make_error(
      "policy '{}' wants sketch_dim={} sketch_shared={} seed={}, but the KV store was created with "
      "sketch_dim={} sketch_shared={} seed={}; sketch knobs are fixed when the engine starts",
      p.preset, want.dim, want.shared, want.seed, have.dim, have.shared, have.seed);
}

Status sparse_after_step(KvStore& kv, KvSeqId seq, SparseSeq& sp, const ModelHParams& hp) {
  const PolicyConfig& p = sp.policy();
  if (!p.evicts()) return {};
  if (kv.geometry().n_head_group > 1) {
    return make_error(
        "policy '{}' evicts whole layers' tokens, but this KV store keeps one stream per KV head "
        "(an rtpurbo head plan's layout); use a store made for this policy",
        p.preset);
  }
  // Hysteresis: once a stream passes the budget it is cut a few pages below it, so the
  // compaction does not run on every decode step.
  constexpr int32_t kSlack = 64;
  const int32_t floor_budget = p.sinks + p.local + 1;
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.layer_kind[il] != LayerKind::full) continue;
    const int32_t n = kv.stream_len(seq, il);
    if (n <= p.kv_budget) continue;
    SparseLayerState& L = sp.layer(il);
    L.importance.resize(n, 0.0f);
    const int32_t target = std::max(floor_budget, p.kv_budget - kSlack);
    const std::vector<int32_t> drop = plan_eviction(L.importance.data(), n, p.memory, target,
                                                    p.sinks, p.local, p.keep_mass, p.evict_floor);
    if (drop.empty()) continue;
    auto room = kv.evict(seq, il, drop);
    if (!room) return room.error();
    if (!room->fits()) continue;  // shared pages and no page for copy-on-write: try next step
    size_t w = 0, di = 0;
    for (int32_t j = 0; j < n; ++j) {
      if (di < drop.size() && drop[di] == j) {
        ++di;
        continue;
      }
      L.importance[w++] = L.importance[j];
    }
    L.importance.resize(w);
    sp.invalidate_cache(il);
    sp.stats.tokens_evicted += static_cast<int64_t>(drop.size());
  }
  return {};
}

Result<std::vector<int32_t>> uniprefill_layers_for(const PolicyConfig& p, const ModelHParams& hp) {
  std::vector<uint8_t> full(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) full[l] = hp.layer_kind[l] == LayerKind::full;
  return uniprefill_layers(p, full);
}

Status check_uniprefill_layers(const PolicyConfig& p, const ModelHParams& hp) {
  if (!p.drops_prefill()) return {};
  auto layers = uniprefill_layers_for(p, hp);
  if (!layers) return layers.error();
  return {};
}

int32_t prefill_chunk_for(const PolicyConfig& p, int64_t prompt_tokens, int32_t n_batch) {
  if (!p.drops_prefill() || prompt_tokens < p.up_min_prompt) return n_batch;
  return std::max(n_batch, p.up_chunk);
}

}  // namespace sieve
