// cuDNN's fused attention (SDPA) for a dense prefill chunk, through the cuDNN frontend with
// cuDNN loaded at run time (dlopen "libcudnn.so.9"): the binary needs no cuDNN to start, and a
// machine without it reports why and keeps our prefill kernel.
//
// One plan serves every chunk of a sequence: the graph is built for at most max_q queries
// against at most max_kv keys, and the real lengths are read on the device (a padding mask
// with seq_len tensors), with a bottom-right causal mask (the queries are the newest tokens).
// K/V are read in our layout [pages, page_size, n_kv_heads, head_dim], bf16, either through
// the page table (paged) or as one contiguous run of max_kv rows starting at k / v (the pages
// in order, as the GPU session allocates them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/result.h"

namespace sieve::cuda {

struct cudnn_prefill_shape {
  int32_t n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
  int32_t max_q = 0;      // queries per chunk at most (the graph's s_q)
  int32_t max_kv = 0;     // keys at most (the graph's s_kv)
  int32_t page_size = 0;  // paged: tokens per page
  int32_t n_pages = 0;    // paged: pages in the pool (the K/V containers' first dimension)
  bool paged = false;
  float scale = 0.f;
};

// Device pointers of one call. seq_q / seq_kv: one int32 each, 16-byte aligned, holding the
// chunk's query count and the keys it sees (the chunk included).
struct cudnn_prefill_args {
  const void* q = nullptr;  // [seq_q, n_q_heads, head_dim] bf16
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* page_list =
      nullptr;  // paged: the sequence's pages in order, max_kv / page_size of them
  const int32_t* seq_q = nullptr;
  const int32_t* seq_kv = nullptr;
  void* o = nullptr;  // [seq_q, n_q_heads, head_dim] bf16
};

class CudnnPrefill {
 public:
  // Loads cuDNN (once per process), builds and checks the plan; an error names what is missing
  // (cuDNN not found, the frontend headers not built in, the shape unsupported).
  static Result<std::unique_ptr<CudnnPrefill>> create(const cudnn_prefill_shape& shape,
                                                      cudaStream_t stream);
  ~CudnnPrefill();
  CudnnPrefill(const CudnnPrefill&) = delete;
  CudnnPrefill& operator=(const CudnnPrefill&) = delete;

  // Enqueues the attention on the stream given at create; no synchronisation.
  Status run(const cudnn_prefill_args& a);
  const cudnn_prefill_shape& shape() const;
  int64_t workspace_bytes() const;

  struct Impl;

 private:
  explicit CudnnPrefill(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The cuDNN library version loaded ("9.19.0"), or why none is usable.
Result<std::string> cudnn_version();

}  // namespace sieve::cuda
