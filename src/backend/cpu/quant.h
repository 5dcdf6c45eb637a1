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
// Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1, K-quants -> Q8_K, F16 -> F16, BF16 -> BF16, F32 ->
// F32.
GgmlType vec_dot_type(GgmlType weight_type);

// Quantize/convert n f32 activations into vec_dot_type(weight_type); returns bytes written.
size_t quantize_activations(GgmlType weight_type, const float* x, void* dst, int64_t n);
size_t activation_row_bytes(GgmlType weight_type, int64_t n);

// dot(w_row, x) over n elements, x already converted by quantize_activations.
//
// Dot-product order. Every dot product of a weight row and a converted activation row (vec_dot
// of the scalar and AVX2 tables, and every matmul path: decode, tiled GEMM, any tile position,
// any thread count) rounds the same operations in the same order, so all give the same bits.
// That is what makes matmul batch-invariant (an output row never depends on the other rows of
// the call). fma = one rounding; "+0" is positive zero.
//   Quantized: acc = +0; then for each block b (32 elements, K-quants 256) in order:
//       acc = fma(float(I_b), d_w * d_x, acc)       I_b = the block's integer dot, exact int32
//                                                   (Q4_0/Q5_0/Q6_K offsets included,
//                                                   K-quants: sum_j sc_j * dot_j)
//     Q4_1/Q5_1, then: acc = fma(m_w, s_x, acc)      (weight min, activation s, both as f32)
//     Q4_K/Q5_K, then: acc = fma(-float(M_b), dmin_w * d_x, acc),   M_b = sum_j m_j * bsum32_j
//     float(int) rounds to nearest even; d_w * d_x (and dmin_w * d_x) is one rounded product,
//     the fp16 scales taken as f32.
//   Float (F32/F16/BF16; the activations as rounded to the vec_dot_type): for n8 = n - n % 8,
//     a_l = +0 then a_l = fma(w_c, x_c, a_l) for c = l, l + 8, ... < n8 (l = 0..7);
//     s = ((a_0 + a_4) + (a_2 + a_6)) + ((a_1 + a_5) + (a_3 + a_7));
//     then s = fma(w_c, x_c, s) for c = n8 .. n-1.
float vec_dot(GgmlType weight_type, const void* w_row, const void* x_converted, int64_t n);
// Reference: dequantize the weight row and accumulate in double against f32 activations.
double vec_dot_ref(GgmlType weight_type, const void* w_row, const float* x, int64_t n);

}  // namespace sieve
