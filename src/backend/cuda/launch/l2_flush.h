// Benchmark helper: evict L2 by reading a large buffer. A read leaves clean lines, so the
// timed kernel that follows pays no write-backs of someone else's dirty data (a memset
// flush made every small timing pay up to ~60 MB of write-backs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sieve::cuda {

// Reads `bytes` (multiple of 16) from p; writes one word per CTA to sink[0..1023].
cudaError_t launch_l2_flush_read(const void* p, int64_t bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace sieve::cuda
