#include "engine/forward.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "engine/sparse_seq.h"
#include "sparse/head_plan.h"

namespace sieve {

Forward::Forward(const Model& model, ThreadPool& pool, KvStore& kv, const SketchProjection* sketch)
    : model_(model), pool_(pool), kv_(kv), sketch_(sketch) {}

Status Forward::run(std::span<const BatchEntry> batch, std::vector<float>& logits) {
  const ScopedNs run_timer{run_ns_};
  const ModelHParams& hp = model_.hp;
  const ModelWeights& w = model_.w;
  int64_t n_tok = 0;  // rows of the batch (UniPrefill drops shrink it layer by layer)
  entry_offset_.clear();
  for (const BatchEntry& e : batch) {
    if (e.tokens.empty()) return make_error("forward: an entry of the batch has no tokens");
    entry_offset_.push_back(n_tok);
    n_tok += static_cast<int64_t>(e.tokens.size());
  }
  if (n_tok == 0) return make_error("forward: empty batch");
  for (const BatchEntry& e : batch) {
    for (int32_t t : e.tokens) {
      if (t < 0 || t >= hp.n_vocab) {
        return make_error("forward: token id {} is outside the vocabulary [0, {})", t, hp.n_vocab);
      }
    }
  }
  const int32_t n_group = kv_.geometry().n_head_group;
  for (const BatchEntry& e : batch) {
    if (!kv_.has_sequence(e.seq)) return make_error("forward: unknown sequence {}", e.seq);
    for (int32_t s = 0; s < kv_.geometry().n_stream; ++s) {
      if (kv_.stream_len(e.seq, s) < static_cast<int32_t>(e.tokens.size())) {
        return make_error("forward: the chunk of sequence {} was not reserved in the KV store",
                          e.seq);
      }
    }
    // One stream per KV head: only RTPurbo's plan reads the heads apart (the layout comes from
    // it; kv_layout_for), and UniPrefill's drops work on whole layers.
    if (n_group > 1 &&
        (!e.sparse || !e.sparse->head_plan() || e.sparse->policy().drops_prefill())) {
      return make_error(
          "forward: this KV store keeps one stream per KV head (an rtpurbo head plan's layout); "
          "policy '{}' "
          "cannot run on it: use rtpurbo without prefill dropping, or a store made for this policy",
          e.sparse ? e.sparse->policy().preset : std::string("dense"));
    }
  }

  batch_ = batch;
  n_rows_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    n_rows_[i] = static_cast<int32_t>(batch[i].tokens.size());
  SIEVE_TRY(uniprefill_begin(batch));
  layer_rows_.assign(hp.n_layer, 0);
  const int64_t E = hp.n_embd;
  h_.resize(n_tok * E);
  x_.resize(n_tok * E);
  q_.resize(n_tok * hp.q_dim());
  k_.resize(n_tok * hp.kv_dim());
  v_.resize(n_tok * hp.kv_dim());
  attn_.resize(n_tok * hp.q_dim());
  tmp_.resize(n_tok * E);
  gate_.resize(n_tok * hp.n_ff);
  up_.resize(n_tok * hp.n_ff);
  pos_.resize(n_tok);
  keep_pre_ = false;
  for (const BatchEntry& e : batch) {
    if (e.sparse && e.sparse->head_plan() && e.sparse->head_plan()->has_indexer()) keep_pre_ = true;
  }
  if (keep_pre_) {
    qpre_.resize(n_tok * hp.q_dim());
    kpre_.resize(n_tok * hp.kv_dim());
  }

  // Positions: the reserved tokens are the sequence's last ones.
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& e = batch[i];
    const int64_t off = entry_offset_[i];
    const int32_t base = kv_.n_tokens(e.seq) - static_cast<int32_t>(e.tokens.size());
    for (size_t t = 0; t < e.tokens.size(); ++t) pos_[off + t] = base + static_cast<int32_t>(t);
  }
  pool_.parallel_for(n_tok, 8, [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      // token of batch row t
      size_t ei = std::upper_bound(entry_offset_.begin(), entry_offset_.end(), t) -
                  entry_offset_.begin() - 1;
      const int32_t tok = batch[ei].tokens[t - entry_offset_[ei]];
      float* row = h_.data() + t * E;
      get_row(w.tok_embd, tok, row);
      if (hp.embd_scale != 1.0f) {
        for (int64_t c = 0; c < E; ++c) row[c] *= hp.embd_scale;
      }
    }
  });

  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[il];
    layer_rows_[il] = n_tok;
    rms_norm(h_.data(), L.attn_norm, hp.rms_eps, n_tok, E, x_.data());
    // q, k and v share their input: one activation conversion, one thread-pool job.
    const MatmulTarget qkv[3] = {{L.wq, q_.data()}, {L.wk, k_.data()}, {L.wv, v_.data()}};
    {
      const ScopedNs t{matmul_ns_};
      matmul_multi(qkv, 3, x_.data(), n_tok, pool_, mm_);
    }
    if (L.bq) add_bias(q_.data(), L.bq, n_tok, hp.q_dim());
    if (L.bk) add_bias(k_.data(), L.bk, n_tok, hp.kv_dim());
    if (L.bv) add_bias(v_.data(), L.bv, n_tok, hp.kv_dim());
    if (hp.qk_norm) {
      rms_norm(q_.data(), L.q_norm, hp.rms_eps, n_tok * hp.n_head, hp.head_dim, q_.data());
      rms_norm(k_.data(), L.k_norm, hp.rms_eps, n_tok * hp.n_head_kv, hp.head_dim, k_.data());
    }
    if (keep_pre_) {
      std::copy(q_.begin(), q_.begin() + n_tok * hp.q_dim(), qpre_.begin());
      std::copy(k_.begin(), k_.begin() + n_tok * hp.kv_dim(), kpre_.begin());
    }
    rope_qk(q_.data(), hp.n_head, k_.data(), hp.n_head_kv, pos_.data(), n_tok, hp.head_dim,
            hp.n_rot, hp.rope_base[il], hp.rope_mode, hp.rope_scaling);
    for (size_t i = 0; i < batch.size(); ++i) {
      const BatchEntry& e = batch[i];
      const int64_t off = entry_offset_[i];
      if (n_rows_[i] < static_cast<int32_t>(e.tokens.size())) SIEVE_TRY(evict_dropped(il, i));
      // Each stream takes its KV heads' slice of the rows.
      const int64_t sd = int64_t{kv_.geometry().n_head} * hp.head_dim;
      for (int32_t g = 0; g < n_group; ++g) {
        const int32_t s = il * n_group + g;
        const int32_t first = kv_.stream_len(e.seq, s) - n_rows_[i];
        for (int32_t t = 0; t < n_rows_[i]; ++t) {
          const KvRowRef row = kv_.row(e.seq, s, first + static_cast<int32_t>(t));
          f32_to_f16_row(k_.data() + (off + t) * hp.kv_dim() + g * sd, row.k_f16(), sd);
          f32_to_f16_row(v_.data() + (off + t) * hp.kv_dim() + g * sd, row.v_f16(), sd);
        }
      }
    }
    write_sketches(il, batch);
    if (observer_) observer_->on_layer(il, batch, q_.data(), pos_.data(), kv_);
    n_tok = uniprefill_select(il, n_tok);
    attention_layer(il, batch);
    {
      const ScopedNs t{matmul_ns_};
      matmul(L.wo, attn_.data(), n_tok, tmp_.data(), pool_, mm_);
    }
    if (hp.post_norms) rms_norm(tmp_.data(), L.post_attn_norm, hp.rms_eps, n_tok, E, tmp_.data());
    for (int64_t i = 0; i < n_tok * E; ++i) h_[i] += tmp_[i];

    rms_norm(h_.data(), L.ffn_norm, hp.rms_eps, n_tok, E, x_.data());
    const MatmulTarget gate_up[2] = {{L.w_gate, gate_.data()}, {L.w_up, up_.data()}};
    {
      const ScopedNs t{matmul_ns_};
      matmul_multi(gate_up, 2, x_.data(), n_tok, pool_, mm_);
    }
    pool_.parallel_for(n_tok, 4, [&](int64_t b, int64_t end) {
      float* g = gate_.data() + b * hp.n_ff;
      const float* u = up_.data() + b * hp.n_ff;
      if (hp.act == FfnAct::silu)
        silu_mul(g, u, (end - b) * hp.n_ff);
      else
        gelu_tanh_mul(g, u, (end - b) * hp.n_ff);
    });
    {
      const ScopedNs t{matmul_ns_};
      matmul(L.w_down, gate_.data(), n_tok, tmp_.data(), pool_, mm_);
    }
    if (hp.post_norms) rms_norm(tmp_.data(), L.post_ffn_norm, hp.rms_eps, n_tok, E, tmp_.data());
    for (int64_t i = 0; i < n_tok * E; ++i) h_[i] += tmp_[i];
  }

  // Logits only for the rows asked for.
  std::vector<int64_t> rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t off = entry_offset_[i], n = n_rows_[i];  // UniPrefill always keeps the last row
    if (batch[i].all_logits) {
      for (int64_t t = 0; t < n; ++t) rows.push_back(off + t);
    } else {
      rows.push_back(off + n - 1);
    }
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    rms_norm(h_.data() + rows[r] * E, w.output_norm, hp.rms_eps, 1, E, x_.data() + r * E);
  }
  logits.resize(rows.size() * static_cast<size_t>(hp.n_vocab));
  const ScopedNs t{matmul_ns_};
  matmul(w.output, x_.data(), static_cast<int64_t>(rows.size()), logits.data(), pool_, mm_);
  return {};
}

void Forward::attention_layer(int il, std::span<const BatchEntry> batch) {
  const ScopedNs timer{attention_ns_};
  const ModelHParams& hp = model_.hp;
  const int G = hp.n_gqa();
  const int d = hp.head_dim;
  const int32_t window = hp.layer_kind[il] == LayerKind::sliding ? hp.sliding_window : 0;

  // Tasks: (entry, kv head, block of query tokens). A lone decode token over a long KV is
  // split by keys instead, and the partial states are merged afterwards.
  struct Task {
    int entry, kv_head;
    int32_t t0, t1;  // query tokens of the entry
    const KvHeadView* view;
    KeySet keys;   // the keys this task reads
    int split;     // index into partial buffers (-1: writes attn_ directly)
    int part = 0;  // RTPurbo: 0 every head of the group, 1 its local heads, 2 its retrieval heads
  };
  std::vector<Task> tasks;
  std::vector<KvHeadView> views(batch.size() * hp.n_head_kv);
  views_.clear();
  if (plans_.size() < batch.size()) plans_.resize(batch.size());
  const int n_threads = pool_.size();
  int n_split_rows = 0;
  // Compact positions rotate the selected keys (KeySet::rot) and the queries: one rotator per
  // RoPE base, made ready in this loop, before the workers run.
  const RopeRotator* rot = nullptr;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int32_t n_q = n_rows_[i];
    for (int h = 0; h < hp.n_head_kv; ++h) {
      views[i * hp.n_head_kv + h] =
          views_.make(kv_.seq_view(batch[i].seq, stream_of(il, h)), head_in_stream(h));
    }
    EntryPlan& plan = plans_[i];
    plan.active = false;
    plan.compact = false;
    plan.rt = false;
    plan.kept.clear();
    if (batch[i].sparse && window == 0 && batch[i].sparse->head_plan()) {
      // RTPurbo: the group's local heads read sinks + window, its retrieval heads every key
      // (prefill) or their decode key set; no key split (the sets are small or the step short).
      plan_rtpurbo(
          il, i, std::span<const KvHeadView>(views.data() + i * hp.n_head_kv, hp.n_head_kv), plan);
      for (int h = 0; h < hp.n_head_kv; ++h) {
        const KvHeadView* view = &views[i * hp.n_head_kv + h];
        for (int part = 1; part <= 2; ++part) {
          if ((part == 1 ? plan.rt_local[h] : plan.rt_retr[h]).empty()) continue;
          const bool list = part == 2 && plan.rt_list[h];
          const KeySet ks =
              list ? KeySet{plan.keys[h].data(), static_cast<int32_t>(plan.keys[h].size()), 0, 0}
                   : KeySet{nullptr, 0, 0, view->n_tokens};
          const int32_t n_list = list ? ks.n_idx : 0;
          if (n_q == 1 && n_list > kAttnSegment && n_threads > 1) {
            // A decode step's retrieval heads over their key list: split by segments like the
            // dense decode below.
            for (int32_t k0 = 0; k0 < n_list; k0 += kAttnSegment) {
              const KeySet seg{ks.idx + k0, std::min(kAttnSegment, n_list - k0), 0, 0};
              tasks.push_back({static_cast<int>(i), h, 0, 1, view, seg, n_split_rows++, part});
            }
            continue;
          }
          if (n_q == 1 && part == 1 && n_threads > 1 && view->n_tokens > kAttnSegment) {
            // The local heads' sinks + window (2048 keys on SmolLM2): one task would be each
            // layer's longest at 16 threads, so it is split too, skipping the keys between.
            const int32_t qp = pos_[entry_offset_[i]];
            window_segments(
                AttnQuery{nullptr, &qp, 1, 1, hp.head_dim, 1.0f, plan.rt_window, plan.rt_sinks},
                *view, view->n_tokens, segs_);
            if (segs_.size() > 1) {
              for (const KeySet& seg : segs_)
                tasks.push_back({static_cast<int>(i), h, 0, 1, view, seg, n_split_rows++, part});
              continue;
            }
          }
          constexpr int32_t kQBlock = 32;
          for (int32_t t0 = 0; t0 < n_q; t0 += kQBlock) {
            tasks.push_back(
                {static_cast<int>(i), h, t0, std::min(n_q, t0 + kQBlock), view, ks, -1, part});
          }
        }
      }
      continue;
    }
    if (batch[i].sparse && window == 0 && !batch[i].sparse->policy().dense_attention()) {
      plan_sparse(il, i, std::span<const KvHeadView>(views.data() + i * hp.n_head_kv, hp.n_head_kv),
                  plan);
    }
    const RopeRotator* crot = plan.compact ? &rotator(il, kv_.n_tokens(batch[i].seq) + 1) : nullptr;
    if (crot) rot = crot;
    for (int h = 0; h < hp.n_head_kv; ++h) {
      const KvHeadView* view = &views[i * hp.n_head_kv + h];
      const bool list = plan.active;
      const int32_t n_keys =
          plan.active ? static_cast<int32_t>(plan.keys[h].size()) : view->n_tokens;
      auto key_range = [&](int32_t k0, int32_t k1) {
        if (!list) return KeySet{nullptr, 0, k0, k1};
        KeySet ks{plan.keys[h].data() + k0, k1 - k0, 0, 0, crot, k0};
        const EntryPlan::Kept kept =
            h < static_cast<int>(plan.kept.size()) ? plan.kept[h] : EntryPlan::Kept{};
        if (kept.n > k0) {
          ks.kept_k = kept.k + int64_t{k0} * hp.head_dim;
          ks.kept_v = kept.v + int64_t{k0} * hp.head_dim;
          ks.n_kept = std::min(kept.n, k1) - k0;
          ks.fill = kept.fill;
        }
        return ks;
      };
      if (n_q == 1 && n_keys > kAttnSegment && n_threads > 1) {
        // One task per attention segment: the merge order is attend()'s own, so a decode row
        // equals the same row computed in a prefill chunk.
        for (int32_t k0 = 0; k0 < n_keys; k0 += kAttnSegment) {
          tasks.push_back({static_cast<int>(i), h, 0, 1, view,
                           key_range(k0, std::min(n_keys, k0 + kAttnSegment)), n_split_rows++});
        }
      } else {
        constexpr int32_t kQBlock = 32;
        for (int32_t t0 = 0; t0 < n_q; t0 += kQBlock) {
          tasks.push_back({static_cast<int>(i), h, t0, std::min(n_q, t0 + kQBlock), view,
                           key_range(0, n_keys), -1});
        }
      }
    }
  }
  // Later query blocks see more keys: hand out tasks dynamically, the longest first (query
  // rows x keys; ties keep their order). A decode row's split tasks are whole segments plus a
  // short tail each: 2,688 selected keys x 3 KV heads are 15 tasks of 512 keys and 3 of 128,
  // and in list order 16 threads took 14 full ones and two tails first, leaving a full one
  // for a second round. The partial states are merged in list order whatever the hand-out
  // order, so results do not change.
  std::vector<uint32_t> order(tasks.size());
  std::iota(order.begin(), order.end(), 0u);
  auto cost = [&](uint32_t i) {
    const Task& t = tasks[i];
    return int64_t{t.t1 - t.t0} * t.keys.size();
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return cost(a) > cost(b); });
  std::vector<float> part_o(static_cast<size_t>(n_split_rows) * G * d);
  std::vector<float> part_m(static_cast<size_t>(n_split_rows) * G), part_l(part_m.size());
  std::atomic<size_t> next{0};
  const int64_t qd = hp.q_dim();
  pool_.run([&](int, int) {
    std::vector<float> qbuf, obuf;
    std::vector<int32_t> cpos;
    for (size_t oi = next++; oi < tasks.size(); oi = next++) {
      const Task& tk = tasks[order[oi]];
      const int64_t off = entry_offset_[tk.entry];
      const int32_t nq = tk.t1 - tk.t0;
      // gather the group's query rows: [nq, G, d]
      const EntryPlan& plan = plans_[tk.entry];
      if (tk.part != 0) {
        // RTPurbo: the group's local (part 1) or retrieval (part 2) heads only.
        const std::vector<int32_t>& heads =
            tk.part == 1 ? plan.rt_local[tk.kv_head] : plan.rt_retr[tk.kv_head];
        const int ng = static_cast<int>(heads.size());
        qbuf.resize(static_cast<size_t>(nq) * ng * d);
        for (int32_t t = 0; t < nq; ++t) {
          const float* src =
              q_.data() + (off + tk.t0 + t) * qd + static_cast<int64_t>(tk.kv_head) * G * d;
          for (int g = 0; g < ng; ++g) {
            std::copy(src + int64_t{heads[g]} * d, src + int64_t{heads[g] + 1} * d,
                      qbuf.data() + (static_cast<size_t>(t) * ng + g) * d);
          }
        }
        AttnQuery aq{qbuf.data(),
                     pos_.data() + off + tk.t0,
                     nq,
                     ng,
                     d,
                     hp.attn_scale,
                     tk.part == 1 ? plan.rt_window : 0,
                     tk.part == 1 ? plan.rt_sinks : 0};
        if (tk.split >= 0) {  // ng <= G rows of the split's buffers
          attend(aq, *tk.view, tk.keys, part_o.data() + static_cast<size_t>(tk.split) * G * d,
                 part_m.data() + static_cast<size_t>(tk.split) * G,
                 part_l.data() + static_cast<size_t>(tk.split) * G);
          continue;
        }
        obuf.resize(qbuf.size());
        attend(aq, *tk.view, tk.keys, obuf.data());
        for (int32_t t = 0; t < nq; ++t) {
          float* dst =
              attn_.data() + (off + tk.t0 + t) * qd + static_cast<int64_t>(tk.kv_head) * G * d;
          for (int g = 0; g < ng; ++g) {
            const float* o = obuf.data() + (static_cast<size_t>(t) * ng + g) * d;
            std::copy(o, o + d, dst + int64_t{heads[g]} * d);
          }
        }
        continue;
      }
      qbuf.resize(static_cast<size_t>(nq) * G * d);
      for (int32_t t = 0; t < nq; ++t) {
        const float* src =
            q_.data() + (off + tk.t0 + t) * qd + static_cast<int64_t>(tk.kv_head) * G * d;
        std::copy(src, src + G * d, qbuf.data() + static_cast<size_t>(t) * G * d);
      }
      const int32_t* qpos = pos_.data() + off + tk.t0;
      if (plan.compact) {
        // The chunk's own tokens are the last n_q keys of the set, at compact positions.
        const int32_t n_sel = static_cast<int32_t>(plan.keys[tk.kv_head].size());
        const int32_t n_q_all = n_rows_[tk.entry];
        cpos.resize(nq);
        for (int32_t t = 0; t < nq; ++t) {
          cpos[t] = n_sel - n_q_all + tk.t0 + t;
          rot->rotate(qbuf.data() + static_cast<size_t>(t) * G * d, G, int64_t{cpos[t]} - qpos[t]);
        }
        qpos = cpos.data();
      }
      AttnQuery aq{qbuf.data(), qpos, nq, G, d, hp.attn_scale, window};
      const KvHeadView& kv = *tk.view;
      if (tk.split >= 0) {
        attend(aq, kv, tk.keys, part_o.data() + static_cast<size_t>(tk.split) * G * d,
               part_m.data() + static_cast<size_t>(tk.split) * G,
               part_l.data() + static_cast<size_t>(tk.split) * G);
        continue;
      }
      obuf.resize(qbuf.size());
      attend(aq, kv, tk.keys, obuf.data());
      for (int32_t t = 0; t < nq; ++t) {
        float* dst =
            attn_.data() + (off + tk.t0 + t) * qd + static_cast<int64_t>(tk.kv_head) * G * d;
        std::copy(obuf.data() + static_cast<size_t>(t) * G * d,
                  obuf.data() + static_cast<size_t>(t + 1) * G * d, dst);
      }
    }
  });
  // Merge split-K partial states in order (tasks of one (entry, head, part) are consecutive).
  // RTPurbo parts hold the rows of their heads only and scatter them to those heads.
  for (size_t ti = 0; ti < tasks.size();) {
    const Task& first = tasks[ti];
    if (first.split < 0) {
      ++ti;
      continue;
    }
    const EntryPlan& plan = plans_[first.entry];
    const std::vector<int32_t>* heads = first.part == 0   ? nullptr
                                        : first.part == 1 ? &plan.rt_local[first.kv_head]
                                                          : &plan.rt_retr[first.kv_head];
    const int rows = heads ? static_cast<int>(heads->size()) : G;
    float* o = part_o.data() + static_cast<size_t>(first.split) * G * d;
    float* m = part_m.data() + static_cast<size_t>(first.split) * G;
    float* l = part_l.data() + static_cast<size_t>(first.split) * G;
    size_t tj = ti + 1;
    for (; tj < tasks.size() && tasks[tj].split >= 0 && tasks[tj].entry == first.entry &&
           tasks[tj].kv_head == first.kv_head && tasks[tj].part == first.part;
         ++tj) {
      const int s = tasks[tj].split;
      merge_attn(o, m, l, part_o.data() + static_cast<size_t>(s) * G * d,
                 part_m.data() + static_cast<size_t>(s) * G,
                 part_l.data() + static_cast<size_t>(s) * G, rows, d);
    }
    normalize_attn(o, l, rows, d);
    float* dst = attn_.data() + entry_offset_[first.entry] * qd +
                 static_cast<int64_t>(first.kv_head) * G * d;
    if (heads) {
      for (int g = 0; g < rows; ++g)
        std::copy(o + int64_t{g} * d, o + int64_t{g + 1} * d, dst + int64_t{(*heads)[g]} * d);
    } else {
      std::copy(o, o + G * d, dst);
    }
    ti = tj;
  }
}

}  // namespace sieve
