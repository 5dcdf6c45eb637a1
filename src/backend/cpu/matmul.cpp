// matmul driver: converts the activations once, then splits W's rows across the pool.
//   m == 1 (decode), quantized W, AVX2: prepared activation row + row kernels (gemv).
//   m > 1, quantized W, AVX2: the tiled integer GEMM (matmul_gemm.h).
//   m == 1, float W, AVX2: f32 FMA over the rows in place (F16/BF16 converted on the fly).
//   m > 1, float W, AVX2: W rows dequantized 4 at a time, f32 FMA tiles.
//   SIEVE_SIMD=scalar or no AVX2: vec_dot per (weight row, activation row), weight row
//   outermost so it stays in L1 across the activation rows.
// matmul_multi runs several products of one input in the same two pool jobs (convert, compute).
//
// Batch invariance: every path computes each y[i, r] in the dot-product order of quant.h
// (the same rounded operations in the same order, whatever m, the row's position in a tile or
// group, the tail handling or the thread count), and the activation conversion of a row
// depends on that row only. So a row of a batched call equals, bit for bit, the same row
// computed alone (decode), and the AVX2 and scalar paths agree bit for bit too.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "core/assert.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace sieve {
namespace {

constexpr size_t kAlign = 64;
// Below this many weight bytes in one job, waking the other threads costs more than it saves.
constexpr size_t kMinParallelBytes = 32 * 1024;

size_t round_up(size_t n) {
  return (n + kAlign - 1) & ~(kAlign - 1);
}

// Hands out 64-byte aligned regions of the scratch vector (grown when needed, then reused).
class Carver {
 public:
  Carver(MatmulScratch& s, size_t total) {
    if (s.buf.size() < total + kAlign) s.buf.resize(total + kAlign);
    const auto addr = reinterpret_cast<uintptr_t>(s.buf.data());
    p_ = s.buf.data() + ((kAlign - addr % kAlign) % kAlign);
  }
  uint8_t* take(size_t bytes) {
    uint8_t* r = p_;
    p_ += round_up(bytes);
    return r;
  }

 private:
  uint8_t* p_;
};

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// [begin, end) of part t of nt of [0, n), boundaries at multiples of `unit`.
std::pair<int64_t, int64_t> split(int64_t n, int64_t unit, int t, int nt) {
  const int64_t units = (n + unit - 1) / unit;
  const int64_t b = std::min(n, units * t / nt * unit);
  const int64_t e = std::min(n, units * (t + 1) / nt * unit);
  return {b, e};
}

size_t weight_bytes(const WeightView& w) {
  return static_cast<size_t>(row_bytes(w.type, w.n_cols)) * w.n_rows;
}

// Runs fn(thread, n_threads) on the pool, or on the caller alone for small jobs.
template <class F>
void run_job(ThreadPool& pool, size_t bytes, F&& fn) {
  if (bytes < kMinParallelBytes || pool.size() == 1) {
    fn(0, 1);
  } else {
    pool.run(fn);
  }
}

// ------------------------------------------------------------------ quantized, m > 1

void multi_gemm(const MatmulTarget* ts, const std::vector<int>& idx, const float* x, int64_t m,
                int64_t n, ThreadPool& pool, MatmulScratch& scratch) {
  // One packed copy per activation format (Q8_0 / Q8_1 / Q8_K pairing); its first target's
  // type stands for the format when packing.
  struct Format {
    GgmlType rep;
    cpu::QuantKernels k;
    size_t act_row, gbytes;
    uint8_t* packed;
  };
  std::vector<Format> formats;
  std::vector<int> fmt_of(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    const GgmlType t = ts[idx[j]].w.type;
    int f = 0;
    while (f < static_cast<int>(formats.size()) && vec_dot_type(formats[f].rep) != vec_dot_type(t))
      ++f;
    if (f == static_cast<int>(formats.size())) {
      formats.push_back({t, cpu::quant_kernels_avx2(t), activation_row_bytes(t, n),
                         cpu::gemm_group_bytes(t, n), nullptr});
    }
    fmt_of[j] = f;
  }
  const int64_t n_groups = (m + cpu::kGemmGroupRows - 1) / cpu::kGemmGroupRows;
  const int nt = pool.size();
  size_t tmp_bytes = 0, tile_bytes = 0, total = 0;
  for (const Format& f : formats) {
    tmp_bytes = std::max(tmp_bytes, round_up(cpu::kGemmGroupRows * f.act_row));
    total += round_up(n_groups * f.gbytes);
  }
  for (int i : idx)
    tile_bytes = std::max(tile_bytes, round_up(cpu::gemm_tile_scratch_bytes(ts[i].w.type, n)));
  const size_t per_thread_bytes = tmp_bytes + tile_bytes;
  Carver c(scratch, total + nt * per_thread_bytes);
  for (Format& f : formats) f.packed = c.take(n_groups * f.gbytes);
  uint8_t* per_thread = c.take(nt * per_thread_bytes);

  // Quantize (the bytes vec_dot would see) and regroup 8 rows at a time, per format.
  pool.run([&](int ti, int tn) {
    uint8_t* tmp = per_thread + ti * per_thread_bytes;
    const auto [gb, ge] = split(n_groups, 1, ti, tn);
    for (const Format& f : formats) {
      for (int64_t g = gb; g < ge; ++g) {
        const int rows =
            static_cast<int>(std::min<int64_t>(cpu::kGemmGroupRows, m - g * cpu::kGemmGroupRows));
        for (int i = 0; i < rows; ++i)
          f.k.quantize(x + (g * cpu::kGemmGroupRows + i) * n, tmp + i * f.act_row, n);
        cpu::gemm_pack_group(f.rep, tmp, f.act_row, rows, n, f.packed + g * f.gbytes);
      }
    }
  });

  // Every thread takes its share of the rows of every product.
  pool.run([&](int ti, int tn) {
    uint8_t* tile = per_thread + ti * per_thread_bytes + tmp_bytes;
    for (size_t j = 0; j < idx.size(); ++j) {
      const MatmulTarget& tg = ts[idx[j]];
      const auto [rb, re] = split(tg.w.n_rows, cpu::gemm_tile_rows(), ti, tn);
      if (rb < re) {
        cpu::gemm_rows_avx2(tg.w.type, static_cast<const uint8_t*>(tg.w.data), n, rb, re,
                            formats[fmt_of[j]].packed, m, tg.y, tg.w.n_rows, tile);
      }
    }
  });
}

// ------------------------------------------------------------------ quantized, m == 1

// The targets' 8-row groups are split as one sequence, weighted by bytes, so a thread's share
// does not round up once per target: SmolLM2's q, k and v are 72 + 24 + 24 groups, which split
// one target at a time gave 9 groups to half of 16 threads and 6 to the others (the job lasts
// as long as its largest share). A row's value does not depend on which thread computes it
// (gemv_rows_avx2's lanes are independent), so every split gives the same result.
constexpr int64_t kGemvRows = 8;

int64_t n_groups(const WeightView& w) {
  return (w.n_rows + kGemvRows - 1) / kGemvRows;
}

int64_t group_cost(const WeightView& w) {
  return static_cast<int64_t>(row_bytes(w.type, w.n_cols)) * kGemvRows;
}

// Of a target whose groups start at cost `base` (cg bytes each, g of them), the first group
// that part t of tn of `total` begins at or before: its start cost (base + k cg) >= t total /
// tn, compared as integers (times tn). Part tn's boundary is g for every target.
int64_t first_group_at(int64_t total, int t, int tn, int64_t base, int64_t cg, int64_t g) {
  const int64_t num = total * t - base * tn;
  if (num <= 0) return 0;
  const int64_t den = cg * tn;
  return std::min(g, (num + den - 1) / den);
}

void multi_gemv(const MatmulTarget* ts, const std::vector<int>& idx, const float* x, int64_t n,
                ThreadPool& pool, MatmulScratch& scratch) {
  // The prepared row depends on the weight type (Q4_0 and Q5_0 offsets differ): one per type.
  struct Prep {
    GgmlType t;
    cpu::QuantKernels k;
    uint8_t* act;
  };
  std::vector<Prep> preps;
  std::vector<int> prep_of(idx.size());
  size_t total = 0, bytes = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    const GgmlType t = ts[idx[j]].w.type;
    int p = 0;
    while (p < static_cast<int>(preps.size()) && preps[p].t != t) ++p;
    if (p == static_cast<int>(preps.size())) {
      preps.push_back({t, cpu::quant_kernels_avx2(t), nullptr});
      total += round_up(cpu::gemv_act_bytes(t, n));
    }
    prep_of[j] = p;
    bytes += weight_bytes(ts[idx[j]].w);
  }
  Carver c(scratch, total);
  // A few hundred ns per row of activations: done by the caller, not worth a pool job.
  for (Prep& p : preps) {
    p.act = c.take(cpu::gemv_act_bytes(p.t, n));
    cpu::gemv_prepare(p.t, x, n, p.act, p.k);
  }
  int64_t cost = 0;  // every target's groups, in bytes
  for (int i : idx) cost += n_groups(ts[i].w) * group_cost(ts[i].w);
  run_job(pool, bytes, [&](int ti, int tn) {
    int64_t base = 0;  // the earlier targets' groups, in bytes
    for (size_t j = 0; j < idx.size(); ++j) {
      const MatmulTarget& tg = ts[idx[j]];
      const Prep& p = preps[prep_of[j]];
      const int64_t cg = group_cost(tg.w), g = n_groups(tg.w);
      const int64_t rb = first_group_at(cost, ti, tn, base, cg, g) * kGemvRows;
      const int64_t re =
          std::min(tg.w.n_rows, first_group_at(cost, ti + 1, tn, base, cg, g) * kGemvRows);
      base += g * cg;
      if (rb < re)
        cpu::gemv_rows_avx2(p.t, static_cast<const uint8_t*>(tg.w.data), n, tg.w.n_rows, rb, re,
                            p.act, tg.y, p.k);
    }
  });
}

// ------------------------------------------------------------------ float weights, m == 1

void float_gemv(const WeightView& w, const float* x, float* y, ThreadPool& pool,
                MatmulScratch& scratch) {
  const GgmlType t = w.type;
  const int64_t n = w.n_cols;
  Carver c(scratch, round_up(activation_row_bytes(t, n)) + round_up(n * sizeof(float)));
  uint8_t* conv = c.take(activation_row_bytes(t, n));
  auto* xf = reinterpret_cast<float*>(c.take(n * sizeof(float)));
  // Rounded to the vec_dot_type and back, exactly as float_gemm does.
  cpu::quant_kernels_avx2(t).quantize(x, conv, n);
  cpu::quant_kernels_avx2(vec_dot_type(t)).dequantize(conv, xf, n);
  run_job(pool, weight_bytes(w), [&](int ti, int tn) {
    const auto [rb, re] = split(w.n_rows, 4, ti, tn);
    if (rb < re)
      cpu::gemv_float_rows_avx2(t, static_cast<const uint8_t*>(w.data), n, rb, re, xf, y);
  });
}

// ------------------------------------------------------------------ float weights, m > 1

void float_gemm(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                MatmulScratch& scratch) {
  const GgmlType t = w.type;
  const cpu::QuantKernels k = cpu::quant_kernels_avx2(t);
  const cpu::QuantKernels conv_back = cpu::quant_kernels_avx2(vec_dot_type(t));
  const int64_t n = w.n_cols;
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  const int nt = pool.size();
  const size_t conv_row = round_up(activation_row_bytes(t, n));
  const size_t tile_bytes = round_up(cpu::kFloatTileRows * n * sizeof(float));
  Carver c(scratch, round_up(m * n * sizeof(float)) + nt * (conv_row + tile_bytes));
  auto* xf = reinterpret_cast<float*>(c.take(m * n * sizeof(float)));
  uint8_t* per_thread = c.take(nt * (conv_row + tile_bytes));

  // Activations rounded to the weight's vec_dot_type (F16/BF16) as ggml does, kept as f32.
  pool.run([&](int ti, int tn) {
    uint8_t* conv = per_thread + ti * (conv_row + tile_bytes);
    const auto [ib, ie] = split(m, 1, ti, tn);
    for (int64_t i = ib; i < ie; ++i) {
      k.quantize(x + i * n, conv, n);
      conv_back.dequantize(conv, xf + i * n, n);
    }
  });

  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.run([&](int ti, int tn) {
    auto* wf = reinterpret_cast<float*>(per_thread + ti * (conv_row + tile_bytes) + conv_row);
    const auto [rb, re] = split(w.n_rows, cpu::kFloatTileRows, ti, tn);
    for (int64_t r0 = rb; r0 < re; r0 += cpu::kFloatTileRows) {
      const int rr = static_cast<int>(std::min<int64_t>(cpu::kFloatTileRows, re - r0));
      for (int r = 0; r < rr; ++r) k.dequantize(wdata + (r0 + r) * wrow, wf + r * n, n);
      cpu::gemm_f32_rows_avx2(wf, rr, xf, m, n, y + r0, w.n_rows);
    }
  });
}

// ------------------------------------------------------------------ generic: vec_dot

void vec_dot_path(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                  MatmulScratch& scratch, const cpu::QuantKernels& k) {
  const int64_t n = w.n_cols;
  const size_t act_row = activation_row_bytes(w.type, n);
  const size_t wrow = static_cast<size_t>(row_bytes(w.type, n));
  Carver c(scratch, round_up(m * act_row));
  uint8_t* xq = c.take(m * act_row);
  if (m == 1) {
    k.quantize(x, xq, n);
  } else {
    pool.parallel_for(m, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) k.quantize(x + i * n, xq + i * act_row, n);
    });
  }
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const int64_t n_rows = w.n_rows;
  const int64_t grain =
      std::max<int64_t>(1, static_cast<int64_t>(kMinParallelBytes / std::max<size_t>(wrow, 1)));
  pool.parallel_for(n_rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const uint8_t* wr = wdata + r * wrow;
      for (int64_t i = 0; i < m; ++i) y[i * n_rows + r] = k.vec_dot(wr, xq + i * act_row, n);
    }
  });
}

void check_weight(const WeightView& w) {
  SIEVE_ASSERT(cpu::is_supported_weight_type(w.type));
  SIEVE_ASSERT(w.n_cols % cpu::block_elems(w.type) == 0);
  SIEVE_ASSERT(w.n_cols % cpu::block_elems(vec_dot_type(w.type)) == 0);
}

}  // namespace

namespace cpu {

void matmul_multi_isa(const MatmulTarget* ts, int n_targets, const float* x, int64_t m,
                      ThreadPool& pool, MatmulScratch& scratch, bool avx2) {
  SIEVE_ASSERT(!avx2 || has_avx2_kernels());
  if (m <= 0 || n_targets <= 0) return;
  const int64_t n = ts[0].w.n_cols;
  std::vector<int> quantized;
  for (int j = 0; j < n_targets; ++j) {
    check_weight(ts[j].w);
    SIEVE_ASSERT(ts[j].w.n_cols == n);
    if (ts[j].w.n_rows <= 0) continue;
    if (avx2 && !is_float_type(ts[j].w.type) && gemm_q8_supported(ts[j].w.type)) {
      quantized.push_back(j);
    } else if (avx2 && is_float_type(ts[j].w.type)) {
      if (m > 1) {
        float_gemm(ts[j].w, x, m, ts[j].y, pool, scratch);
      } else {
        float_gemv(ts[j].w, x, ts[j].y, pool, scratch);
      }
    } else {
      const QuantKernels k =
          avx2 ? quant_kernels_avx2(ts[j].w.type) : quant_kernels_scalar(ts[j].w.type);
      vec_dot_path(ts[j].w, x, m, ts[j].y, pool, scratch, k);
    }
  }
  if (quantized.empty()) return;
  if (m == 1) {
    multi_gemv(ts, quantized, x, n, pool, scratch);
  } else {
    multi_gemm(ts, quantized, x, m, n, pool, scratch);
  }
}

void matmul_isa(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
                MatmulScratch& scratch, bool avx2) {
  const MatmulTarget t{w, y};
  matmul_multi_isa(&t, 1, x, m, pool, scratch, avx2);
}

}  // namespace cpu

void matmul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  cpu::matmul_isa(w, x, m, y, pool, scratch, use_avx2());
}

void matmul_multi(const MatmulTarget* targets, int n_targets, const float* x, int64_t m,
                  ThreadPool& pool, MatmulScratch& scratch) {
  cpu::matmul_multi_isa(targets, n_targets, x, m, pool, scratch, use_avx2());
}

void get_row(const WeightView& w, int64_t row, float* dst) {
  SIEVE_ASSERT(row >= 0 && row < w.n_rows);
  const auto* p = static_cast<const uint8_t*>(w.data) + row * row_bytes(w.type, w.n_cols);
  dequantize_row(w.type, p, dst, w.n_cols);
}

}  // namespace sieve
