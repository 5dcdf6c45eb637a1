// bench_qgemv: the quantized GEMV (backend/cuda/qmatmul.h) against cuBLAS bf16 on the decode
// shapes of the pulled models, for every supported type and n_tok 1, 2, 4, 8.
//
// Per case: qgemv time with the activation quantization (`total`) and without it (`gemv`,
// x_quantized), effective GB/s of the quantized weight bytes over the gemv time, the cuBLAS
// bf16 GEMM (what the GPU session runs today) on the same shape with bf16 weights, and
// ratio = cuBLAS / qgemv total (> 1: qgemv faster). Each timing: cold L2, median of --iters.
// Random data: random quant bytes with random fp16 scales, bf16 N(0,1)-like activations.
//
// usage: bench_qgemv [--out FILE.csv] [--filter SUBSTR] [--iters N] [--sweep] [--commit C]
//   --sweep also times every threads-per-row choice (32, 64, 128) besides the automatic one.
//   Launches use programmatic dependent launch unless SIEVE_NO_PDL is set (as bench_cuda).
#include <cublas_v2.h>

#include <ctime>

#include "backend/cuda/qmatmul.h"
#include "bench/cuda/bench_common.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace sieve::cuda::bench {
namespace {

struct mshape {
  const char* name;
  int64_t rows, cols;
};

// Qwen2.5-1.5B (n_embd 1536, n_ff 8960, vocab 151936, fused QKV 1536 + 2 x 256) and
// Llama-3.1-8B (4096, 14336, fused QKV 4096 + 2 x 1024, fused gate+up as the GPU session).
constexpr mshape k_shapes[] = {
    {"qwen1.5b.qkv", 2048, 1536},         {"qwen1.5b.ffn_up", 8960, 1536},
    {"qwen1.5b.ffn_down", 1536, 8960},    {"qwen1.5b.lm_head", 151936, 1536},
    {"llama8b.qkv", 6144, 4096},          {"llama8b.attn_out", 4096, 4096},
    {"llama8b.ffn_gate_up", 28672, 4096}, {"llama8b.ffn_down", 4096, 14336},
};
constexpr GgmlType k_types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q8_0,
                                GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q5_K};
constexpr int k_ntoks[] = {1, 2, 4, 8};

struct xorshift {
  uint64_t s;
  uint64_t operator()() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Offsets of the fp16 scale fields of a block (d, then m / dmin when the type has one).
std::vector<int> scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {0};
  }
}

// n_blocks random blocks of type t: random bytes, scales in +-[1e-3, 3e-2].
std::vector<uint8_t> random_blocks(GgmlType t, int64_t n_blocks, uint64_t seed) {
  const int64_t bb = type_info(t)->type_size;
  std::vector<uint8_t> h(static_cast<size_t>(n_blocks * bb + 16));
  xorshift r{seed * 0x9E3779B97F4A7C15ull + 1};
  for (size_t i = 0; i + 8 <= h.size(); i += 8) {
    const uint64_t v = r();
    std::memcpy(h.data() + i, &v, 8);
  }
  const std::vector<int> offs = scale_offsets(t);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int off : offs) {
      const uint64_t v = r();
      const float mag = 1e-3f + static_cast<float>(v & 0xffff) / 65535.f * 3e-2f;
      const uint16_t s = f32_to_fp16((v >> 16) & 1 ? -mag : mag);
      std::memcpy(h.data() + b * bb + off, &s, 2);
    }
  return h;
}

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> h(n);
  xorshift r{seed * 0x9E3779B97F4A7C15ull + 7};
  for (auto& v : h) {
    const uint64_t b = r();
    // |x| in [2^-3, 2) with a random sign and mantissa
    v = static_cast<uint16_t>(((b & 1) << 15) | ((0x7c + ((b >> 1) & 3)) << 7) | ((b >> 8) & 0x7f));
  }
  return h;
}

std::string g_commit = "unknown";
bool g_sweep = false;

}  // namespace
}  // namespace sieve::cuda::bench

int main(int argc, char** argv) {
  using namespace sieve;
  using namespace sieve::cuda;
  using namespace sieve::cuda::bench;
  const char* out = "bench_qgemv.csv";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (a == "--filter" && i + 1 < argc)
      g_filter = argv[++i];
    else if (a == "--iters" && i + 1 < argc)
      g_iters = std::atoi(argv[++i]);
    else if (a == "--sweep")
      g_sweep = true;
    else if (a == "--commit" && i + 1 < argc)
      g_commit = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bench_qgemv [--out FILE] [--filter SUBSTR] [--iters N] [--sweep] "
                   "[--commit C]\n");
      return 1;
    }
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "bench_qgemv: no CUDA device\n");
    return 1;
  }
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  g_csv = std::fopen(out, "w");
  if (!g_csv) return 1;
  std::fprintf(g_csv,
               "device,date,commit,type,shape,rows,cols,n_tok,tpr,qbytes,qgemv_total_us,"
               "qgemv_us,qgemv_GBps,cublas_us,cublas_GBps,ratio\n");
  std::printf("device %s, %d SMs, commit %s, %s\n", prop.name, prop.multiProcessorCount,
              g_commit.c_str(), date);
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  g_flush = dalloc<uint8_t>(k_flush_bytes);
  g_sink = dalloc<uint32_t>(1024);
  CK(cudaMemset(g_flush, 0x5a, k_flush_bytes));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 2;
  cublasSetStream(blas, g_stream);

  int64_t max_elems = 0, max_cols = 0, max_rows = 0;
  for (const mshape& s : k_shapes) {
    max_elems = std::max(max_elems, s.rows * s.cols);
    max_cols = std::max(max_cols, s.cols);
    max_rows = std::max(max_rows, s.rows);
  }
  const int max_tok = qgemv_max_tok;
  auto* wbf = dupload(random_bf16(static_cast<size_t>(max_elems), 1));
  auto* x = dupload(random_bf16(static_cast<size_t>(max_tok * max_cols), 2));
  auto* y = dalloc<float>(static_cast<size_t>(max_tok * max_rows));
  auto* ws = dalloc<uint8_t>(static_cast<size_t>(qgemv_workspace_bytes(max_cols, max_tok)));

  // cuBLAS bf16 per (shape, n_tok), timed once
  std::vector<double> blas_us(std::size(k_shapes) * std::size(k_ntoks), 0.0);
  for (size_t si = 0; si < std::size(k_shapes); ++si) {
    const mshape& s = k_shapes[si];
    bool any = false;  // cuBLAS runs for the shapes some selected case uses
    for (GgmlType t : k_types) any |= selected(std::string(type_name(t)) + " " + s.name);
    if (!any) continue;
    for (size_t ni = 0; ni < std::size(k_ntoks); ++ni) {
      const int n = k_ntoks[ni];
      const float one = 1.f, zero = 0.f;
      auto fn = [&] {
        const cublasStatus_t st =
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.rows), n,
                         static_cast<int>(s.cols), &one, wbf, CUDA_R_16BF, static_cast<int>(s.cols),
                         x, CUDA_R_16BF, static_cast<int>(s.cols), &zero, y, CUDA_R_32F,
                         static_cast<int>(s.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
          std::fprintf(stderr, "bench_qgemv: cublasGemmEx failed (%d) on %s\n",
                       static_cast<int>(st), s.name);
          std::exit(2);
        }
      };
      blas_us[si * std::size(k_ntoks) + ni] = time_gpu(fn).med;
    }
  }

  for (GgmlType t : k_types) {
    const TypeInfo* ti = type_info(t);
    const std::string tname(type_name(t));
    int64_t nb = 0;
    for (const mshape& s : k_shapes)
      if (s.cols % ti->block_size == 0) nb = std::max(nb, s.rows * s.cols / ti->block_size);
    bool any = false;
    for (const mshape& s : k_shapes) any |= selected(tname + " " + s.name);
    if (!any) continue;
    auto* w = dupload(random_blocks(t, nb, static_cast<uint64_t>(t) + 11));
    for (size_t si = 0; si < std::size(k_shapes); ++si) {
      const mshape& s = k_shapes[si];
      const std::string name = tname + " " + s.name;
      if (s.cols % ti->block_size != 0 || !selected(name)) continue;
      const double qbytes = static_cast<double>(s.rows) * qrow_bytes(t, s.cols);
      for (size_t ni = 0; ni < std::size(k_ntoks); ++ni) {
        const int n = k_ntoks[ni];
        std::vector<int> tprs = {0};
        if (g_sweep) tprs.insert(tprs.end(), {32, 64, 128});
        for (int tpr : tprs) {
          qgemv_params p;
          p.w = w;
          p.type = t;
          p.rows = s.rows;
          p.cols = s.cols;
          p.x = reinterpret_cast<const __nv_bfloat16*>(x);
          p.ldx = s.cols;
          p.n_tok = n;
          p.y = y;
          p.ldy = s.rows;
          p.workspace = ws;
          p.threads_per_row = tpr;
          p.pdl = std::getenv("SIEVE_NO_PDL") == nullptr;
          CK(launch_qgemv(p, g_stream));  // also leaves x quantized in ws
          const stats total = time_gpu([&] { CK(launch_qgemv(p, g_stream)); });
          qgemv_params pq = p;
          pq.x_quantized = true;
          const stats gemv = time_gpu([&] { CK(launch_qgemv(pq, g_stream)); });
          const double bl = blas_us[si * std::size(k_ntoks) + ni];
          const double bf_bytes = 2.0 * s.rows * s.cols;
          const double gbps = qbytes / (gemv.med * 1e-6) / 1e9;
          const double bl_gbps = bl > 0 ? bf_bytes / (bl * 1e-6) / 1e9 : 0.0;
          const double ratio = bl > 0 ? bl / total.med : 0.0;
          std::fprintf(g_csv, "%s,%s,%s,%s,%s,%lld,%lld,%d,%d,%.0f,%.2f,%.2f,%.1f,%.2f,%.1f,%.3f\n",
                       prop.name, date, g_commit.c_str(), tname.c_str(), s.name,
                       static_cast<long long>(s.rows), static_cast<long long>(s.cols), n, tpr,
                       qbytes, total.med, gemv.med, gbps, bl, bl_gbps, ratio);
          std::fflush(g_csv);
          std::printf(
              "%-5s %-20s %6lldx%-6lld n=%d tpr=%-3d total %8.2f us  gemv %8.2f us %7.1f GB/s | "
              "cublas bf16 %8.2f us %7.1f GB/s | x%.2f\n",
              tname.c_str(), s.name, static_cast<long long>(s.rows), static_cast<long long>(s.cols),
              n, tpr, total.med, gemv.med, gbps, bl, bl_gbps, ratio);
          std::fflush(stdout);
        }
      }
    }
    CK(cudaFree(w));
  }
  cublasDestroy(blas);
  std::fclose(g_csv);
  std::printf("done\n");
  return 0;
}
