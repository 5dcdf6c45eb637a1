// Per-sequence state of a sparse attention policy: the resolved policy, the selection cache
// and eviction importance of every layer, Quest block bounds, and the request's statistics.
// Owned next to the sequence (the scheduler's request); Forward reads and updates it
// through BatchEntry::sparse, and sparse_after_step() applies evictions between steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/huge_buffer.h"
#include "kv/kv_store.h"
#include "model/hparams.h"
#include "sparse/policy.h"
#include "sparse/sketch.h"
#include "sparse/stats.h"

namespace sieve {

struct SparseLayerState {
  // Selection cache, one slot per scope unit (the layer, or each KV head).
  std::vector<float> fingerprint;            // [n_units, head_dim]
  std::vector<std::vector<int32_t>> picked;  // [n_units] stream indices of the cached top set
  std::vector<int32_t> picked_end;           // [n_units] end of the range the set was picked from
  std::vector<char> valid;                   // [n_units]
  std::vector<char> has_pick;                // [n_units] the entry holds a pick, not only votes
  std::vector<uint32_t> generation;          // [n_units] bumped each time picked[u] is replaced
  // keep_rows: per KV head, f16 copies of the K and V rows of the first n keys of the unit's
  // cached key set (sinks + picks), K rotated to its attention position when `compact`; made
  // for the selection of `generation` and read while that selection is reused. (Generation 0
  // is never a selection's: a dropped cache makes the next step select, bumping it.)
  // The rows live in the sequence's kept arena (SparseSeq::kept_storage) or, past its slot
  // size, in `spill`.
  struct KeptRows {
    uint16_t* k = nullptr;
    uint16_t* v = nullptr;
    int32_t n = 0;
    uint32_t generation = 0;
    bool compact = false;
    std::vector<uint16_t> spill;  // [2, n, head_dim] when n exceeds the arena's slot
  };
  std::vector<KeptRows> kept;     // [n_kv_head] (sized by SparseSeq::reset)
  std::vector<float> importance;  // [stream tokens] eviction policies
  // Eviction policies with the selection cache: per unit, what its last selection added to
  // `importance` (from the first token after the sinks on); a step that reuses the selection
  // adds it again, as the scores of the query it stands for.
  std::vector<std::vector<float>> votes;  // [n_units]
  // Quest: per block of `block` tokens, per KV head, per dim min and max of the keys.
  std::vector<float> bmin, bmax;  // [n_blocks, n_kv_head, head_dim]
  int32_t n_blocks = 0;
};

class SparseSeq {
 public:
  SparseSeq(PolicyConfig resolved, const ModelHParams& hp);
  const PolicyConfig& policy() const { return policy_; }
  // Forget every layer's cache, importance, bounds and kept rows (freeing their arena).
  void reset();
  // Whether selected tokens are renumbered now (positions=compact, or auto beyond training).
  bool compact(int32_t n_tokens) const;
  int32_t n_units() const { return n_units_; }
  // RTPurbo: the local heads' window (rt_window, or n_ctx_train / 4) and the plan, when it
  // fits the model (else nullptr: every head attends fully).
  int32_t rt_window() const { return rt_window_; }
  const HeadPlan* head_plan() const { return plan_ok_ ? policy_.plan.get() : nullptr; }
  SparseLayerState& layer(int32_t il) { return layers_[il]; }
  void invalidate_cache(int32_t il);
  // Bytes of the kept K/V rows held (keep_rows), over every layer.
  int64_t kept_bytes() const;
  // keep_rows: points r.k / r.v at room for n rows each of head_dim f16 values, for layer il and
  // KV head hk. The rows go in a slot of one arena per sequence (sinks + top_k + block - 1 rows per
  // layer and KV head, huge pages, allocated at the first use, committed as slots are first
  // written): one allocation instead of one zero-filled vector per slot, which cost ~0.9 ms per
  // layer and KV head at a sequence's first decode step on the 2-core VM (bench/RESULTS.md). Sets
  // larger than a slot (top-p without a top-k cap) get their own heap buffer.
  void kept_storage(int32_t il, int32_t hk, int32_t n);

  SparseStats stats;
  // Tokens of the prompt being prefilled (prefill_tail: which chunks run dense); -1: unknown,
  // every chunk follows the policy.
  int64_t prompt_tokens = -1;

 private:
  PolicyConfig policy_;
  int32_t n_ctx_train_ = 0;
  int32_t n_units_ = 1;
  int32_t head_dim_ = 0;
  int32_t rt_window_ = 0;
  bool plan_ok_ = false;
  int32_t n_kv_head_ = 0;
  std::vector<SparseLayerState> layers_;
  HugeBuffer kept_arena_;  // [n_layer, n_kv_head, 2 (K, V), kept_slot_rows_, head_dim] f16
  int32_t kept_slot_rows_ = 0;
};

// The prefix-cache namespace for a policy: K/V computed under a policy that changes
// attention (anything but dense) must not be served to another policy.
std::string policy_cache_salt(const PolicyConfig& p);

// The sketch projection a policy needs (disabled when it ranks without sketches).
SketchSpec sketch_spec_for(const PolicyConfig& p, const ModelHParams& hp);
// Checks that the store's sketch keys can serve the policy; the error says what to change.
Status check_sketch_compatible(const PolicyConfig& p, const ModelHParams& hp,
                               const SketchSpec& have);

// RTPurbo: the local heads' window for a model: rt_window, or 0 -> n_ctx_train / 4 (at least
// 64; 2048 when the trained context is unknown): SmolLM2 (8K) 2048, Gemma 3 (32K) 8192 - the
// public RTP-LLM window for a 32K-trained model. A 512 window lost every SmolLM2 needle at 8K
// that 2048 keeps (bench/RESULTS.md, issue 7).
int32_t rt_window_for(const PolicyConfig& p, const ModelHParams& hp);
// The policy's head plan exists (the error names `sieve calibrate`) and fits the model's shape.
Status check_head_plan_for(const PolicyConfig& p, const ModelHParams& hp);
// A PCA sketch basis fits the model: same layers, KV heads and head_dim, every full layer fitted.
Status check_sketch_basis_shape(const SketchBasis& b, const ModelHParams& hp);
// Every file a policy names (head plan, sketch basis) fits the model; run before admitting it.
Status check_policy_for_model(const PolicyConfig& p, const ModelHParams& hp);
// KV capacity under a policy: the model's (sliding layers keep their window), and for rtpurbo
// every KV head of a full-attention layer none of whose query heads is a retrieval head keeps
// only rt_sinks + the window (KvCapacity::sliding). One entry per layer when whole layers
// are windowed or kept; one per (layer, KV head) stream when some layer keeps one KV head and
// windows another (kv_binding.h: layout_groups, layout_at).
std::vector<KvCapacity> kv_layout_for(const PolicyConfig* p, const ModelHParams& hp);
// A store laid out as `have` can serve the policy: wherever it keeps only a window, the policy
// reads no more than that window and those sinks; a store with one stream per KV head serves
// head-plan (rtpurbo) policies only. Empty `have`: the model's layout.
Status check_layout_compatible(const PolicyConfig& p, const ModelHParams& hp,
                               const std::vector<KvCapacity>& have);

// The policy's UniPrefill selection layers in this model (uniprefill_layers() over its
// layer kinds): an error when a listed layer does not exist or does not attend fully.
Result<std::vector<int32_t>> uniprefill_layers_for(const PolicyConfig& p, const ModelHParams& hp);
// The same check up front (admission); nothing to check for policies that do not drop.
Status check_uniprefill_layers(const PolicyConfig& p, const ModelHParams& hp);
// The prefill chunk a policy wants for a prompt of n tokens: UniPrefill prefills a long
// prompt in one chunk of up to up_chunk tokens (its importance comes from the prompt's last
// tokens, so chunks only ever select among their own tokens), other policies use n_batch.
int32_t prefill_chunk_for(const PolicyConfig& p, int64_t prompt_tokens, int32_t n_batch);

// Between steps: evicts tokens of every full-attention stream that exceeds the policy's
// budget (h2o / stca), compacting the importance alongside; counts them in sp.stats.
Status sparse_after_step(KvStore& kv, KvSeqId seq, SparseSeq& sp, const ModelHParams& hp);
// KV a sequence holds: the store's pages plus its reused selections' kept rows (keep_rows).
int64_t kv_bytes_held(const KvStore& kv, KvSeqId seq, const SparseSeq* sp);

}  // namespace sieve
