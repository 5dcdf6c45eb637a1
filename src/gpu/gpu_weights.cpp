// The model's weights on the device: matrices dequantized to bf16 (Q/K/V and gate/up stacked
// so that one GEMM computes each group), norms and biases as fp32, and each layer's RoPE
// pair frequencies (RopeScaling::inv_freqs: YaRN / linear scaling as on the CPU) as fp64.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "backend/cpu/matmul.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve::gpu_internal {
namespace {

// Rows of weight matrices dequantized and stacked into one bf16 matrix [sum rows, n_cols].
Result<bf16*> upload_stacked(DevMem& mem, std::initializer_list<const WeightView*> ws,
                             const char* what) {
  const int64_t cols = (*ws.begin())->n_cols;
  int64_t rows = 0;
  for (const WeightView* w : ws) {
    if (w->n_cols != cols) return make_error("gpu: {}: stacked matrices differ in width", what);
    rows += w->n_rows;
  }
  auto dst = mem.alloc<bf16>(rows * cols, what);
  if (!dst) return dst.error();
  std::vector<float> row(cols);
  std::vector<bf16> host(std::min<int64_t>(rows, 4096) * cols);
  int64_t r0 = 0;
  for (const WeightView* w : ws) {
    for (int64_t r = 0; r < w->n_rows;) {
      const int64_t n = std::min<int64_t>(w->n_rows - r, 4096);
      for (int64_t i = 0; i < n; ++i) {
        get_row(*w, r + i, row.data());
        for (int64_t c = 0; c < cols; ++c) host[i * cols + c] = __float2bfloat16(row[c]);
      }
      SIEVE_TRY(cuda_check(cudaMemcpy(*dst + (r0 + r) * cols, host.data(), n * cols * sizeof(bf16),
                                      cudaMemcpyHostToDevice),
                           what));
      r += n;
    }
    r0 += w->n_rows;
  }
  return *dst;
}

// The raw GGUF blocks of a group's parts (when every part's type has a quantized GEMV).
Status upload_blocks(DevMem& mem, std::initializer_list<const WeightView*> ws, MatGroup& g,
                     int64_t& bytes) {
  for (const WeightView* w : ws) {
    if (!cuda::qgemv_supported(w->type) || w->n_cols % 32 != 0) return {};
  }
  for (const WeightView* w : ws) {
    const int64_t n = w->n_rows * cuda::qrow_bytes(w->type, w->n_cols);
    uint8_t* dst = nullptr;
    SIEVE_TRY(mem.alloc_to(dst, n + 16, "quantized weights"));  // the GEMV's 16-byte read slack
    SIEVE_TRY(cuda_check(cudaMemcpy(dst, w->data, n, cudaMemcpyHostToDevice), "quantized weights"));
    g.q.push_back({dst, w->type, w->n_rows});
    bytes += n + 16;
  }
  return {};
}

Status upload_group(DevMem& mem, std::initializer_list<const WeightView*> ws, MatGroup& g,
                    int64_t& qbytes, const char* what) {
  auto r = upload_stacked(mem, ws, what);
  if (!r) return r.error();
  g.bf = *r;
  g.cols = (*ws.begin())->n_cols;
  g.rows = 0;
  for (const WeightView* w : ws) g.rows += w->n_rows;
  return upload_blocks(mem, ws, g, qbytes);
}

Status upload_vec(DevMem& mem, float*& dst, const float* v, int64_t n, const char* what) {
  dst = nullptr;
  if (v == nullptr) return {};
  SIEVE_TRY(mem.alloc_to(dst, n, what));
  return cuda_check(cudaMemcpy(dst, v, n * sizeof(float), cudaMemcpyHostToDevice), what);
}

}  // namespace

std::string MatGroup::signature() const {
  std::string s = fmt::format("{}x{}", rows, cols);
  for (const QPart& p : q) s += fmt::format(" {}:{}", type_name(p.type), p.rows);
  return s;
}

Status upload_weights(const Model& m, DevMem& mem, GpuWeights& g) {
  const ModelHParams& hp = m.hp;
  const ModelWeights& w = m.w;
  const int64_t E = hp.n_embd;
  auto t = upload_stacked(mem, {&w.tok_embd}, "token embeddings");
  if (!t) return t.error();
  g.tok_embd = *t;
  if (w.output.data == w.tok_embd.data && w.output.type == w.tok_embd.type) {
    g.output.bf = g.tok_embd;  // tied: the bf16 rows are the embedding's
    g.output.rows = w.output.n_rows;
    g.output.cols = w.output.n_cols;
    SIEVE_TRY(upload_blocks(mem, {&w.output}, g.output, g.quant_bytes));
  } else {
    SIEVE_TRY(upload_group(mem, {&w.output}, g.output, g.quant_bytes, "output matrix"));
  }
  SIEVE_TRY(upload_vec(mem, g.output_norm, w.output_norm, E, "output norm"));
  g.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[il];
    GpuLayer& G = g.layers[il];
    SIEVE_TRY(upload_group(mem, {&L.wq, &L.wk, &L.wv}, G.qkv, g.quant_bytes, "attention q/k/v"));
    SIEVE_TRY(upload_group(mem, {&L.wo}, G.wo, g.quant_bytes, "attention output"));
    SIEVE_TRY(upload_group(mem, {&L.w_gate, &L.w_up}, G.gu, g.quant_bytes, "ffn gate/up"));
    SIEVE_TRY(upload_group(mem, {&L.w_down}, G.down, g.quant_bytes, "ffn down"));
    if (L.bq || L.bk || L.bv) {  // qwen2: one bias vector over the stacked Q/K/V rows
      std::vector<float> b(static_cast<size_t>(hp.q_dim() + 2 * hp.kv_dim()), 0.0f);
      if (L.bq) std::copy(L.bq, L.bq + hp.q_dim(), b.begin());
      if (L.bk) std::copy(L.bk, L.bk + hp.kv_dim(), b.begin() + hp.q_dim());
      if (L.bv) std::copy(L.bv, L.bv + hp.kv_dim(), b.begin() + hp.q_dim() + hp.kv_dim());
      SIEVE_TRY(
          upload_vec(mem, G.bqkv, b.data(), static_cast<int64_t>(b.size()), "attention biases"));
    }
    {  // RoPE: each pair's angle per position, the CPU's numbers (scaling included)
      std::vector<double> f(static_cast<size_t>(std::max(hp.n_rot / 2, 1)), 0.0);
      hp.rope_scaling.inv_freqs(hp.n_rot, hp.rope_base[il], f.data());
      SIEVE_TRY(mem.alloc_to(G.rope_inv_freq, static_cast<int64_t>(f.size()), "RoPE frequencies"));
      SIEVE_TRY(cuda_check(
          cudaMemcpy(G.rope_inv_freq, f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice),
          "RoPE frequencies"));
    }
    struct V {
      float** dst;
      const float* src;
      int64_t n;
    };
    for (const V& v : {V{&G.attn_norm, L.attn_norm, E}, V{&G.ffn_norm, L.ffn_norm, E},
                       V{&G.q_norm, hp.qk_norm ? L.q_norm : nullptr, hp.head_dim},
                       V{&G.k_norm, hp.qk_norm ? L.k_norm : nullptr, hp.head_dim},
                       V{&G.post_attn, hp.post_norms ? L.post_attn_norm : nullptr, E},
                       V{&G.post_ffn, hp.post_norms ? L.post_ffn_norm : nullptr, E}}) {
      SIEVE_TRY(upload_vec(mem, *v.dst, v.src, v.n, "norm weights"));
    }
  }
  return {};
}

}  // namespace sieve::gpu_internal
