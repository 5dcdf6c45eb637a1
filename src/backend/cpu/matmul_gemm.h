// Internal to matmul: the AVX2 integer GEMM for quantized weights (prefill, m > 1).
//
// Activations are quantized exactly as for vec_dot (same bytes), then regrouped 8 rows at a
// time with 4-byte slices interleaved: one 32-byte load holds elements 4k..4k+3 of 8 rows.
// A weight row is unpacked once per tile to unsigned bytes; broadcasting 4 of its bytes and
// one maddubs against the interleaved activations gives 8 rows' partial dots at once, so the
// per-block float work (convert, scale, accumulate) is shared by 8 activation rows and each
// unpacked weight block is used by every activation row of the tile.
//
// Every kernel here computes each output in the dot-product order of quant.h (lanes are
// independent, so neither the tile shape, a row's lane or group, nor the thread split changes
// a bit): the GEMM, the decode kernels and vec_dot agree exactly (batch invariance).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_kernels.h"
#include "core/ggml_type.h"

namespace sieve::cpu {

constexpr int kGemmGroupRows = 8;

// Quantized weight types the integer GEMM handles.
bool gemm_q8_supported(GgmlType weight_type);

// Bytes of one packed group of 8 activation rows over n_cols.
size_t gemm_group_bytes(GgmlType weight_type, int64_t n_cols);

// Regroups `rows` (1..8) activation rows, already converted by the weight type's quantize
// kernel (ggml layout, row stride xq_stride bytes), into one packed group; absent rows are 0.
void gemm_pack_group(GgmlType weight_type, const uint8_t* xq, size_t xq_stride, int rows,
                     int64_t n_cols, uint8_t* dst);

// Weight rows per tile (thread ranges are split at multiples of it).
int gemm_tile_rows();

// Per-thread scratch for the unpacked weight tile.
size_t gemm_tile_scratch_bytes(GgmlType weight_type, int64_t n_cols);

// y[i * ldy + r] = dot(W row r, activation row i) for r in [r_begin, r_end), i < m.
// w: [n_rows, n_cols] raw GGUF rows; packed: ceil(m / 8) groups from gemm_pack_group.
void gemm_rows_avx2(GgmlType weight_type, const uint8_t* w, int64_t n_cols, int64_t r_begin,
                    int64_t r_end, const uint8_t* packed, int64_t m, float* y, int64_t ldy,
                    uint8_t* tile_scratch);

// Float weights (F32/F16/BF16 dequantized to f32): y[i * ldy + r] = dot(wf row r, xf row i)
// for r < rr (1..4), i < m. wf: [rr, n]; xf: [m, n], already rounded to the weight's
// vec_dot_type so the products equal ggml's. Float dot-product order of quant.h.
constexpr int kFloatTileRows = 4;
void gemm_f32_rows_avx2(const float* wf, int rr, const float* xf, int64_t m, int64_t n, float* y,
                        int64_t ldy);

// Decode (m == 1). The activation row is prepared once (gemv_prepare, k = the weight type's
// AVX2 kernels), then weight rows are dotted 8 at a time. Legacy types get the split layout
// their row kernels want; K-quants use the Q8_K row and vec_dot. Every value equals the
// GEMM's for the same activation row, bit for bit (the dot-product order of quant.h).
size_t gemv_act_bytes(GgmlType weight_type, int64_t n_cols);
void gemv_prepare(GgmlType weight_type, const float* x, int64_t n_cols, uint8_t* dst,
                  const QuantKernels& k);
// y[r] for r in [r_begin, r_end) of a matrix of n_rows rows (rows outside the range may be
// read, never written). Ranges starting at multiples of 8 run fastest.
void gemv_rows_avx2(GgmlType weight_type, const uint8_t* w, int64_t n_cols, int64_t n_rows,
                    int64_t r_begin, int64_t r_end, const uint8_t* act, float* y,
                    const QuantKernels& k);

// Float weights at m == 1: y[r] = dot(W row r, xf) for r in [r_begin, r_end), read straight
// from the F32/F16/BF16 rows; bit-identical to gemm_f32_rows_avx2 on the dequantized rows.
void gemv_float_rows_avx2(GgmlType weight_type, const uint8_t* w, int64_t n_cols, int64_t r_begin,
                          int64_t r_end, const float* xf, float* y);

// matmul() / matmul_multi() with the SIMD path chosen by the caller (tests run both paths on
// one machine).
void matmul_isa(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                MatmulScratch& scratch, bool avx2);
void matmul_multi_isa(const MatmulTarget* targets, int n_targets, const float* x, int64_t m,
                      ThreadPool& pool, MatmulScratch& scratch, bool avx2);

}  // namespace sieve::cpu
