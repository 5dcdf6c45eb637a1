// Test-only: a paged f16 KV head with random contents, read through a KvHeadView
// (attention_test.cpp, and the engine's tests of attention options).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/fp16.h"

namespace sieve {

// A paged KV head with awkward sizes, random contents; token j at position
// first_pos + j * pos_stride.
struct PagedHead {
  int d, page_size, n_tokens;
  std::vector<std::vector<uint16_t>> kp, vp;
  std::vector<const uint16_t*> kptr, vptr;
  std::vector<int32_t> pos;
  std::vector<const int32_t*> pos_ptr;
  int heads = 1;  // KV heads interleaved in a page's rows as in the KV store; this is head 0
  PagedHead(int d_, int ps, int n, std::mt19937& rng, int pos_stride = 1, int first_pos = 3,
            int heads_ = 1)
      : d(d_), page_size(ps), n_tokens(n), heads(heads_) {
    std::normal_distribution<float> nd(0, 1);
    const int n_pages = (n + ps - 1) / ps;
    kp.resize(n_pages);
    vp.resize(n_pages);
    for (int p = 0; p < n_pages; ++p) {
      kp[p].resize(static_cast<size_t>(ps) * d * heads);
      vp[p].resize(static_cast<size_t>(ps) * d * heads);
      for (auto& x : kp[p]) x = f32_to_fp16(nd(rng));
      for (auto& x : vp[p]) x = f32_to_fp16(nd(rng));
      kptr.push_back(kp[p].data());
      vptr.push_back(vp[p].data());
    }
    pos.resize(static_cast<size_t>(n_pages) * ps);
    for (int j = 0; j < n; ++j) pos[j] = j * pos_stride + first_pos;
    for (int p = 0; p < n_pages; ++p) pos_ptr.push_back(pos.data() + static_cast<size_t>(p) * ps);
  }
  KvHeadView view() const {
    KvHeadView v;
    v.k_pages = kptr.data();
    v.v_pages = vptr.data();
    v.page_size = page_size;
    v.row_stride = static_cast<int64_t>(d) * heads;
    v.n_tokens = n_tokens;
    v.pos_pages = pos_ptr.data();
    return v;
  }
};

}  // namespace sieve
