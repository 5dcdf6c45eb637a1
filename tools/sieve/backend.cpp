#include "backend.h"

#include <fmt/format.h>

#ifdef SIEVE_HAVE_CUDA
#include "gpu/gpu_generate.h"
#endif

namespace sieve::cli {

void add_backend_flag(CLI::App& app, std::string& backend) {
  app.add_option("--backend", backend,
                 "cpu (default) or cuda: the whole model on an NVIDIA GPU (dense or tokenselect; docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

#ifdef SIEVE_HAVE_CUDA
struct GpuRunner::Impl {
  const Model* model = nullptr;
  int32_t n_ctx = 0;
  GpuPolicy made_for;  // the policy the session was made for
  std::unique_ptr<GpuSession> session;
};

GpuRunner::GpuRunner(const Model& model, int32_t n_ctx) : impl_(std::make_unique<Impl>()) {
  if (!gpu_available()) throw UserError("--backend cuda: no CUDA device is visible (use --backend cpu)");
  impl_->model = &model;
  impl_->n_ctx = n_ctx;
}
GpuRunner::~GpuRunner() = default;

GenerateStats GpuRunner::generate(std::span<const int32_t> prompt, const GenerateOptions& g,
                                  const std::function<bool(int32_t)>& on_token) {
  auto pol = gpu_policy_for(g.policy, static_cast<int64_t>(prompt.size()));
  if (!pol) throw UserError(pol.message());
  auto r = generate_on_gpu(session(*pol), *impl_->model, prompt, g, on_token);
  if (!r) throw UserError(r.message());
  return *r;
}

GpuSession& GpuRunner::session(const GpuPolicy& p) {
  if (!impl_->session || !(impl_->made_for == p)) {
    impl_->session.reset();  // free the old session's memory first
    auto s = GpuSession::create(*impl_->model, impl_->n_ctx, p);
    if (!s) throw UserError(s.message());
    impl_->session = std::move(s.value());
    impl_->made_for = p;
  }
  return *impl_->session;
}

std::string GpuRunner::device() const {
  if (!impl_->session) return "cuda";
  return fmt::format("{}, {:.2f} GiB of bf16 weights, dense prefill attention: {}", impl_->session->device_name(),
                     impl_->session->weight_bytes() / 1073741824.0, impl_->session->prefill_kernel());
}
namespace {
class GpuEvalRunner final : public eval::Runner_i {
 public:
  GpuEvalRunner(const Model& model, int32_t n_ctx) : model_(model), gpu_(model, n_ctx), n_ctx_(n_ctx) {}
  std::string backend() const override { return "cuda"; }
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
};
}  // namespace

std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model& model, int32_t n_ctx) {
  return std::make_unique<GpuEvalRunner>(model, n_ctx);
}
#else
std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model&, int32_t) {
  throw UserError(k_no_cuda_error);
}
struct GpuRunner::Impl {};
GpuRunner::GpuRunner(const Model&, int32_t) {
  throw UserError(k_no_cuda_error);
}
GpuRunner::~GpuRunner() = default;
GenerateStats GpuRunner::generate(std::span<const int32_t>, const GenerateOptions&, const std::function<bool(int32_t)>&) {
  return {};
}
GpuSession& GpuRunner::session(const GpuPolicy&) { throw UserError(k_no_cuda_error); }
std::string GpuRunner::device() const { return "cuda"; }
#endif

}  // namespace sieve::cli
