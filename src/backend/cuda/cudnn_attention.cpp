#include "backend/cuda/cudnn_attention.h"

#include <dlfcn.h>

#include <mutex>

#if SIEVE_HAVE_CUDNN_FE
#include <cudnn_frontend.h>
#endif

namespace sieve::cuda {

#if SIEVE_HAVE_CUDNN_FE
}  // namespace sieve::cuda

// The frontend's dynamic-loading mode calls cuDNN through this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace sieve::cuda {
namespace {

namespace fe = cudnn_frontend;

// UIDs of the graph's tensors (the variant pack is keyed by them).
enum : int64_t {
  k_uid_q = 1,
  k_uid_k,
  k_uid_v,
  k_uid_seq_q,
  k_uid_seq_kv,
  k_uid_pt_k,
  k_uid_pt_v,
  k_uid_o
};

// dlopen libcudnn once per process; "" when loaded, else why not.
const std::string& load_cudnn() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    std::string errs;
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) {
        fe::cudnn_dlhandle = h;
        return;
      }
      const char* e = dlerror();
      errs += std::string("; ") + (e ? e : name);
    }
    why = "cuDNN 9 was not found (" + errs.substr(2) +
          "): install it (the CUDA cuDNN package, or pip's nvidia-cudnn-cu13) and put its lib "
          "directory on LD_LIBRARY_PATH";
  });
  return why;
}

Status fe_check(fe::error_t e, const char* what) {
  if (e.is_good()) return {};
  return make_error("cudnn: {}: {}", what, e.get_message());
}

}  // namespace

struct CudnnPrefill::Impl {
  cudnn_prefill_shape shape;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int64_t ws_bytes = 0;
  ~Impl() {
    if (workspace) cudaFree(workspace);
    if (handle) fe::detail::destroy_handle(handle);
  }
  Status build(cudaStream_t stream);
};

Status CudnnPrefill::Impl::build(cudaStream_t stream) {
  const cudnn_prefill_shape& s = shape;
  if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
    handle = nullptr;
    return make_error("cudnn: cannot create a handle (is a CUDA device visible?)");
  }
  if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS)
    return make_error("cudnn: cannot set the stream");
  graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t H = s.n_q_heads, Hk = s.n_kv_heads, D = s.head_dim, S = s.max_q, N = s.max_kv;
  // BSHD queries and output: [s, h, d] in memory, described as (b, h, s, d)
  auto Q = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("Q")
                             .set_uid(k_uid_q)
                             .set_dim({1, H, S, D})
                             .set_stride({S * H * D, D, H * D, 1}));
  std::vector<int64_t> kv_dim, kv_stride;
  if (s.paged) {  // containers of pages: [pages, page_size, Hk, D] as (pages, Hk, page_size, D)
    const int64_t P = s.page_size;
    kv_dim = {s.n_pages, Hk, P, D};
    kv_stride = {P * Hk * D, D, Hk * D, 1};
  } else {
    kv_dim = {1, Hk, N, D};
    kv_stride = {N * Hk * D, D, Hk * D, 1};
  }
  auto K = graph->tensor(
      fe::graph::Tensor_attributes().set_name("K").set_uid(k_uid_k).set_dim(kv_dim).set_stride(
          kv_stride));
  auto V = graph->tensor(
      fe::graph::Tensor_attributes().set_name("V").set_uid(k_uid_v).set_dim(kv_dim).set_stride(
          kv_stride));
  auto len = [&](const char* name, int64_t uid) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_data_type(fe::DataType_t::INT32));
  };
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("prefill")
                  .set_generate_stats(false)
                  .set_attn_scale(s.scale)
                  .set_causal_mask_bottom_right(true)
                  .set_padding_mask(true)
                  .set_seq_len_q(len("seq_q", k_uid_seq_q))
                  .set_seq_len_kv(len("seq_kv", k_uid_seq_kv));
  if (s.paged) {
    const int64_t T = (N + s.page_size - 1) / s.page_size;
    auto table = [&](const char* name, int64_t uid) {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({1, 1, T, 1})
                               .set_stride({T, T, 1, 1})
                               .set_data_type(fe::DataType_t::INT32));
    };
    opts.set_paged_attention_k_table(table("pages_k", k_uid_pt_k))
        .set_paged_attention_v_table(table("pages_v", k_uid_pt_v))
        .set_paged_attention_max_seq_len_kv(static_cast<int>(N));
  }
  auto [O, stats] = graph->sdpa(Q, K, V, opts);
  (void)stats;
  O->set_output(true).set_uid(k_uid_o).set_dim({1, H, S, D}).set_stride({S * H * D, D, H * D, 1});
  SIEVE_TRY(fe_check(graph->build(handle, {fe::HeurMode_t::A}), "no engine runs this attention"));
  SIEVE_TRY(fe_check(graph->get_workspace_size(ws_bytes), "workspace size"));
  if (ws_bytes > 0) {
    const cudaError_t e = cudaMalloc(&workspace, ws_bytes);
    if (e != cudaSuccess) {
      workspace = nullptr;
      return make_error("cudnn: cannot allocate its {} MiB workspace: {}", ws_bytes >> 20,
                        cudaGetErrorString(e));
    }
  }
  return {};
}

Result<std::unique_ptr<CudnnPrefill>> CudnnPrefill::create(const cudnn_prefill_shape& shape,
                                                           cudaStream_t stream) {
  if (const std::string& why = load_cudnn(); !why.empty()) return make_error("{}", why);
  if (shape.n_q_heads <= 0 || shape.n_kv_heads <= 0 || shape.n_q_heads % shape.n_kv_heads != 0 ||
      shape.head_dim <= 0 || shape.max_q <= 0 || shape.max_kv < shape.max_q ||
      (shape.paged && (shape.page_size <= 0 || shape.n_pages <= 0))) {
    return make_error("cudnn: bad prefill shape (heads {}/{}, head_dim {}, max_q {}, max_kv {})",
                      shape.n_q_heads, shape.n_kv_heads, shape.head_dim, shape.max_q, shape.max_kv);
  }
  auto impl = std::make_unique<Impl>();
  impl->shape = shape;
  try {
    SIEVE_TRY(impl->build(stream));
  } catch (const std::exception& e) {  // the frontend's loader throws (a missing symbol or runtime)
    return make_error("cudnn: {}", e.what());
  }
  return std::unique_ptr<CudnnPrefill>(new CudnnPrefill(std::move(impl)));
}

Status CudnnPrefill::run(const cudnn_prefill_args& a) {
  const cudnn_prefill_shape& s = impl_->shape;
  if (!a.q || !a.k || !a.v || !a.o || !a.seq_q || !a.seq_kv || (s.paged && !a.page_list)) {
    return make_error("cudnn prefill: a null pointer among q, k, v, o, seq_q, seq_kv{}",
                      s.paged ? ", page_list" : "");
  }
  std::unordered_map<int64_t, void*> pack = {
      {k_uid_q, const_cast<void*>(a.q)},
      {k_uid_k, const_cast<void*>(a.k)},
      {k_uid_v, const_cast<void*>(a.v)},
      {k_uid_seq_q, const_cast<int32_t*>(a.seq_q)},
      {k_uid_seq_kv, const_cast<int32_t*>(a.seq_kv)},
      {k_uid_o, a.o},
  };
  if (s.paged) {
    pack[k_uid_pt_k] = const_cast<int32_t*>(a.page_list);
    pack[k_uid_pt_v] = const_cast<int32_t*>(a.page_list);
  }
  try {
    return fe_check(impl_->graph->execute(impl_->handle, pack, impl_->workspace), "execute");
  } catch (const std::exception& e) {
    return make_error("cudnn: {}", e.what());
  }
}

Result<std::string> cudnn_version() {
  if (const std::string& why = load_cudnn(); !why.empty()) return make_error("{}", why);
  try {
    const size_t v = fe::detail::get_backend_version();
    return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  } catch (const std::exception& e) {
    return make_error("cudnn: {}", e.what());
  }
}

#else  // built without the cuDNN frontend headers

struct CudnnPrefill::Impl {
  cudnn_prefill_shape shape;
};

namespace {
constexpr const char* k_not_built =
    "this build has no cuDNN attention: the cuDNN frontend headers were not found at configure "
    "time "
    "(scripts/install-deps.sh fetches them when cudnn.h is installed; then re-run cmake)";
}

Result<std::unique_ptr<CudnnPrefill>> CudnnPrefill::create(const cudnn_prefill_shape&,
                                                           cudaStream_t) {
  return make_error("{}", k_not_built);
}
Status CudnnPrefill::run(const cudnn_prefill_args&) {
  return make_error("{}", k_not_built);
}
Result<std::string> cudnn_version() {
  return make_error("{}", k_not_built);
}

#endif

CudnnPrefill::CudnnPrefill(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnPrefill::~CudnnPrefill() = default;
const cudnn_prefill_shape& CudnnPrefill::shape() const {
  return impl_->shape;
}
int64_t CudnnPrefill::workspace_bytes() const {
#if SIEVE_HAVE_CUDNN_FE
  return impl_->ws_bytes;
#else
  return 0;
#endif
}

}  // namespace sieve::cuda
