#include "engine/kv_cache.h"

#include <algorithm>

namespace sieve {

ContiguousKv::ContiguousKv(const ModelHParams& hp, int32_t n_ctx)
    : n_layer_(hp.n_layer), row_elems_(hp.kv_dim()), head_dim_(hp.head_dim), n_ctx_(n_ctx) {
  k_.resize(n_layer_);
  v_.resize(n_layer_);
  kp_.resize(static_cast<size_t>(n_layer_) * hp.n_head_kv);
  vp_.resize(kp_.size());
}

Status ContiguousKv::reserve(int32_t n_new) {
  const int64_t need = static_cast<int64_t>(n_tokens_) + n_new;
  if (need > n_ctx_) {
    return make_error("context is full: {} tokens stored + {} new > context size {}", n_tokens_,
                      n_new, n_ctx_);
  }
  if (need <= capacity_) return {};
  const int32_t cap = static_cast<int32_t>(std::min<int64_t>(n_ctx_, std::max<int64_t>(need, 2LL * capacity_)));
  for (int l = 0; l < n_layer_; ++l) {
    k_[l].resize(static_cast<size_t>(cap) * row_elems_);
    v_[l].resize(static_cast<size_t>(cap) * row_elems_);
  }
  pos_.resize(cap);
  capacity_ = cap;
  return {};
}

uint16_t* ContiguousKv::k_row(int layer, int32_t index) {
  return k_[layer].data() + static_cast<size_t>(index) * row_elems_;
}
uint16_t* ContiguousKv::v_row(int layer, int32_t index) {
  return v_[layer].data() + static_cast<size_t>(index) * row_elems_;
}

void ContiguousKv::commit(const int32_t* positions, int32_t n) {
  std::copy(positions, positions + n, pos_.begin() + n_tokens_);
  n_tokens_ += n;
}

KvHeadView ContiguousKv::view(int layer, int kv_head) {
  const size_t slot = static_cast<size_t>(layer) * (row_elems_ / head_dim_) + kv_head;
  kp_[slot] = k_[layer].data() + static_cast<size_t>(kv_head) * head_dim_;
  vp_[slot] = v_[layer].data() + static_cast<size_t>(kv_head) * head_dim_;
  KvHeadView v;
  v.k_pages = &kp_[slot];
  v.v_pages = &vp_[slot];
  v.page_size = std::max(1, capacity_);
  v.row_stride = row_elems_;
  v.n_tokens = n_tokens_;
  v.pos = pos_.data();
  return v;
}

int64_t ContiguousKv::bytes() const {
  return static_cast<int64_t>(n_tokens_) * row_elems_ * 2 * 2 * n_layer_;
}

void ContiguousKv::truncate(int32_t n) { n_tokens_ = std::min(n_tokens_, std::max(0, n)); }

}  // namespace sieve
