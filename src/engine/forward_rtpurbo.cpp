// RTPurbo's attention plan (docs/sparse.md "RTPurbo (head plan)"): for one batch entry in one
// full-attention layer, split each KV group's query heads into local heads (sinks + sliding
// window, prefill and decode) and retrieval heads (every key in prefill; at decode the
// indexer's top-p tokens plus sinks + window), and pick the retrieval heads' decode keys.
#include <algorithm>
#include <cmath>

#include "backend/cpu/attention.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "engine/sparse_seq.h"
#include "sparse/head_plan.h"
#include "sparse/topp.h"

namespace sieve {
namespace {

// A retrieval head with an indexer: its KV head and its place in the group.
struct Item {
  int32_t h, g;
};

// rt_refine: each retrieval head's indexer picks (sels, candidate indices relative to c0) are
// scored exactly, post-RoPE q.K as the attention weighs them, together with the sinks
// [0, c0) and the window [c1, n_keys), which are read whatever is picked; each head keeps the
// smallest set of its picks whose mass plus the sinks' and window's reaches tp.p of the
// softmax over all of those keys (top_p_select_beyond). Items come in KV-head order; one pass
// over a KV head's keys scores its G query heads at once. Returns the K bytes read.
int64_t refine_exact(ThreadPool& pool, const float* q, int32_t d, int32_t G, float scale,
                     std::span<const KvHeadView> views, int32_t n_keys, int32_t c0, int32_t c1,
                     const std::vector<Item>& items, const TopPParams& tp,
                     std::vector<std::vector<int32_t>>& sels) {
  const int32_t n = c1 - c0;
  int64_t bytes = 0;
  std::vector<char> mark(n);
  std::vector<int32_t> list, pos(n);
  std::vector<float> lg;
  for (size_t i = 0; i < items.size();) {
    const int32_t h = items[i].h;
    size_t e = i;
    while (e < items.size() && items[e].h == h) ++e;
    std::fill(mark.begin(), mark.end(), 0);
    for (size_t it = i; it < e; ++it) {
      for (int32_t j : sels[it]) mark[j] = 1;
    }
    list.clear();
    for (int32_t j = 0; j < c0; ++j) list.push_back(j);
    for (int32_t j = 0; j < n; ++j) {
      if (!mark[j]) continue;
      pos[j] = static_cast<int32_t>(list.size());
      list.push_back(c0 + j);
    }
    const int32_t n_lead = static_cast<int32_t>(list.size());  // sinks + the group's picks
    for (int32_t j = c1; j < n_keys; ++j) list.push_back(j);
    const int32_t len = static_cast<int32_t>(list.size());
    lg.resize(static_cast<size_t>(G) * len);
    pool.parallel_for(len, 1024, [&](int64_t a, int64_t z) {
      key_scores(q + int64_t{h} * G * d, G, d, scale, views[h],
                 KeySet{list.data() + a, static_cast<int32_t>(z - a)}, lg.data() + a, len);
    });
    bytes += int64_t{len} * d * 2;
    pool.parallel_for(static_cast<int64_t>(e - i), 1, [&](int64_t a, int64_t z) {
      thread_local TopPScratch scratch;
      thread_local std::vector<float> mass;
      thread_local std::vector<int32_t> keep;
      for (int64_t k = a; k < z; ++k) {
        std::vector<int32_t>& sel = sels[i + k];
        float* row =
            lg.data() + int64_t{items[i + k].g} * len;  // (the item's own row: overwritten)
        mass.resize(sel.size());
        for (size_t r = 0; r < sel.size(); ++r) mass[r] = row[pos[sel[r]]];
        float m = -INFINITY;
        for (int32_t t = 0; t < c0; ++t) m = std::max(m, row[t]);
        for (int32_t t = n_lead; t < len; ++t) m = std::max(m, row[t]);
        for (float x : mass) m = std::max(m, x);
        // exp(x - m) in place, vectorised: the sinks, the window, the picks.
        const double fixed =
            exp_shift_sum(row, c0, m) + exp_shift_sum(row + n_lead, len - n_lead, m);
        exp_shift_sum(mass.data(), static_cast<int64_t>(mass.size()), m);
        top_p_select_beyond(mass.data(), static_cast<int32_t>(mass.size()), fixed, tp, keep,
                            scratch);
        for (size_t r = 0; r < keep.size(); ++r) sel[r] = sel[keep[r]];  // keep is ascending
        sel.resize(keep.size());
      }
    });
    i = e;
  }
  return bytes;
}

}  // namespace

void Forward::plan_rtpurbo(int il, size_t ei, std::span<const KvHeadView> views, EntryPlan& plan) {
  const BatchEntry& e = batch_[ei];
  SparseSeq& sp = *e.sparse;
  const PolicyConfig& P = sp.policy();
  const HeadPlan& HP = *sp.head_plan();
  const ScopedNs timer{sp.stats.select_ns};  // planning time
  const ModelHParams& hp = model_.hp;
  const int32_t d = hp.head_dim, G = hp.n_gqa(), Hkv = hp.n_head_kv;
  const int32_t n_q = n_rows_[ei];
  plan.rt = true;
  plan.rt_window = sp.rt_window();
  plan.rt_sinks = P.rt_sinks;
  plan.rt_local.assign(Hkv, {});
  plan.rt_retr.assign(Hkv, {});
  plan.rt_list.assign(Hkv, 0);
  plan.keys.resize(Hkv);
  for (int32_t h = 0; h < Hkv; ++h) {
    for (int32_t g = 0; g < G; ++g) {
      (HP.is_retrieval(il, h * G + g) ? plan.rt_retr[h] : plan.rt_local[h]).push_back(g);
    }
  }
  // Decode only: prefill of retrieval heads is full attention.
  if (n_q != 1 || !HP.has_indexer() || !keep_pre_ || kv_.geometry().sketch_dim != HP.d_idx) return;
  const TopPParams tp{P.top_p > 0 ? P.top_p : 1.0f, P.min_keep, P.top_k};
  const float* qrow = qpre_.data() + entry_offset_[ei] * hp.q_dim();
  // The retrieval heads of the groups that have an indexer (a group without one reads every key).
  std::vector<Item> items;
  for (int32_t h = 0; h < Hkv; ++h) {
    if (plan.rt_retr[h].empty()) continue;
    bool fitted = HP.indexer_k(il, h) != nullptr;
    for (int32_t g : plan.rt_retr[h]) fitted = fitted && HP.indexer_q(il, h * G + g) != nullptr;
    if (!fitted) continue;
    for (int32_t g : plan.rt_retr[h]) items.push_back({h, g});
  }
  if (items.empty()) return;
  // A KV head with a retrieval head keeps every token (kv_layout_for), so all of them hold
  // the same keys; candidates are indices of their streams.
  const int32_t n_keys = views[items[0].h].n_tokens;
  const int32_t S = P.rt_sinks, W = plan.rt_window;
  const int32_t c0 = std::min(S, n_keys);
  const int32_t c1 = std::max(c0, n_keys - W);  // candidates [c0, c1): neither sinks nor window
  const int32_t n = c1 - c0;
  if (n <= 0) return;
  const int32_t di = HP.d_idx;
  // Item it's indexer keys: row j of its KV head's stream, at its head's slot (every stream
  // has the store's page size).
  std::vector<KvSeqView> svs;
  std::vector<int32_t> k_off;
  for (const Item& item : items) {
    svs.push_back(kv_.seq_view(e.seq, stream_of(il, item.h)));
    k_off.push_back(head_in_stream(item.h) * di);
  }
  const int32_t n_items = static_cast<int32_t>(items.size());
  // q_idx = q_preRoPE W_Q per item; logits = q_idx . k_idx over the candidates, every item at
  // once per key (the threads split the candidates); then each item's top-p over
  // softmax(logits x attn_scale x rt_gain), the items on different threads.
  std::vector<float> qi(static_cast<size_t>(n_items) * di, 0.0f);
  for (int32_t it = 0; it < n_items; ++it) {
    const float* wq = HP.indexer_q(il, items[it].h * G + items[it].g);
    const float* q = qrow + int64_t{items[it].h * G + items[it].g} * d;
    float* out = qi.data() + int64_t{it} * di;
    for (int32_t r = 0; r < d; ++r) {
      for (int32_t c = 0; c < di; ++c) out[c] += q[r] * wq[int64_t{r} * di + c];
    }
  }
  rt_logits_.resize(static_cast<size_t>(n_items) * n);
  pool_.parallel_for(n, 1024, [&](int64_t a, int64_t z) {
    // A page's run of keys per item in one vectorised call (indexer rows of consecutive
    // tokens lie a fixed stride apart within a page).
    for (int64_t j = a; j < z;) {
      const int32_t key = static_cast<int32_t>(c0 + j);
      const int32_t run = svs[0].page_run(key, static_cast<int32_t>(c0 + z));
      for (int32_t it = 0; it < n_items; ++it) {
        strided_scores(qi.data() + int64_t{it} * di, svs[it].sketch(key) + k_off[it],
                       svs[it].sketch_stride(), run, di, 1.0f,
                       rt_logits_.data() + int64_t{it} * n + j);
      }
      j += run;
    }
  });
  // Each retrieval head's top-p on its own thread (the heads of a layer at once; the top-p
  // itself is sequential).
  std::vector<std::vector<int32_t>> sels(n_items);
  pool_.parallel_for(n_items, 1, [&](int64_t a, int64_t z) {
    thread_local TopPScratch scratch;
    for (int64_t it = a; it < z; ++it) {
      top_p_select_logits(rt_logits_.data() + it * n, n, hp.attn_scale * P.rt_gain, tp, sels[it],
                          scratch);
    }
  });
  if (P.rt_refine > 0.0f) {
    const TopPParams rp{P.rt_refine, P.min_keep, P.top_k};
    sp.stats.bytes_read += refine_exact(pool_, q_.data() + entry_offset_[ei] * hp.q_dim(), d, G,
                                        hp.attn_scale, views, n_keys, c0, c1, items, rp, sels);
  }
  std::vector<char> mark;
  for (int32_t it = 0; it < n_items;) {
    const int32_t h = items[it].h;
    mark.assign(n, 0);
    for (; it < n_items && items[it].h == h; ++it) {
      for (int32_t j : sels[it]) mark[j] = 1;
    }
    // The group's retrieval heads read the union of their picks, plus sinks and window.
    std::vector<int32_t>& keys = plan.keys[h];
    keys.clear();
    for (int32_t j = 0; j < c0; ++j) keys.push_back(j);
    int32_t picked = 0;
    for (int32_t j = 0; j < n; ++j) {
      if (mark[j]) {
        keys.push_back(c0 + j);
        ++picked;
      }
    }
    for (int32_t j = c1; j < n_keys; ++j) keys.push_back(j);
    plan.rt_list[h] = 1;
    // The adaptive budget: per (layer, KV group) selection, tokens picked among candidates.
    sp.stats.layer_steps++;
    sp.stats.selections++;
    sp.stats.selected_tokens += picked;
    sp.stats.context_tokens += n;
    sp.stats.bytes_read += int64_t{n} * di * 4 + static_cast<int64_t>(keys.size()) * d * 2 * 2;
  }
}

}  // namespace sieve
