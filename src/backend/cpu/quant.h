// Quantized block formats (GGUF/ggml layouts, docs/shared reference §2): dequantization,
// activation quantization and fused dot products. Each fast path (AVX2, chosen at run time)
// has a scalar reference that the tests compare against on random blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace sieve {

// Dequantize n elements (a multiple of the block size) of type t.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Scalar reference of the same (tests; never the fast path).
void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n);

// Which activation format a weight type's dot product consumes (ggml's vec_dot_type):
// Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K, F16 -> F16, BF16 -> BF16, F32 -> F32.
GgmlType vec_dot_type(GgmlType weight_type);

// Quantize/convert n f32 activations into vec_dot_type(weight_type); returns bytes written.
size_t quantize_activations(GgmlType weight_type, const float* x, void* dst, int64_t n);
size_t activation_row_bytes(GgmlType weight_type, int64_t n);

// dot(w_row, x) over n elements, x already converted by quantize_activations.
float vec_dot(GgmlType weight_type, const void* w_row, const void* x_converted, int64_t n);
// Reference: dequantize the weight row and accumulate in double against f32 activations.
double vec_dot_ref(GgmlType weight_type, const void* w_row, const float* x, int64_t n);

}  // namespace sieve
