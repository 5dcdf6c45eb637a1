#include "backend.h"

#include <fmt/format.h>

#ifdef SIEVE_HAVE_CUDA
#include "gpu/gpu_generate.h"
#endif

namespace sieve::cli {

void add_backend_flag(CLI::App& app, std::string& backend) {
  app.add_option("--backend", backend,
                 "cpu (default) or cuda: the whole model on an NVIDIA GPU (dense or tokenselect; "
                 "models whose layers all attend fully, e.g. SmolLM2)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

#ifdef SIEVE_HAVE_CUDA
struct GpuRunner::Impl {
  const Model* model = nullptr;
  int32_t n_ctx = 0;
  std::string key;  // the policy the session was made for
  std::unique_ptr<GpuSession> session;
};

GpuRunner::GpuRunner(const Model& model, int32_t n_ctx) : impl_(std::make_unique<Impl>()) {
  impl_->model = &model;
  impl_->n_ctx = n_ctx;
}
GpuRunner::~GpuRunner() = default;

GenerateStats GpuRunner::generate(std::span<const int32_t> prompt, const GenerateOptions& g,
                                  const std::function<bool(int32_t)>& on_token) {
  auto pol = gpu_policy_for(g.policy, static_cast<int64_t>(prompt.size()));
  if (!pol) throw UserError(pol.message());
  const std::string key = fmt::format("{} {} {} {} {} {}", pol->name, pol->sparse, pol->layer_vote, pol->top_k,
                                      pol->sinks, pol->local);
  if (!impl_->session || impl_->key != key) {
    impl_->session.reset();
    auto s = GpuSession::create(*impl_->model, impl_->n_ctx, *pol);
    if (!s) throw UserError(s.message());
    impl_->session = std::move(s.value());
    impl_->key = key;
  }
  auto r = generate_on_gpu(*impl_->session, *impl_->model, prompt, g, on_token);
  if (!r) throw UserError(r.message());
  return *r;
}

std::string GpuRunner::device() const {
  if (!impl_->session) return "cuda";
  return fmt::format("{}, {:.2f} GiB of bf16 weights", impl_->session->device_name(),
                     impl_->session->weight_bytes() / 1073741824.0);
}
#else
struct GpuRunner::Impl {};
GpuRunner::GpuRunner(const Model&, int32_t) {
  throw UserError("--backend cuda: this sieve was built without CUDA (nvcc was not found at build time); use --backend cpu");
}
GpuRunner::~GpuRunner() = default;
GenerateStats GpuRunner::generate(std::span<const int32_t>, const GenerateOptions&, const std::function<bool(int32_t)>&) {
  return {};
}
std::string GpuRunner::device() const { return "cuda"; }
#endif

}  // namespace sieve::cli
