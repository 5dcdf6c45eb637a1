// The selection half of a sparse attention layer (docs/sparse.md): for one batch entry in
// one full-attention layer, score the past keys with the policy's scorer, aggregate the
// heads of each scope unit, pick tokens, and hand the attention half a key set per KV head
// (plus gathered, re-rotated K/V when positions are compact).
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "core/fp16.h"
#include "engine/forward.h"
#include "engine/sparse_seq.h"
#include "sparse/head_plan.h"
#include "sparse/select.h"

namespace sieve {
namespace {

constexpr int64_t kScoreGrain = 1024;  // keys per scoring task

// Quest's bound: sum_i max(q_i * min_i, q_i * max_i).
float quest_bound(const float* q, const float* mn, const float* mx, int32_t d) {
  float s = 0;
  for (int32_t i = 0; i < d; ++i) s += std::max(q[i] * mn[i], q[i] * mx[i]);
  return s;
}

}  // namespace

void Forward::write_sketches(int il, std::span<const BatchEntry> batch) {
  if (model_.hp.layer_kind[il] != LayerKind::full) return;
  const int32_t ds = kv_.geometry().sketch_dim;
  if (ds == 0) return;
  const bool jl =
      sketch_ && sketch_->enabled() && !sketch_->spec().indexer && ds == sketch_->spec().dim;
  const ModelHParams& hp = model_.hp;
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    // The first new row of KV head h's stream (the streams of one layer may differ in length).
    auto first_row = [&](int32_t h) {
      return kv_.stream_len(e.seq, stream_of(il, h)) - n_rows_[i];
    };
    const HeadPlan* plan = e.sparse ? e.sparse->head_plan() : nullptr;
    if (plan && plan->has_indexer() && plan->d_idx == ds && keep_pre_) {
      // RTPurbo: the indexer key k_idx = k_preRoPE W_K of every KV head that has a W_K.
      for (int32_t h = 0; h < hp.n_head_kv; ++h) {
        const float* w = plan->indexer_k(il, h);
        if (!w) continue;
        const int32_t first = first_row(h);
        for (int32_t t = 0; t < n_rows_[i]; ++t) {
          const KvRowRef row = kv_.row(e.seq, stream_of(il, h), first + t);
          if (!row.sketch) continue;
          const float* k = kpre_.data() + (entry_offset_[i] + int64_t{t}) * hp.kv_dim() +
                           int64_t{h} * hp.head_dim;
          float* out = row.sketch + int64_t{head_in_stream(h)} * ds;
          std::fill(out, out + ds, 0.0f);
          for (int32_t r = 0; r < hp.head_dim; ++r) {
            const float kr = k[r];
            const float* wr = w + int64_t{r} * ds;
            for (int32_t c = 0; c < ds; ++c) out[c] += kr * wr[c];
          }
        }
      }
      continue;
    }
    if (!jl) continue;
    for (int32_t h = 0; h < hp.n_head_kv; ++h) {
      const int32_t first = first_row(h);
      for (int32_t t = 0; t < n_rows_[i]; ++t) {
        const KvRowRef row = kv_.row(e.seq, stream_of(il, h), first + t);
        const float* k = k_.data() + (entry_offset_[i] + int64_t{t}) * hp.kv_dim();
        sketch_->project(k + int64_t{h} * hp.head_dim, il, h,
                         row.sketch + int64_t{head_in_stream(h)} * ds);
      }
    }
  }
}

const RopeRotator& Forward::rotator(int il, int64_t max_abs) {
  const ModelHParams& hp = model_.hp;
  for (auto& r : rotators_) {
    if (r->base() == hp.rope_base[il]) {
      r->reserve(max_abs);
      return *r;
    }
  }
  rotators_.push_back(std::make_unique<RopeRotator>(hp.head_dim, hp.n_rot, hp.rope_base[il],
                                                    hp.rope_mode, hp.rope_scaling));
  rotators_.back()->reserve(max_abs);
  return *rotators_.back();
}

void Forward::keep_rows(int il, size_t ei, int32_t hk, int32_t n, uint32_t generation, bool compact,
                        EntryPlan& plan) {
  SparseSeq& sp = *batch_[ei].sparse;
  SparseLayerState::KeptRows& r = sp.layer(il).kept[hk];
  const bool fill = r.generation != generation || r.compact != compact || r.n != n;
  if (fill) {
    sp.kept_storage(il, hk, n);
    r.n = n;
    r.generation = generation;
    r.compact = compact;  // valid once this step's attention has read the keys
  }
  plan.kept[hk] = {r.k, r.v, n, fill};
}

void Forward::plan_sparse(int il, size_t ei, std::span<const KvHeadView> views, EntryPlan& plan) {
  plan.active = false;
  plan.compact = false;
  plan.kept.assign(model_.hp.n_head_kv, {});
  const BatchEntry& e = batch_[ei];
  SparseSeq& sp = *e.sparse;
  const PolicyConfig& P = sp.policy();
  const ModelHParams& hp = model_.hp;
  const int32_t d = hp.head_dim, G = hp.n_gqa(), H = hp.n_head, Hkv = hp.n_head_kv;
  const int32_t n_q = n_rows_[ei];
  const int32_t n_keys = views[0].n_tokens;
  const int32_t n_prefix = n_keys - n_q;
  SparseLayerState& L = sp.layer(il);
  const ScopedNs timer{sp.stats.select_ns};  // planning time
  sp.stats.layer_steps++;
  // Dense attention would read the whole context, evicted tokens included.
  sp.stats.context_tokens += kv_.n_tokens(e.seq);
  const int64_t kv_row_bytes = int64_t{Hkv} * d * 2;
  const bool compact_now = sp.compact(kv_.n_tokens(e.seq));

  // A chunk reaching into the prompt's last prefill_tail tokens attends densely, unless
  // selected keys are renumbered (compact positions: positions=auto past the trained context):
  // a dense chunk keeps original positions, so past the window it would see distances the
  // model never trained on (niah_single_1 at 16K on SmolLM2 went 3/3 -> 0/16 under auto).
  const bool dense_tail = n_q > 1 && sp.prompt_tokens >= 0 && !compact_now &&
                          in_prefill_tail(P.prefill_tail, n_keys, sp.prompt_tokens);
  const bool select_now =
      n_prefix > P.threshold() && (n_q == 1 || (P.prefill == PrefillMode::chunk && !dense_tail));
  const bool ranks = P.scorer == ScorerKind::exact || P.scorer == ScorerKind::sketch ||
                     P.scorer == ScorerKind::quest;
  const bool score_for_memory = P.evicts() && n_prefix > P.sinks + P.local && ranks;
  if (P.evicts()) L.importance.resize(n_keys, 0.0f);
  if (P.scorer == ScorerKind::all || (!select_now && !score_for_memory)) {
    sp.stats.selected_tokens += n_keys;
    sp.stats.bytes_read += int64_t{n_keys} * kv_row_bytes * 2;
    return;
  }

  const int32_t c0 = std::min(P.sinks, n_prefix);
  const int32_t pick_end = std::max(c0, n_prefix - P.local);
  const int32_t c1 = P.evicts() ? n_prefix : pick_end;
  const int32_t n_pick = pick_end - c0;
  const int32_t n_units = sp.n_units();
  const int32_t heads_per_unit = H / n_units;
  const float scale = P.raw_logits ? 1.0f : hp.attn_scale;

  // Pre-RoPE scoring (score_positions=none, or auto under compact positions): the query and
  // every ranked key are turned to position 0, so scores carry no RoPE distance - past the
  // trained window the distances to far keys are ones the model never saw.
  const bool unrotated = P.scorer == ScorerKind::exact &&
                         (P.score_positions == ScorePositions::none ||
                          (P.score_positions == ScorePositions::auto_ && compact_now));
  // Fingerprint query per head: the chunk's mean query (decode: the query), each query turned
  // to position 0 first when scoring pre-RoPE.
  const int64_t off = entry_offset_[ei];
  const int64_t qd = hp.q_dim();
  // (Turned with the rotator's tables: rope() forms cos/sin per call, 96 transcendentals a
  // layer on SmolLM2, most of a reused selection's planning.)
  const RopeRotator& turn = rotator(il, int64_t{pos_[off + n_q - 1]} + 1);
  const RopeRotator* to_zero = unrotated ? &turn : nullptr;
  sc_q_.assign(static_cast<size_t>(qd), 0.0f);
  std::vector<float> q_row(unrotated ? qd : 0);
  for (int32_t t = 0; t < n_q; ++t) {
    const float* q = q_.data() + (off + t) * qd;
    if (unrotated) {
      std::copy(q, q + qd, q_row.begin());
      turn.rotate(q_row.data(), H, -int64_t{pos_[off + t]});
      q = q_row.data();
    }
    for (int64_t c = 0; c < qd; ++c) sc_q_[c] += q[c];
  }
  for (float& v : sc_q_) v /= static_cast<float>(n_q);

  plan.keys.resize(Hkv);  // (capacity kept from layer to layer)
  for (auto& k : plan.keys) k.clear();
  std::vector<int32_t> picked_abs;
  if (P.evicts() && P.decay < 1.0f) {
    for (float& v : L.importance) v *= P.decay;
  }
  const float theta = compact_now && P.compact_theta > 0.0f ? P.compact_theta : P.theta;
  for (int32_t u = 0; u < n_units; ++u) {
    const int32_t h0 = u * heads_per_unit;  // first query head of the unit
    const int32_t kv0 = h0 / G, kv1 = (h0 + heads_per_unit) / G;
    // Selection cache (decode only): the fingerprint is the mean over the unit's heads of the
    // query rotated back to position 0, so position drift does not lower the cosine. An
    // eviction policy whose layer is too short to select still scores for its importance;
    // there the cache reuses the votes alone, and an entry without a pick never serves a
    // step that selects.
    bool hit = false;
    const bool use_cache = n_q == 1 && P.selection_cache && P.scorer != ScorerKind::quest;
    std::vector<float> fp;
    if (use_cache) {
      std::vector<float> q0(sc_q_.begin() + int64_t{h0} * d,
                            sc_q_.begin() + int64_t{h0 + heads_per_unit} * d);
      if (!unrotated)
        turn.rotate(q0.data(), heads_per_unit, -int64_t{pos_[off]});  // (pre-RoPE: turned already)
      fp.assign(d, 0.0f);
      for (int32_t h = 0; h < heads_per_unit; ++h) {
        for (int32_t c = 0; c < d; ++c) fp[c] += q0[int64_t{h} * d + c] / heads_per_unit;
      }
      sp.stats.cache_lookups++;
      if (L.valid[u] && (L.has_pick[u] || !select_now) &&
          cosine_similarity(fp.data(), L.fingerprint.data() + int64_t{u} * d, d) >= theta) {
        hit = true;
        sp.stats.cache_hits++;
      }
    }
    if (hit) {
      // The cached set, plus the tokens that left the window since it was picked (they were
      // never ranked; reading them keeps the reuse from silently losing recent context): the
      // key set below reads them as a longer window.
      if (P.evicts()) {  // the reused selection's votes count for this query too
        // (votes are empty unless the step that made them had more keys than sinks, so they
        // start at the sinks' end then as now)
        const std::vector<float>& v = L.votes[u];
        for (size_t j = 0; j < v.size(); ++j) L.importance[c0 + j] += v[j];
      }
    } else if (P.scorer == ScorerKind::none) {
      picked_abs.clear();
    } else if (P.scorer == ScorerKind::quest) {
      // Bounds of the complete blocks, kept up to date incrementally.
      const int32_t B = P.block;
      const int32_t full_blocks = n_prefix / B;
      const int32_t kvd = Hkv * d;
      if (L.n_blocks < full_blocks) {
        L.bmin.resize(static_cast<size_t>(full_blocks) * kvd);
        L.bmax.resize(L.bmin.size());
        std::vector<float> kr(d);
        for (int32_t b = L.n_blocks; b < full_blocks; ++b) {
          for (int32_t h = 0; h < Hkv; ++h) {
            float* mn = L.bmin.data() + (int64_t{b} * Hkv + h) * d;
            float* mx = L.bmax.data() + (int64_t{b} * Hkv + h) * d;
            std::fill(mn, mn + d, INFINITY);
            std::fill(mx, mx + d, -INFINITY);
            for (int32_t j = b * B; j < (b + 1) * B; ++j) {
              f16_to_f32_row(views[h].k_row(j), kr.data(), d);
              for (int32_t c = 0; c < d; ++c) {
                mn[c] = std::min(mn[c], kr[c]);
                mx[c] = std::max(mx[c], kr[c]);
              }
            }
          }
        }
        L.n_blocks = full_blocks;
        sp.stats.bytes_read += int64_t{n_prefix} * kv_row_bytes;
      }
      // Rank the blocks that lie inside [c0, pick_end) by the bound summed over the unit.
      const int32_t b0 = (c0 + B - 1) / B, b1 = pick_end / B;
      const int32_t nb = std::max(0, b1 - b0);
      sc_score_.assign(nb, 0.0f);
      pool_.parallel_for(nb, 64, [&](int64_t a, int64_t z) {
        for (int64_t b = a; b < z; ++b) {
          float s = 0;
          for (int32_t h = h0; h < h0 + heads_per_unit; ++h) {
            const int32_t hk = h / G;
            const int64_t base = ((b0 + b) * Hkv + hk) * int64_t{d};
            s += scale * quest_bound(sc_q_.data() + int64_t{h} * d, L.bmin.data() + base,
                                     L.bmax.data() + base, d);
          }
          sc_score_[b] = s;
        }
      });
      sp.stats.bytes_read += int64_t{nb} * (kv1 - kv0) * d * 4 * 2;
      const int32_t k_blocks = P.top_k > 0 ? (P.top_k + B - 1) / B : nb;
      const std::vector<int32_t> pb = pick_tokens(sc_score_.data(), nb, k_blocks, 0.0f, 0, 1);
      // Partial blocks at either end of the range are read whole (they have no bound yet).
      picked_abs.clear();
      for (int32_t j = c0; j < std::min(pick_end, b0 * B); ++j) picked_abs.push_back(j);
      for (int32_t b : pb) {
        for (int32_t j = (b0 + b) * B; j < (b0 + b + 1) * B; ++j) picked_abs.push_back(j);
      }
      for (int32_t j = std::max(b0, b1) * B; j < pick_end; ++j) picked_abs.push_back(j);
      sp.stats.selections++;
    } else {
      // Logits of the unit's heads over [c0, c1): [heads_per_unit, n].
      const int32_t n = c1 - c0;
      sc_logits_.resize(static_cast<size_t>(heads_per_unit) * n);
      sc_score_.assign(n, 0.0f);
      std::vector<float> qs;
      const int32_t ds = P.scorer == ScorerKind::sketch && sketch_ ? sketch_->spec().dim : 0;
      if (P.scorer == ScorerKind::sketch) {
        qs.resize(static_cast<size_t>(heads_per_unit) * ds);
        for (int32_t h = 0; h < heads_per_unit; ++h) {
          sketch_->project(sc_q_.data() + int64_t{h0 + h} * d, il, (h0 + h) / G,
                           qs.data() + int64_t{h} * ds);
        }
      }
      const KvSeqView sv = kv_.seq_view(e.seq, il);
      pool_.parallel_for(n, kScoreGrain, [&](int64_t a, int64_t z) {
        if (P.scorer == ScorerKind::exact) {
          for (int32_t hk = kv0; hk < kv1; ++hk) {
            const int32_t r0 = hk * G - h0;  // unit row of the KV head's first query head
            key_scores(sc_q_.data() + int64_t{hk} * G * d, G, d, scale, views[hk],
                       KeySet{nullptr, 0, static_cast<int32_t>(c0 + a),
                              static_cast<int32_t>(c0 + z), to_zero, 0, true},
                       sc_logits_.data() + int64_t{r0} * n + a, n);
          }
        } else {
          // Sketch rows of consecutive tokens lie a fixed stride apart within a page: a page's
          // run of keys is scored per head in one vectorised call.
          for (int64_t j = a; j < z;) {
            const int32_t key = static_cast<int32_t>(c0 + j);
            const int32_t run = sv.page_run(key, static_cast<int32_t>(c0 + z));
            const float* sk = sv.sketch(key);
            for (int32_t h = 0; h < heads_per_unit; ++h) {
              strided_scores(qs.data() + int64_t{h} * ds, sk + int64_t{(h0 + h) / G} * ds,
                             sv.sketch_stride(), run, ds, scale,
                             sc_logits_.data() + int64_t{h} * n + j);
            }
            j += run;
          }
        }
      });
      sp.stats.bytes_read += P.scorer == ScorerKind::exact ? int64_t{n} * (kv1 - kv0) * d * 2
                                                           : int64_t{n} * (kv1 - kv0) * ds * 4;
      if (P.aggregation == AggregationKind::soft_vote) {
        // Per-head softmax (parallel over heads: exp(l - max) and its sum), then the sum over
        // heads, each head's row scaled by 1 / its sum there (one pass less over the logits).
        sc_inv_.assign(heads_per_unit, 0.0f);
        pool_.parallel_for(heads_per_unit, 1, [&](int64_t a, int64_t z) {
          for (int64_t h = a; h < z; ++h) {
            float* row = sc_logits_.data() + h * n;
            const float m = n > 0 ? *std::max_element(row, row + n) : 0.0f;
            const double sum = exp_shift_sum(row, n, m);
            sc_inv_[h] = sum > 0 ? static_cast<float>(1.0 / sum) : 0.0f;
          }
        });
        pool_.parallel_for(n, 4096, [&](int64_t a, int64_t z) {
          for (int32_t h = 0; h < heads_per_unit; ++h) {
            const float* row = sc_logits_.data() + int64_t{h} * n;
            const float inv = sc_inv_[h];
            for (int64_t j = a; j < z; ++j) sc_score_[j] += row[j] * inv;
          }
        });
      } else {
        aggregate_scores(sc_logits_.data(), heads_per_unit, n, P.aggregation, P.top_k,
                         sc_score_.data());
      }
      if (P.evicts()) {
        const float w = 1.0f / static_cast<float>(H);
        std::vector<float>& v = L.votes[u];
        v.resize(use_cache ? n : 0);
        for (int32_t j = 0; j < n; ++j) {
          const float add = std::max(0.0f, sc_score_[j]) * w;
          L.importance[c0 + j] += add;
          if (use_cache) v[j] = add;
        }
      }
      if (select_now) {
        std::vector<float> pooled;
        const float* s = sc_score_.data();
        if (P.pool_kernel > 1) {
          pooled.resize(n_pick);
          max_pool_scores(sc_score_.data(), n_pick, P.pool_kernel, pooled.data());
          s = pooled.data();
        }
        std::vector<int32_t> rel = pick_tokens(s, n_pick, P.top_k, P.top_p, P.min_keep, P.block);
        picked_abs.resize(rel.size());
        for (size_t r = 0; r < rel.size(); ++r) picked_abs[r] = c0 + rel[r];
        sp.stats.selections++;
      }
    }
    if (use_cache && !hit) {
      std::copy(fp.begin(), fp.end(), L.fingerprint.begin() + int64_t{u} * d);
      L.picked[u] = picked_abs;
      L.picked_end[u] = pick_end;
      L.valid[u] = 1;
      L.has_pick[u] = select_now;
      L.generation[u]++;
    }
    if (select_now) {
      std::vector<int32_t>& keys = plan.keys[kv0];
      if (hit) {
        const int32_t reach = std::max(P.local, n_prefix - std::max(c0, L.picked_end[u]));
        build_key_set(n_prefix, n_q, P.sinks, reach, 0, L.picked[u], keys);
      } else {
        build_key_set(n_prefix, n_q, P.sinks, P.local, 0, picked_abs, keys);
      }
      for (int32_t hk = kv0 + 1; hk < kv1; ++hk) plan.keys[hk].assign(keys.begin(), keys.end());
      // The cached selection's sinks and picks (the set's first keys): the step that selects
      // them writes a copy as its attention reads them, and the steps that reuse them read it.
      const int32_t n_kept = c0 + static_cast<int32_t>(L.picked[u].size());
      const bool keep =
          P.keep_rows == KeepRows::on || (P.keep_rows == KeepRows::auto_ && compact_now);
      if (use_cache && keep && n_kept <= static_cast<int32_t>(keys.size())) {
        for (int32_t hk = kv0; hk < kv1; ++hk)
          keep_rows(il, ei, hk, n_kept, L.generation[u], compact_now, plan);
      }
    }
  }
  if (!select_now) {
    sp.stats.selected_tokens += n_keys;
    sp.stats.bytes_read += int64_t{n_keys} * kv_row_bytes * 2;
    return;
  }
  plan.active = true;
  int64_t n_sel = 0;
  for (const auto& k : plan.keys) n_sel += static_cast<int64_t>(k.size());
  sp.stats.selected_tokens += n_sel / Hkv;
  sp.stats.bytes_read += n_sel * d * 2 * 2;

  // Compact positions: key i of the set takes position i; attention re-rotates each selected
  // K from its stored position while it reads it (KeySet::rot), so nothing is copied here.
  plan.compact = compact_now;
}

}  // namespace sieve
