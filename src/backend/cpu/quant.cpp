// Public quant.h API: run-time dispatch between the scalar and AVX2 kernel tables.
#include "backend/cpu/quant.h"

#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "core/assert.h"
#include "core/cpu_features.h"

namespace sieve {

namespace cpu {

bool has_avx2_kernels() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const CpuFeatures& c = cpu_features();
  return c.avx2 && c.fma && c.f16c;
#else
  return false;
#endif
}

QuantKernels quant_kernels(GgmlType t) {
  return use_avx2() ? quant_kernels_avx2(t) : quant_kernels_scalar(t);
}

}  // namespace cpu

GgmlType vec_dot_type(GgmlType w) {
  switch (w) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return GgmlType::Q8_K;
    case GgmlType::F16:
      return GgmlType::F16;
    case GgmlType::BF16:
      return GgmlType::BF16;
    case GgmlType::F32:
      return GgmlType::F32;
    default:
      break;
  }
  SIEVE_ASSERT(false && "unsupported weight type");
  return GgmlType::F32;
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  SIEVE_ASSERT(n % cpu::block_elems(t) == 0);
  cpu::quant_kernels(t).dequantize(src, dst, n);
}

void dequantize_row_ref(GgmlType t, const void* src, float* dst, int64_t n) {
  SIEVE_ASSERT(n % cpu::block_elems(t) == 0);
  cpu::quant_kernels_scalar(t).dequantize(src, dst, n);
}

size_t activation_row_bytes(GgmlType weight_type, int64_t n) {
  return static_cast<size_t>(row_bytes(vec_dot_type(weight_type), n));
}

size_t quantize_activations(GgmlType weight_type, const float* x, void* dst, int64_t n) {
  SIEVE_ASSERT(n % cpu::block_elems(vec_dot_type(weight_type)) == 0);
  cpu::quant_kernels(weight_type).quantize(x, dst, n);
  return activation_row_bytes(weight_type, n);
}

float vec_dot(GgmlType weight_type, const void* w_row, const void* x_converted, int64_t n) {
  return cpu::quant_kernels(weight_type).vec_dot(w_row, x_converted, n);
}

double vec_dot_ref(GgmlType weight_type, const void* w_row, const float* x, int64_t n) {
  std::vector<float> w(static_cast<size_t>(n));
  dequantize_row_ref(weight_type, w_row, w.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * x[i];
  return s;
}

}  // namespace sieve
