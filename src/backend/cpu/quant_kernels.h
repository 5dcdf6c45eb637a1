// Per-ISA kernel tables behind quant.h. The public functions dispatch through quant_kernels();
// matmul fetches the table once per call; tests call the scalar and AVX2 tables directly so
// both paths are checked on every machine that has AVX2 (SIEVE_SIMD=scalar only selects).
#pragma once

#include <cstdint>

#include "core/ggml_type.h"

namespace sieve::cpu {

using dequantize_fn = void (*)(const void* src, float* dst, int64_t n);
// f32 activations -> the weight type's vec_dot_type (ggml block layout).
using quantize_fn = void (*)(const float* x, void* dst, int64_t n);
// dot(weight row, converted activations) over n elements.
using vec_dot_fn = float (*)(const void* w, const void* x, int64_t n);

struct QuantKernels {
  dequantize_fn dequantize = nullptr;
  quantize_fn quantize = nullptr;
  vec_dot_fn vec_dot = nullptr;
};

// Kernels of a supported weight type (all entries set); asserts on others.
QuantKernels quant_kernels_scalar(GgmlType weight_type);
// AVX2+FMA+F16C versions; only call when cpu_features() has them (has_avx2_kernels()).
QuantKernels quant_kernels_avx2(GgmlType weight_type);
bool has_avx2_kernels();
// use_avx2() ? AVX2 : scalar.
QuantKernels quant_kernels(GgmlType weight_type);

// True for the weight types quant.h implements (F32, F16, BF16, Q4_0..Q8_0, Q4_K..Q6_K).
bool is_supported_weight_type(GgmlType t);
// Elements per block of the weight type's activation format (1, 32 or 256).
int64_t block_elems(GgmlType t);

}  // namespace sieve::cpu
