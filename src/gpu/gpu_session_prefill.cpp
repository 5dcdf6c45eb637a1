// The dense prefill kernel of a session: ours or cuDNN's fused attention, timed at start.
#include "gpu/gpu_session_impl.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>

#include "core/log.h"

namespace sieve {
using namespace gpu_internal;

// One chunk of n queries against n keys of the first full layer (zeroed: timing only), best of 3.
Status GpuSession::Impl::time_prefill(bool with_cudnn, int32_t n, float& us) {
  const int il = first_full_layer();
  const int32_t q_rows = std::min(n, max_chunk());
  set_io_head(n, q_rows);
  SIEVE_TRY(cuda_check(cudaMemcpyAsync(io_dev, io_host, k_io_head * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                       "copy"));
  const bool keep = use_cudnn;
  use_cudnn = with_cudnn;
  cudaEvent_t ev[2];
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[0]), "event"));
  SIEVE_TRY(cuda_check(cudaEventCreate(&ev[1]), "event"));
  Status st;
  us = 1e30f;
  for (int rep = 0; rep < 4 && st; ++rep) {  // the first run warms up
    float ms = 0;
    st = cuda_check(cudaEventRecord(ev[0], stream), "event");
    if (st) st = attention(il, q_rows, false);
    if (st) st = cuda_check(cudaEventRecord(ev[1], stream), "event");
    if (st) st = cuda_check(cudaEventSynchronize(ev[1]), "prefill probe");
    if (st) st = cuda_check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "event");
    if (st && rep > 0) us = std::min(us, ms * 1000.f);
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  use_cudnn = keep;
  return st;
}

// SIEVE_GPU_PREFILL=auto (or unset) | sieve | cudnn; like vLLM's VLLM_ATTENTION_BACKEND.
Status GpuSession::Impl::choose_prefill_kernel() {
  const char* env = std::getenv("SIEVE_GPU_PREFILL");
  const std::string want = env ? env : "auto";
  if (want != "auto" && want != "sieve" && want != "cudnn") {
    return make_error("SIEVE_GPU_PREFILL={}: use auto (time both), sieve or cudnn", want);
  }
  prefill_kernel = want == "sieve" ? "sieve (SIEVE_GPU_PREFILL=sieve)" : "sieve";
  // every policy prefills some chunks densely (a sparse one until its selection starts)
  if (want == "sieve" || n_full_layers() == 0) return {};
  cuda::cudnn_prefill_shape sh;
  sh.n_q_heads = hp.n_head;
  sh.n_kv_heads = hp.n_head_kv;
  sh.head_dim = hp.head_dim;
  sh.max_q = max_chunk();
  sh.max_kv = std::max(max_ctx, max_chunk());
  sh.scale = hp.attn_scale;
  auto plan = cuda::CudnnPrefill::create(sh, stream);
  if (!plan && want == "cudnn") return make_error("SIEVE_GPU_PREFILL=cudnn: {}", plan.message());
  if (!plan) {
    prefill_kernel = fmt::format("sieve (cuDNN unavailable: {})", plan.message());
    return {};
  }
  cudnn = std::move(*plan);
  if (want == "cudnn") {
    use_cudnn = true;
    prefill_kernel = "cuDNN (SIEVE_GPU_PREFILL=cudnn)";
    return {};
  }
  // A chunk that sees 16K keys (or the whole context): zeroed K/V, queries and their lengths.
  const int32_t n = std::min(max_ctx, 16384);
  const int il = first_full_layer();
  const size_t kv_bytes = static_cast<size_t>(n) * hp.kv_dim() * sizeof(bf16);
  SIEVE_TRY(cuda_check(cudaMemsetAsync(layers[il].k, 0, kv_bytes, stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(layers[il].v, 0, kv_bytes, stream), "memset"));
  SIEVE_TRY(cuda_check(cudaMemsetAsync(q, 0, static_cast<size_t>(max_chunk()) * hp.q_dim() * sizeof(bf16), stream),
                       "memset"));
  float ours = 0, theirs = 0;
  SIEVE_TRY(time_prefill(false, n, ours));
  const Status timed = time_prefill(true, n, theirs);
  if (!timed) {  // cuDNN failed on this device: keep ours and say why
    (void)cudaGetLastError();
    cudnn.reset();
    prefill_kernel = fmt::format("sieve (cuDNN failed: {})", timed.message());
    return {};
  }
  use_cudnn = theirs < 0.95f * ours;  // ours unless cuDNN is clearly faster
  if (!use_cudnn) cudnn.reset();
  auto version = cuda::cudnn_version();
  prefill_kernel = fmt::format("{} ({}-query chunk over {} keys: sieve {:.0f} us, cuDNN {} {:.0f} us)",
                               use_cudnn ? "cuDNN" : "sieve", std::min(n, max_chunk()), n, ours,
                               version ? *version : "?", theirs);
  return {};
}

}  // namespace sieve
