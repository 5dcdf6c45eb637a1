// Device helpers shared by the kernels: element conversion, cp.async, tensor-core
// fragments (ldmatrix / mma.sync / movmatrix), warp reductions, programmatic dependent
// launch, order-preserving float keys, page-table lookups.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kernels/params.h"

namespace sieve::cuda {

constexpr float k_log2e = 1.4426950408889634f;
constexpr unsigned k_full_mask = 0xffffffffu;

// The GPU's nanosecond clock (%globaltimer), for timing breakdowns in benchmarks.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- programmatic dependent launch (sm_90): lets a kernel's CTAs start while its
// predecessor drains; griddep_wait() blocks until the predecessor's writes are visible.
// Both are no-ops when the launch did not ask for it, and on older targets.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// 2^x on the special-function unit (ex2.approx, ~2 ulp; 2^-inf = 0). The softmax paths
// use it: exp2f's extra range handling costs instructions in the inner loops.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---- element types
template <class T>
struct elem;
template <>
struct elem<__nv_bfloat16> {
  static constexpr int bytes = 2;
};
template <>
struct elem<__half> {
  static constexpr int bytes = 2;
};
template <>
struct elem<__nv_fp8_e4m3> {
  static constexpr int bytes = 1;
};
template <>
struct elem<int8_t> {
  static constexpr int bytes = 1;
};

__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 f16x2_to_float2(uint32_t w) {
  __half2 h = *reinterpret_cast<__half2*>(&w);
  return __half22float2(h);
}
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t w) {
  __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w), __NV_E4M3);
  __half2 h = *reinterpret_cast<__half2*>(&hr);
  return __half22float2(h);
}

// Unpack one 32-bit word of T elements (2 for 16-bit types, 4 for 8-bit) into floats.
template <class T>
__device__ __forceinline__ void unpack_word(uint32_t w, float* f);
template <>
__device__ __forceinline__ void unpack_word<__nv_bfloat16>(uint32_t w, float* f) {
  float2 a = bf16x2_to_float2(w);
  f[0] = a.x;
  f[1] = a.y;
}
template <>
__device__ __forceinline__ void unpack_word<__half>(uint32_t w, float* f) {
  float2 a = f16x2_to_float2(w);
  f[0] = a.x;
  f[1] = a.y;
}
template <>
__device__ __forceinline__ void unpack_word<__nv_fp8_e4m3>(uint32_t w, float* f) {
  float2 a = fp8x2_to_float2(static_cast<uint16_t>(w & 0xffffu));
  float2 b = fp8x2_to_float2(static_cast<uint16_t>(w >> 16));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}
template <>
__device__ __forceinline__ void unpack_word<int8_t>(uint32_t w, float* f) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    f[i] = static_cast<float>(static_cast<int8_t>((w >> (8 * i)) & 0xffu));
}

// Load N elements (N * bytes a multiple of 8, 8-byte aligned) and convert to float.
template <class T, int N>
__device__ __forceinline__ void load_row(const T* p, float* f) {
  constexpr int bytes = N * elem<T>::bytes;
  constexpr int per_word = 4 / elem<T>::bytes;
  if constexpr (bytes % 16 == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < bytes / 16; ++i) {
      uint4 u = __ldg(v + i);
      unpack_word<T>(u.x, f + (4 * i + 0) * per_word);
      unpack_word<T>(u.y, f + (4 * i + 1) * per_word);
      unpack_word<T>(u.z, f + (4 * i + 2) * per_word);
      unpack_word<T>(u.w, f + (4 * i + 3) * per_word);
    }
  } else {
    static_assert(bytes % 8 == 0, "rows must be a multiple of 8 bytes");
    const uint2* v = reinterpret_cast<const uint2*>(p);
#pragma unroll
    for (int i = 0; i < bytes / 8; ++i) {
      uint2 u = __ldg(v + i);
      unpack_word<T>(u.x, f + (2 * i + 0) * per_word);
      unpack_word<T>(u.y, f + (2 * i + 1) * per_word);
    }
  }
}

__device__ __forceinline__ float load_as_float(const void* p, dtype t, int64_t i) {
  switch (t) {
    case dtype::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case dtype::f16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case dtype::f32:
      return static_cast<const float*>(p)[i];
    default:
      return 0.f;
  }
}

// ---- cp.async (16 bytes; src_bytes 0 zero-fills, which keeps unread rows finite)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- tensor-core fragments (mma.sync m16n8k16, fp32 accumulate)
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(a));
}
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Pack two floats into the 16-bit type's pair (low half = first).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// ---- reductions
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(k_full_mask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(k_full_mask, v, o));
  return v;
}
// Merge two base-2 softmax states (m, s): result describes the union of their elements.
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  s = s * exp2f(m - mn) + s2 * exp2f(m2 - mn);
  m = mn;
}
__device__ __forceinline__ void warp_merge_ms(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(k_full_mask, m, o);
    const float s2 = __shfl_xor_sync(k_full_mask, s, o);
    merge_ms(m, s, m2, s2);
  }
}

// ---- order-preserving key of a float: a < b  <=>  key(a) < key(b) (as unsigned), with
// -0 < +0; the selection kernels and the CPU references use the same map.
__device__ __forceinline__ uint32_t float_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ---- page tables
// A load the compiler keeps unconditional where its value is only used under a condition
// (a plain load is sunk into the condition, behind the loads the condition needs; ptxas then
// hoists this one to the kernel's first loads). For tables no kernel writes (page tables).
__device__ __forceinline__ int32_t load_eager(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
// last_page_len[b] is read whatever the page count (an entry exists for every sequence), so
// its load goes out beside indptr's instead of after them: one HBM trip less at the start of
// every kernel that needs the length.
__device__ __forceinline__ int seq_len_of(const page_table& pt, int b) {
  const int lpl = load_eager(pt.last_page_len + b);
  const int np = pt.indptr[b + 1] - pt.indptr[b];
  return np == 0 ? 0 : (np - 1) * pt.page_size + lpl;
}
// Page index (within the sequence) and slot of token t.
__device__ __forceinline__ int page_of(const page_table& pt, int t) {
  return pt.page_shift >= 0 ? t >> pt.page_shift : t / pt.page_size;
}
__device__ __forceinline__ int slot_of(const page_table& pt, int t) {
  return pt.page_shift >= 0 ? t & (pt.page_size - 1) : t % pt.page_size;
}
// Physical row (page * page_size + slot) of token t of the sequence whose pages start at
// `first` in pt.indices.
__device__ __forceinline__ int64_t token_row(const page_table& pt, int first, int t) {
  return static_cast<int64_t>(__ldg(pt.indices + first + page_of(pt, t))) * pt.page_size +
         slot_of(pt, t);
}

__host__ __device__ __forceinline__ int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

}  // namespace sieve::cuda
