// UniPrefill inside the forward pass (docs/sparse.md "Prefill token dropping"): at a
// selection layer the chunk's last up_queries rows rate every token by the softmax attention
// they pay it (summed over those queries and all heads); the rows of the dropped blocks leave
// the batch, so every later layer - attention, FFN, sliding windows - computes and stores only
// the kept ones, at their original positions. Each layer's stream then holds its own length,
// which decode reads through the views.
#include <algorithm>
#include <atomic>
#include <numeric>

#include "backend/cpu/attention.h"
#include "engine/forward.h"
#include "engine/sparse_seq.h"
#include "sparse/uniprefill.h"

namespace sieve {

Status Forward::uniprefill_begin(std::span<const BatchEntry> batch) {
  drop_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    DropState& d = drop_[i];
    d.layers.clear();
    d.live.clear();
    if (!e.sparse || !e.sparse->policy().drops_prefill() || e.all_logits) continue;
    const PolicyConfig& P = e.sparse->policy();
    const int32_t n_chunk = static_cast<int32_t>(e.tokens.size());
    // Decode steps, short prompts and chunks with nothing droppable run dense.
    if (n_chunk <= P.up_tail || kv_.n_tokens(e.seq) < P.up_min_prompt) continue;
    auto layers = uniprefill_layers_for(P, model_.hp);
    if (!layers) return layers.error();
    d.layers = std::move(*layers);
    d.live.resize(n_chunk);
    std::iota(d.live.begin(), d.live.end(), 0);
  }
  return {};
}

Status Forward::evict_dropped(int il, size_t i) {
  const BatchEntry& e = batch_[i];
  const DropState& d = drop_[i];
  const int32_t n_chunk = static_cast<int32_t>(e.tokens.size());
  const int32_t s0 = kv_.stream_len(e.seq, il) - n_chunk;
  std::vector<int32_t> gone;
  gone.reserve(n_chunk - d.live.size());
  size_t j = 0;
  for (int32_t t = 0; t < n_chunk; ++t) {
    if (j < d.live.size() && d.live[j] == t) {
      ++j;
    } else {
      gone.push_back(s0 + t);
    }
  }
  auto room = kv_.evict(e.seq, il, gone);
  if (!room) return room.error();
  if (!room->fits()) {
    return make_error("uniprefill: the KV pool has no page to compact layer {} ({} pages missing)",
                      il, room->n_pages_missing());
  }
  return {};
}

void Forward::uniprefill_importance(int il, size_t i, std::vector<float>& imp) {
  const ModelHParams& hp = model_.hp;
  const BatchEntry& e = batch_[i];
  const PolicyConfig& P = e.sparse->policy();
  const int32_t n_live = n_rows_[i];
  const int64_t off = entry_offset_[i];
  const int32_t G = hp.n_gqa(), d = hp.head_dim, Hkv = hp.n_head_kv;
  const KvSeqView sv = kv_.seq_view(e.seq, il);
  const int32_t n_keys = sv.n_tokens;
  const int32_t s0 = n_keys - n_live;  // stream index of the first live row
  const int32_t nq = std::min(P.up_queries, n_live);
  HeadViewTables tables;
  std::vector<KvHeadView> views(Hkv);
  for (int32_t h = 0; h < Hkv; ++h) views[h] = tables.make(sv, h);

  const int n_threads = pool_.size();
  std::vector<std::vector<float>> acc(n_threads);
  std::atomic<int64_t> next{0};
  const int64_t n_tasks = int64_t{Hkv} * nq;
  pool_.run([&](int tid, int) {
    std::vector<float>& a = acc[tid];
    a.assign(n_live, 0.0f);
    std::vector<float> s;
    for (int64_t task = next++; task < n_tasks; task = next++) {
      const int32_t h = static_cast<int32_t>(task / nq);
      const int32_t r = n_live - nq + static_cast<int32_t>(task % nq);  // live row
      const int32_t n_vis = s0 + r + 1;                                 // causal: keys up to itself
      s.resize(static_cast<size_t>(G) * n_vis);
      const float* q = q_.data() + (off + r) * hp.q_dim() + int64_t{h} * G * d;
      key_scores(q, G, d, hp.attn_scale, views[h], KeySet{nullptr, 0, 0, n_vis}, s.data(), n_vis);
      for (int32_t g = 0; g < G; ++g) {
        float* row = s.data() + static_cast<size_t>(g) * n_vis;
        const float m = *std::max_element(row, row + n_vis);
        const double sum = exp_shift_sum(row, n_vis, m);
        const float inv = static_cast<float>(1.0 / sum);
        for (int32_t j = s0; j < n_vis; ++j) a[j - s0] += row[j] * inv;
      }
    }
  });
  imp.assign(n_live, 0.0f);
  for (const auto& a : acc) {
    for (int32_t j = 0; j < static_cast<int32_t>(a.size()); ++j) imp[j] += a[j];
  }
}

int64_t Forward::uniprefill_select(int il, int64_t n_tok) {
  bool any = false;
  for (const DropState& d : drop_) any = any || !d.layers.empty();
  if (!any) return n_tok;
  const ModelHParams& hp = model_.hp;
  std::vector<std::vector<char>> keep(batch_.size());
  std::vector<float> imp;
  bool moved = false;
  for (size_t i = 0; i < batch_.size(); ++i) {
    DropState& d = drop_[i];
    if (d.layers.empty()) continue;
    SparseStats& st = batch_[i].sparse->stats;
    st.prefill_rows += n_rows_[i];
    st.prefill_rows_dense += static_cast<int64_t>(batch_[i].tokens.size());
    if (!std::binary_search(d.layers.begin(), d.layers.end(), il)) continue;
    uniprefill_importance(il, i, imp);
    const std::span<const int32_t> pos(pos_.data() + entry_offset_[i], n_rows_[i]);
    uniprefill_keep(batch_[i].sparse->policy(), imp, pos, keep[i]);
    const int64_t kept = std::count(keep[i].begin(), keep[i].end(), 1);
    st.prefill_selections++;
    st.prefill_dropped += n_rows_[i] - kept;
    moved = moved || kept < n_rows_[i];
  }
  if (!moved) return n_tok;
  // Gather the kept rows to the front, entry by entry (a row only ever moves down).
  const int64_t E = hp.n_embd, qd = hp.q_dim();
  int64_t dst = 0;
  for (size_t i = 0; i < batch_.size(); ++i) {
    const int64_t off = entry_offset_[i];
    int32_t n = 0;
    for (int32_t r = 0; r < n_rows_[i]; ++r) {
      if (!keep[i].empty() && !keep[i][r]) continue;
      const int64_t src = off + r, to = dst + n;
      if (src != to) {
        std::copy(h_.data() + src * E, h_.data() + (src + 1) * E, h_.data() + to * E);
        std::copy(q_.data() + src * qd, q_.data() + (src + 1) * qd, q_.data() + to * qd);
        if (keep_pre_) {  // RTPurbo's indexer reads a decode row's pre-RoPE query at its offset
          std::copy(qpre_.data() + src * qd, qpre_.data() + (src + 1) * qd, qpre_.data() + to * qd);
        }
        pos_[to] = pos_[src];
      }
      if (!drop_[i].live.empty()) drop_[i].live[n] = drop_[i].live[r];
      ++n;
    }
    if (!drop_[i].live.empty()) drop_[i].live.resize(n);
    entry_offset_[i] = dst;
    n_rows_[i] = n;
    dst += n;
  }
  return dst;
}

}  // namespace sieve
