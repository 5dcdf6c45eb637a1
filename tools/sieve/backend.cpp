#include "backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.h"

#ifdef SIEVE_HAVE_CUDA
#include "engine/engine_generate.h"
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

#ifdef SIEVE_HAVE_CUDA
struct GpuRunner::Impl {
  const Model* model = nullptr;
  std::unique_ptr<Engine> engine;
  const CudaRunner* runner = nullptr;
};

GpuRunner::GpuRunner(const Model& model, int32_t n_ctx, const Options& opt)
    : impl_(std::make_unique<Impl>()) {
  if (!gpu_available())
    throw UserError("--backend cuda: no CUDA device is visible (use --backend cpu)");
  impl_->model = &model;
  EngineConfig ec;
  ec.n_ctx = n_ctx;
  ec.max_running = std::max(1, opt.max_running);
  ec.max_batch_tokens = 512;
  ec.prefix_cache = opt.prefix_cache;
  ec.max_step_ms = 0;  // steps sized by tokens, as measured
  CudaRunner::Options ro;
  ro.mem_fraction = opt.mem_fraction;
  ec.runner_factory = cuda_runner_factory(ro);
  auto e = Engine::create(std::shared_ptr<const Model>(&model, [](const Model*) {}), ec);
  if (!e) throw UserError(e.message());
  impl_->engine = std::move(e.value());
  impl_->runner = static_cast<const CudaRunner*>(impl_->engine->runner());
}
GpuRunner::~GpuRunner() = default;

GenerateStats GpuRunner::generate(std::span<const int32_t> prompt, const GenerateOptions& g,
                                  const std::function<bool(int32_t)>& on_token) {
  auto r = generate_with_engine(*impl_->engine, prompt, g, on_token);
  if (!r) throw UserError(r.message());
  GenerateStats st = *r;
  const KvStats ks = impl_->engine->kv_stats();
  st.kv_bytes_per_token_full = ks.bytes_per_token_full;
  st.n_layers_full = ks.n_stream_full;
  st.n_layers_window = ks.n_stream_window;
  return st;
}

std::string GpuRunner::device() const {
  return fmt::format("{}, {:.2f} GiB of bf16 weights, {:.2f} GiB of KV pages",
                     impl_->runner->device_name(), impl_->runner->weight_bytes() / 1073741824.0,
                     impl_->runner->kv_pool_bytes() / 1073741824.0);
}
int32_t GpuRunner::kv_fits(int32_t n_tokens) const {
  const int64_t per_token = impl_->engine->kv_stats().bytes_per_token_full;
  if (per_token <= 0 || n_tokens <= 0) return 1;
  // a page of slack per sequence (prompts rarely end on a page boundary)
  const int64_t per_seq = per_token * (static_cast<int64_t>(n_tokens) + 16);
  return static_cast<int32_t>(std::max<int64_t>(1, impl_->runner->kv_pool_bytes() / per_seq));
}

Engine& GpuRunner::engine() {
  return *impl_->engine;
}
int64_t GpuRunner::kv_pool_bytes() const {
  return impl_->runner->kv_pool_bytes();
}
namespace {
GpuRunner::Options eval_options(int32_t concurrency) {
  GpuRunner::Options o;
  o.max_running = std::max(1, concurrency);
  return o;
}

// complete() is called from up to max_parallel() threads at once (eval::run_matrix); each
// call is one request of the engine, which batches them in its steps.
class GpuEvalRunner final : public eval::Runner_i {
 public:
  GpuEvalRunner(const Model& model, int32_t n_ctx, int32_t concurrency)
      : model_(model), gpu_(model, n_ctx, eval_options(concurrency)), n_ctx_(n_ctx) {
    parallel_ = std::min(std::max(1, concurrency), gpu_.kv_fits(n_ctx));
    if (parallel_ < concurrency) {
      log_info("eval: {} samples at once ({} sequences of {} tokens fill the KV pool)", parallel_,
               parallel_, n_ctx);
    }
  }
  std::string backend() const override { return "cuda"; }
  int32_t max_parallel() const override { return parallel_; }
  Result<eval::Completion> complete(const eval::CompletionRequest& r) override {
    SIEVE_TRY(eval::check_request(r, n_ctx_));
    GenerateOptions g;
    g.n_predict = r.max_new_tokens;
    g.sampling.temperature = 0.0f;
    g.policy = r.policy;
    std::vector<int32_t> out;
    std::string text;
    GenerateStats st;
    try {
      st = gpu_.generate(r.tokens, g, [&](int32_t t) {
        out.push_back(t);
        return eval::answer_continues(model_, r, text, t);
      });
    } catch (const UserError& e) {
      return make_error("{}", e.what());
    }
    return eval::completion_of(model_, r, out, st);
  }

 private:
  const Model& model_;
  GpuRunner gpu_;
  int32_t n_ctx_;
  int32_t parallel_ = 1;
};
}  // namespace

std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model& model, int32_t n_ctx,
                                                     int32_t concurrency) {
  return std::make_unique<GpuEvalRunner>(model, n_ctx, concurrency);
}
#else
std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model&, int32_t, int32_t) {
  throw UserError(k_no_cuda_error);
}
struct GpuRunner::Impl {};
GpuRunner::GpuRunner(const Model&, int32_t, const Options&) {
  throw UserError(k_no_cuda_error);
}
GpuRunner::~GpuRunner() = default;
GenerateStats GpuRunner::generate(std::span<const int32_t>, const GenerateOptions&,
                                  const std::function<bool(int32_t)>&) {
  return {};
}
std::string GpuRunner::device() const {
  return "cuda";
}
int32_t GpuRunner::kv_fits(int32_t) const {
  return 1;
}
Engine& GpuRunner::engine() {
  throw UserError(k_no_cuda_error);
}
int64_t GpuRunner::kv_pool_bytes() const {
  return 0;
}
#endif

}  // namespace sieve::cli
