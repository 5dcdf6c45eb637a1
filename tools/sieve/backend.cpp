#include "backend.h"

#include <fmt/format.h>

#ifdef SIEVE_HAVE_CUDA
#include "gpu/cuda_runner.h"
#endif

namespace sieve::cli {

void add_backend_flag(CLI::App& app, std::string& backend) {
  app.add_option("--backend", backend,
                 "cpu (default) or cuda: the whole model on an NVIDIA GPU (dense or exact-scorer "
                 "TokenSelect; docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

RunnerFactory runner_factory_for(const std::string& backend, double mem_fraction) {
  if (backend == "cpu") return {};
#ifdef SIEVE_HAVE_CUDA
  if (!gpu_available())
    throw UserError("--backend cuda: no CUDA device is visible (use --backend cpu)");
  CudaRunner::Options ro;
  ro.mem_fraction = mem_fraction;
  return cuda_runner_factory(ro);
#else
  (void)mem_fraction;
  throw UserError(k_no_cuda_error);
#endif
}

std::unique_ptr<SequenceEngine> make_sequence_engine(const Model& model, const std::string& backend,
                                                     const SequenceEngineOptions& opt) {
  SequenceEngineConfig sc;
  sc.n_ctx = opt.n_ctx;
  sc.prefix_cache = opt.prefix_cache;
  sc.pool = opt.pool;
  sc.runner_factory = runner_factory_for(backend, opt.mem_fraction);
  auto se = SequenceEngine::create(std::shared_ptr<const Model>(&model, [](const Model*) {}), sc);
  if (!se) throw UserError(se.message());
  return std::move(*se);
}

GenerateStats generate_or_throw(SequenceEngine& se, std::span<const int32_t> prompt,
                                const GenerateOptions& g,
                                const std::function<bool(int32_t)>& on_token) {
  auto r = se.generate(prompt, g, on_token);
  if (!r) throw UserError(r.message());
  return *r;
}

std::string device_of(SequenceEngine& se) {
#ifdef SIEVE_HAVE_CUDA
  if (se.engine() && se.engine()->backend() == "cuda") {
    const auto* r = static_cast<const CudaRunner*>(se.engine()->runner());
    return fmt::format("{}, {:.2f} GiB of bf16 weights, {:.2f} GiB of KV pages", r->device_name(),
                       r->weight_bytes() / 1073741824.0, r->kv_pool_bytes() / 1073741824.0);
  }
#else
  (void)se;
#endif
  return "cpu";
}

namespace {
// sieve eval --backend cuda: one engine (the weights uploaded once) for every sample.
class GpuEvalRunner final : public eval::Runner_i {
 public:
  GpuEvalRunner(const Model& model, int32_t n_ctx)
      : model_(model), se_(make_sequence_engine(model, "cuda", {n_ctx})), n_ctx_(n_ctx) {}
  std::string backend() const override { return "cuda"; }
  Result<eval::Completion> complete(const eval::CompletionRequest& r) override {
    SIEVE_TRY(eval::check_request(r, n_ctx_));
    GenerateOptions g;
    g.n_predict = r.max_new_tokens;
    g.sampling.temperature = 0.0f;
    g.policy = r.policy;
    std::vector<int32_t> out;
    std::string text;
    auto st = se_->generate(r.tokens, g, [&](int32_t t) {
      out.push_back(t);
      return eval::answer_continues(model_, r, text, t);
    });
    if (!st) return st.error();
    return eval::completion_of(model_, r, out, *st);
  }

 private:
  const Model& model_;
  std::unique_ptr<SequenceEngine> se_;
  int32_t n_ctx_;
};
}  // namespace

std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model& model, int32_t n_ctx) {
#ifndef SIEVE_HAVE_CUDA
  (void)model, (void)n_ctx;
  throw UserError(k_no_cuda_error);
#else
  return std::make_unique<GpuEvalRunner>(model, n_ctx);
#endif
}

}  // namespace sieve::cli
