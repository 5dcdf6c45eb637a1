// One forward step over a batch of sequence chunks: each entry contributes a prefill chunk or
// a single decode token of its own sequence. Matmuls run over all tokens of the batch at
// once; attention runs per sequence against that sequence's KV.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/result.h"
#include "core/thread_pool.h"
#include "engine/kv_binding.h"
#include "engine/model_runner.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "sparse/sketch.h"

namespace sieve {

struct ForwardStats {
  int64_t tokens = 0;
  double ms = 0;
};

// Sees every layer's post-RoPE queries before attention runs (sieve analyze, tests). The
// step's K/V are already in the store, so kv.seq_view(seq, layer) holds every key the
// queries may attend to.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  // q: [n_tok, n_head * head_dim] of the whole batch (entry i's rows start at the sum of the
  // earlier entries' token counts); pos: [n_tok] original positions.
  virtual void on_layer(int layer, std::span<const BatchEntry> batch, const float* q,
                        const int32_t* pos, const KvStore& kv) = 0;
};

// The CPU runner: the model on the host over the store's arenas, every policy.
class Forward : public ModelRunner {
 public:
  // sketch: writes sketch keys of every appended token when the store keeps them.
  Forward(const Model& model, ThreadPool& pool, KvStore& kv,
          const SketchProjection* sketch = nullptr);

  // Runs the step. logits receives, entry by entry, the rows asked for: all tokens of an
  // entry with all_logits, else its last token ([n_rows, n_vocab] row-major).
  Status run(std::span<const BatchEntry> batch, std::vector<float>& logits) override;
  std::string_view backend() const override { return "cpu"; }
  Status supports(const PolicyConfig&) const override { return {}; }

  const Model& model() const { return model_; }
  void set_observer(AttentionObserver* o) { observer_ = o; }
  // Rows of entry i computed in the current layer (its chunk size unless UniPrefill dropped
  // tokens; observers see the rows of an entry at its offset in the current batch layout).
  int32_t n_rows(size_t entry) const { return n_rows_[entry]; }
  // Batch rows each layer computed in the last run (UniPrefill's savings; tests).
  std::span<const int64_t> layer_rows() const { return layer_rows_; }
  // Wall time spent in attention since construction: sparse planning (scoring, selection)
  // plus the attention itself, every layer of every run (sieve bench's per-phase split).
  int64_t attention_ns() const { return attention_ns_; }
  // Wall time in the weight matmuls (every layer's and the output head's), and in run() as a
  // whole, since construction: what a decode step spends outside both is the serial glue
  // (norms, RoPE, KV writes, residuals).
  int64_t matmul_ns() const { return matmul_ns_; }
  int64_t run_ns() const { return run_ns_; }

 private:
  // The store's stream of KV head h of layer il and h's index inside it (one stream per layer,
  // or per KV head where RTPurbo windows some KV heads of a layer; kv_binding.h).
  int32_t stream_of(int il, int h) const {
    return il * kv_.geometry().n_head_group + h / kv_.geometry().n_head;
  }
  int32_t head_in_stream(int h) const { return h % kv_.geometry().n_head; }
  void attention_layer(int layer, std::span<const BatchEntry> batch);
  // What one entry reads in a full-attention layer under its sparse policy.
  struct EntryPlan {
    bool active = false;  // read key sets instead of every key
    bool compact =
        false;  // renumbered positions: key i of keys[h] at position i (re-rotated in attention)
    std::vector<std::vector<int32_t>> keys;  // [n_kv_head] ascending stream indices
    // keep_rows: per KV head, the first n keys of keys[h] read from their contiguous copy
    // (KeySet::kept_k), or written to it while attention reads them (fill: a new selection);
    // n == 0: neither.
    struct Kept {
      uint16_t* k = nullptr;
      uint16_t* v = nullptr;
      int32_t n = 0;
      bool fill = false;
    };
    std::vector<Kept> kept;  // [n_kv_head], or empty
    // RTPurbo (the entry's policy has a head plan): per KV head, the group's local and
    // retrieval query heads (indices inside the group), and whether the retrieval heads read
    // the list keys[kv_head] (decode selection) instead of every key.
    bool rt = false;
    int32_t rt_window = 0, rt_sinks = 0;
    std::vector<std::vector<int32_t>> rt_local, rt_retr;
    std::vector<char> rt_list;
  };
  void plan_sparse(int layer, size_t entry, std::span<const KvHeadView> views, EntryPlan& plan);
  // keep_rows: point plan.kept[hk] at the copy of its key set's first n keys made
  // for the selection `generation`; if there is none yet, this step's attention fills it.
  void keep_rows(int layer, size_t entry, int32_t hk, int32_t n, uint32_t generation, bool compact,
                 EntryPlan& plan);
  void write_sketches(int layer, std::span<const BatchEntry> batch);
  // RTPurbo (forward_rtpurbo.cpp): head split and the retrieval heads' decode key sets.
  void plan_rtpurbo(int layer, size_t entry, std::span<const KvHeadView> views, EntryPlan& plan);
  // UniPrefill (forward_uniprefill.cpp). Per entry: the selection layers of this step and
  // the chunk-relative indices of the rows still computed.
  struct DropState {
    std::vector<int32_t> layers;  // empty: the entry drops nothing this step
    std::vector<int32_t> live;    // [n_rows] ascending chunk indices
  };
  Status uniprefill_begin(std::span<const BatchEntry> batch);
  // Layers after a drop: removes the chunk tokens the entry dropped from the layer's stream.
  Status evict_dropped(int layer, size_t entry);
  // At a selection layer (K/V written): rates, keeps, and compacts the batch rows. Returns
  // the new row count.
  int64_t uniprefill_select(int layer, int64_t n_tok);
  void uniprefill_importance(int layer, size_t entry, std::vector<float>& importance);
  // The RoPE rotator of a layer's base (compact positions), with offsets up to max_abs ready.
  const RopeRotator& rotator(int layer, int64_t max_abs);

  const Model& model_;
  ThreadPool& pool_;
  KvStore& kv_;
  const SketchProjection* sketch_;
  AttentionObserver* observer_ = nullptr;
  HeadViewTables views_;
  std::vector<KeySet> segs_;  // window_segments() of a local-head decode task
  std::vector<EntryPlan> plans_;
  std::vector<std::unique_ptr<RopeRotator>> rotators_;  // one per distinct RoPE base
  std::vector<float> sc_logits_, sc_score_, sc_q_,
      sc_inv_;                    // selection scratch (sc_inv_: 1 / each head's softmax sum)
  std::vector<float> rt_logits_;  // RTPurbo: indexer logits [items, candidates]
  MatmulScratch mm_;
  // activations, [n_tok, ...]
  std::vector<float> h_, x_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<float> qpre_, kpre_;  // pre-RoPE q/k (RTPurbo's indexer), when an entry needs them
  bool keep_pre_ = false;
  std::vector<int32_t> pos_;
  std::vector<int64_t> entry_offset_;  // first row of each entry in the batch
  std::vector<int32_t> n_rows_;        // rows of each entry in the batch
  std::vector<DropState> drop_;
  std::vector<int64_t> layer_rows_;
  std::span<const BatchEntry> batch_;  // the step being run
  int64_t attention_ns_ = 0, matmul_ns_ = 0, run_ns_ = 0;
};

}  // namespace sieve
