// CudaRunner: creation, the KV pages, and a step's host side (entry order, page tables, the
// decode graphs). The launches are in cuda_runner_forward.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/log.h"
#include "engine/sparse_seq.h"
#include "gpu/cuda_runner_impl.h"

namespace sieve {
using namespace gpu_internal;

bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

CudaRunner::Impl::~Impl() {
  for (auto& [key, g] : graphs) cudaGraphExecDestroy(g);
  for (auto& [key, l] : lt_layout_cache) l.destroy();
  if (lt_desc) cublasLtMatmulDescDestroy(lt_desc);
  if (lt) cublasLtDestroy(lt);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
  if (io_host) cudaFreeHost(io_host);
  if (logits_host) cudaFreeHost(logits_host);
  if (hits_host) cudaFreeHost(hits_host);
}

Status CudaRunner::Impl::init(const Model& m, const RunnerLimits& l,
                              const CudaRunner::Options& opt) {
  hp = m.hp;
  lim = l;
  if (!gpu_available())
    return make_error("--backend cuda: no CUDA device is visible (use --backend cpu)");
  for (LayerKind kind : hp.layer_kind) {
    if (kind == LayerKind::sliding && hp.sliding_window <= 0) {
      return make_error("--backend cuda: a sliding-window layer without a window size");
    }
  }
  if (hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256) {
    return make_error("--backend cuda: head_dim {} is not supported (64, 128 or 256)", hp.head_dim);
  }
  if (hp.n_gqa() > 8)
    return make_error("--backend cuda: {} query heads per KV head (at most 8)", hp.n_gqa());
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim)
    return make_error("--backend cuda: n_rot {}", hp.n_rot);
  if (l.n_ctx <= 0 || l.max_running <= 0 || l.max_batch_tokens <= 0) {
    return make_error(
        "--backend cuda: context {}, sequences {} and step tokens {} must be positive", l.n_ctx,
        l.max_running, l.max_batch_tokens);
  }
  if (!(opt.mem_fraction > 0 && opt.mem_fraction <= 1)) {
    return make_error("--gpu-mem-fraction {} must be in (0, 1]", opt.mem_fraction);
  }
  mem_fraction = opt.mem_fraction;
  invariant = opt.batch_invariant;
  if (const char* e = std::getenv("SIEVE_GPU_BATCH_INVARIANT")) invariant = std::string(e) != "0";
  S = l.max_running;
  C = std::max({l.max_batch_tokens, S, cuda::qgemv_max_tok});
  SIEVE_TRY(cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties"));
  auto d = cuda::current_device();
  if (!d) return d.error();
  facts = *d;
  SIEVE_TRY(cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  SIEVE_TRY(cublas_check(cublasCreate(&blas), "create"));
  SIEVE_TRY(cublas_check(cublasSetStream(blas, stream), "stream"));
  SIEVE_TRY(upload_weights(m, mem, w));
  weight_bytes = mem.bytes;

  const int64_t E = hp.n_embd, qd = hp.q_dim(), kvd = hp.kv_dim(), F = hp.n_ff, G = hp.n_gqa();
  SIEVE_TRY(mem.alloc_to(h, C * E, "activations"));
  SIEVE_TRY(mem.alloc_to(qkv, C * (qd + 2 * kvd), "activations"));
  SIEVE_TRY(mem.alloc_to(tmp, C * E, "activations"));
  SIEVE_TRY(mem.alloc_to(gu, C * 2 * F, "activations"));
  SIEVE_TRY(mem.alloc_to(logits, int64_t{std::max(S, cuda::qgemv_max_tok)} * hp.n_vocab, "logits"));
  SIEVE_TRY(mem.alloc_to(xb, C * std::max(E, qd), "activations"));
  SIEVE_TRY(mem.alloc_to(xsel, int64_t{S} * E, "activations"));
  SIEVE_TRY(mem.alloc_to(q, C * qd, "activations"));
  SIEVE_TRY(mem.alloc_to(k, C * kvd, "activations"));
  SIEVE_TRY(mem.alloc_to(v, C * kvd, "activations"));
  SIEVE_TRY(mem.alloc_to(o, C * qd, "activations"));
  SIEVE_TRY(mem.alloc_to(act, C * F, "activations"));
  const int64_t dec_o =
      cuda::decode_ws_o_floats(S, hp.n_head_kv, 256, static_cast<int32_t>(G), hp.head_dim);
  const int64_t dec_ml = cuda::decode_ws_ml_floats(S, hp.n_head_kv, 256, static_cast<int32_t>(G));
  SIEVE_TRY(mem.alloc_to(ws_o, std::max<int64_t>(dec_o, k_prefill_splits * C * qd),
                         "attention workspace"));
  SIEVE_TRY(mem.alloc_to(ws_ml,
                         std::max<int64_t>(dec_ml, int64_t{k_prefill_splits} * C * hp.n_head * 2),
                         "attention workspace"));
  SIEVE_TRY(mem.alloc_to(ws_cnt, int64_t{S} * hp.n_head_kv, "attention workspace"));
  SIEVE_TRY(
      cuda_check(cudaMemset(ws_cnt, 0, int64_t{S} * hp.n_head_kv * sizeof(uint32_t)), "memset"));
  SIEVE_TRY(mem.alloc_to(win_idx, 2 * int64_t{S}, "window list"));
  win_cnt = win_idx + S;
  SIEVE_TRY(cuda_check(cudaMemset(win_idx, 0, 2 * int64_t{S} * sizeof(int32_t)), "memset"));
  window_splits =
      cuda::decode_splits(hp.n_head_kv, std::max(hp.sliding_window, 1), facts.n_sm, hp.head_dim);
  {  // cuBLAS gets its workspace up front: nothing is allocated while a graph is captured
    blas_ws_bytes = 32 << 20;
    SIEVE_TRY(mem.alloc_to(blas_ws, blas_ws_bytes, "cuBLAS workspace"));
    SIEVE_TRY(cublas_check(cublasSetWorkspace(blas, blas_ws, blas_ws_bytes), "workspace"));
  }
  SIEVE_TRY(mem.alloc_to(qws,
                         cuda::qgemv_workspace_bytes(std::max({E, F, qd}), cuda::qgemv_max_tok),
                         "gemv workspace"));
  SIEVE_TRY(init_selection());
  SIEVE_TRY(choose_matmuls());
  SIEVE_TRY(cuda_check(cudaMallocHost(reinterpret_cast<void**>(&logits_host),
                                      int64_t{S} * hp.n_vocab * sizeof(float)),
                       "pinned memory"));
  // What the KV pages may take: the process's share of the device less what it holds now
  // (the step-input block, sized at attach, is small beside it).
  size_t free_b = 0, total_b = 0;
  SIEVE_TRY(cuda_check(cudaMemGetInfo(&free_b, &total_b), "memory info"));
  const int64_t used = static_cast<int64_t>(total_b - free_b);
  kv_capacity = static_cast<int64_t>(static_cast<double>(total_b) * mem_fraction) - used -
                (int64_t{64} << 20);
  if (kv_capacity <= 0) {
    return make_error(
        "--backend cuda: the weights and workspaces take {} MiB of the {} MiB that "
        "--gpu-mem-fraction {} "
        "allows; nothing is left for the KV cache",
        used >> 20, static_cast<int64_t>(total_b * mem_fraction) >> 20, mem_fraction);
  }
  return cuda_check(cudaDeviceSynchronize(), "upload");
}

Status CudaRunner::Impl::attach(KvStore& store) {
  const KvGeometry& g = store.geometry();
  if (g.host_rows)
    return make_error("cuda runner: the store keeps host rows; build it with host_rows = false");
  if (g.n_head_group != 1) {
    return make_error(
        "--backend cuda: KV streams per KV-head group (an RTPurbo head plan) do not run on the GPU "
        "yet");
  }
  if (g.n_head != hp.n_head_kv || g.head_dim != hp.head_dim || g.dtype != KvDtype::f16) {
    return make_error("cuda runner: the store's rows ({} heads x {}, {}) differ from the model's",
                      g.n_head, g.head_dim, kv_dtype_name(g.dtype));
  }
  kv = &store;
  page_size = g.page_size;
  n_pages = g.n_pages;
  n_stream = g.n_stream;
  max_seq_pages = (lim.n_ctx + page_size - 1) / page_size + 1;
  // one page past the store's: the padding rows of a decode graph's bucket write their K/V there
  scratch_page = n_pages;
  const int64_t rows = int64_t{n_pages + 1} * page_size * hp.kv_dim();
  SIEVE_TRY(kv_mem.alloc_to(kv_k, rows, "the K cache"));
  SIEVE_TRY(kv_mem.alloc_to(kv_v, rows, "the V cache"));
  SIEVE_TRY(attach_sketches(g));
  // Step inputs (see the layout in cuda_runner_impl.h).
  off_pos = C;
  off_qo = off_pos + C;
  off_qo_local = off_qo + S + 1;
  off_seq_len = off_qo_local + 2 * S;
  off_tables = off_seq_len + S;
  head_words = off_tables + int64_t{n_stream} * (2 * S + 1);
  head_words += head_words % 4;  // the int64 slots start 16-byte aligned
  const int64_t max_pages =
      std::min<int64_t>(int64_t{S} * max_seq_pages, int64_t{n_pages} * 4 + S) + S;
  io_words = head_words + int64_t{2} * n_stream * C + int64_t{n_stream} * max_pages;
  SIEVE_TRY(kv_mem.alloc_to(io_dev, io_words, "step inputs"));
  SIEVE_TRY(
      cuda_check(cudaMallocHost(reinterpret_cast<void**>(&io_host), io_words * sizeof(int32_t)),
                 "pinned memory"));
  std::memset(io_host, 0, io_words * sizeof(int32_t));
  log_info("cuda: {} MiB of weights, {} KV pages of {} tokens ({} MiB) on {}", weight_bytes >> 20,
           n_pages, page_size, kv_mem.bytes >> 20, prop.name);
  return cuda_check(cudaDeviceSynchronize(), "attach");
}

// ---- selection state ----

int32_t CudaRunner::Impl::slot_for(KvSeqId seq) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].used && slots[i].seq == seq) return static_cast<int32_t>(i);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].used) continue;
    slots[i] = Slot{seq, true, 0};
    const int32_t L = hp.n_layer;
    const int64_t s = static_cast<int64_t>(i);
    if (sc_state) {  // a new sequence: no layer has a fingerprint
      cudaMemsetAsync(sc_state + s * 4 * L, 0, 4 * L * sizeof(int32_t), stream);
      cudaMemsetAsync(sc_cnt + s * L, 0, L * sizeof(int32_t), stream);
      cudaMemsetAsync(sc_skip + s * L, 0, L * sizeof(int32_t), stream);
      cudaMemsetAsync(sc_hits + s, 0, sizeof(uint32_t), stream);
      hits_host[i] = 0;
    }
    return static_cast<int32_t>(i);
  }
  return -1;
}

void CudaRunner::Impl::release_gone_slots() {
  for (Slot& s : slots) {
    if (s.used && !kv->has_sequence(s.seq)) s.used = false;
  }
  std::erase_if(pol_of, [&](const auto& kvp) { return !kv->has_sequence(kvp.first); });
}

Status CudaRunner::Impl::apply_row_copies() {
  const auto copies = kv->take_row_copies();
  const int64_t row = hp.kv_dim();
  for (const auto& [dst, src] :
       copies) {  // in order: a compaction's later source may be an earlier target
    SIEVE_TRY(cuda_check(cudaMemcpyAsync(kv_k + dst * row, kv_k + src * row, row * sizeof(bf16),
                                         cudaMemcpyDeviceToDevice, stream),
                         "KV row copy"));
    SIEVE_TRY(cuda_check(cudaMemcpyAsync(kv_v + dst * row, kv_v + src * row, row * sizeof(bf16),
                                         cudaMemcpyDeviceToDevice, stream),
                         "KV row copy"));
  }
  return {};
}

// ---- a step ----

Status CudaRunner::Impl::plan(std::span<const BatchEntry> batch, int32_t& n_tok, int32_t& n_rows) {
  n_tok = 0;
  n_rows = 0;
  if (batch.empty()) return make_error("cuda runner: empty step");
  if (static_cast<int32_t>(batch.size()) > S) {
    return make_error("cuda runner: a step of {} sequences exceeds the {} it was sized for",
                      batch.size(), S);
  }
  order.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchEntry& b = batch[i];
    StepEntry e;
    e.src = static_cast<int32_t>(i);
    e.n = static_cast<int32_t>(b.tokens.size());
    if (e.n <= 0) return make_error("cuda runner: an entry without tokens");
    e.len = kv->n_tokens(b.seq);
    e.decode = e.n == 1;
    e.all_logits = b.all_logits;
    if (e.len > lim.n_ctx)
      return make_error("the sequence holds {} tokens, more than the context of {}", e.len,
                        lim.n_ctx);
    for (int32_t t : b.tokens) {
      if (t < 0 || t >= hp.n_vocab)
        return make_error("token id {} is outside the vocabulary [0, {})", t, hp.n_vocab);
    }
    if (b.sparse) {
      auto it = pol_of.find(b.seq);
      if (it == pol_of.end()) {
        auto gp = gpu_policy_from(b.sparse->policy(), &hp);
        if (!gp) return gp.error();
        SIEVE_TRY(prepare_policy(b.sparse->policy(), *gp));
        auto same = std::find(pols.begin(), pols.end(), *gp);
        const int32_t id = static_cast<int32_t>(same - pols.begin());
        if (same == pols.end()) pols.push_back(*gp);
        it = pol_of.emplace(b.seq, id).first;
      }
      e.pol = it->second;
      const GpuPolicy& pol = pols[e.pol];
      SIEVE_TRY(gpu_check_length(pol, hp, e.len));
      const int64_t before = e.len - e.n;
      if (e.decode) {
        e.sparse = pol.selects(before);
      } else {
        const int64_t prompt = b.sparse->prompt_tokens;
        const bool dense_chunk =
            in_prefill_tail(pol.prefill_tail, e.len, prompt) || prompt < pol.chunk_from;
        e.sparse = pol.selects(before) && pol.chunk_prefill && !dense_chunk;
      }
      if (e.sparse) {
        e.slot = slot_for(b.seq);
        if (e.slot < 0) return make_error("cuda runner: no free selection slot (engine bug)");
      }
    }
    n_tok += e.n;
    n_rows += e.all_logits ? e.n : 1;
    order.push_back(e);
  }
  if (n_tok > C)
    return make_error("cuda runner: a step of {} tokens exceeds the {} it was sized for", n_tok, C);
  if (n_rows > S)
    return make_error("cuda runner: {} logits rows in one step (at most {})", n_rows, S);
  // decodes first (dense, then selecting), then prefill chunks (dense, then selecting)
  std::stable_sort(order.begin(), order.end(), [](const StepEntry& a, const StepEntry& b) {
    return std::make_pair(!a.decode, a.sparse) < std::make_pair(!b.decode, b.sparse);
  });
  // A decode-only step's dense decodes pad to a power of two (at most S rows in all): the
  // step replays the graph of its size bucket, not one per count (padding rows read and write
  // only the scratch page, and their logits are dropped).
  const bool decode_only =
      std::all_of(order.begin(), order.end(), [](const StepEntry& e) { return e.decode; });
  if (decode_only && !graphs_off) {
    const int32_t n_dense = static_cast<int32_t>(
        std::count_if(order.begin(), order.end(), [](const StepEntry& e) { return !e.sparse; }));
    const int32_t n_sparse = static_cast<int32_t>(order.size()) - n_dense;
    int32_t bucket = 1;
    while (bucket < n_dense) bucket *= 2;
    const int32_t pad = std::max(0, std::min(bucket, S - n_sparse) - n_dense);
    StepEntry dummy;
    dummy.src = -1;
    dummy.n = 1;
    dummy.len = 1;
    dummy.decode = true;
    order.insert(order.begin() + n_dense, pad, dummy);
    n_tok += pad;
    n_rows += pad;
  }
  int32_t row = 0;
  for (StepEntry& e : order) {
    e.row = row;
    row += e.n;
  }
  return {};
}

// Token ids, positions, per-stream slots and page tables of the step into io_host; `words`
// receives how much of it the step uses.
Status CudaRunner::Impl::fill_tables(std::span<const BatchEntry> batch, int32_t n_tok,
                                     int64_t& words) {
  int32_t* ids = io_host;
  int32_t* pos = io_host + off_pos;
  int32_t* qo = io_host + off_qo;
  int32_t* qo_local = io_host + off_qo_local;
  int32_t* seq_len = io_host + off_seq_len;
  const int32_t ps = page_size;
  int32_t qrow = 0;
  qo[0] = 0;
  int32_t n_pre = 0;
  for (size_t b = 0; b < order.size(); ++b) {
    const StepEntry& e = order[b];
    for (int32_t j = 0; j < e.n; ++j) {
      ids[e.row + j] = e.src < 0 ? 0 : batch[e.src].tokens[j];
      pos[e.row + j] = e.len - e.n + j;
    }
    seq_len[b] = e.len;
    qo_local[2 * b] = 0;
    qo_local[2 * b + 1] = e.n;
    if (!e.decode) {
      qrow += e.n;
      qo[++n_pre] = qrow;
    }
  }
  int64_t* slots = reinterpret_cast<int64_t*>(io_host + head_words);
  int32_t* pages = io_host + pages_off(n_tok);
  int64_t n_ids = 0;
  const int64_t cap = io_words - pages_off(n_tok);
  const KvArenas& ar = kv->arenas();
  for (int32_t s = 0; s < n_stream; ++s) {
    int32_t* indptr = io_host + indptr_off(s);
    int32_t* last = io_host + last_off(s);
    const bool window = kv->geometry().capacity[s].is_window();
    for (size_t b = 0; b < order.size(); ++b) {
      const StepEntry& e = order[b];
      indptr[b] = static_cast<int32_t>(n_ids);
      if (e.src < 0) {  // a padding row: one token in the scratch page
        if (n_ids + 1 > cap)
          return make_error("cuda runner: the step's page tables overflow (engine bug)");
        pages[n_ids++] = scratch_page;
        last[b] = 1;
        slots[int64_t{s} * n_tok + e.row] = int64_t{scratch_page} * ps;
        continue;
      }
      const KvSeqView sv = kv->seq_view(batch[e.src].seq, s);
      // The kernels find token t at page t / page_size of the table: a window stream whose
      // dropped pages left its table shorter gets them back as placeholders (page 0), which
      // no query of its window reads.
      const int32_t n_table = (e.len + ps - 1) / ps;
      if (n_ids + n_table > cap)
        return make_error("cuda runner: the step's page tables overflow (engine bug)");
      if (!window || sv.n_tokens == e.len) {
        if (sv.n_pages() != n_table)
          return make_error("cuda runner: stream {} holds {} pages for {} tokens", s, sv.n_pages(),
                            e.len);
        std::copy(sv.pages.begin(), sv.pages.end(), pages + n_ids);
      } else {
        std::fill(pages + n_ids, pages + n_ids + n_table, 0);
        for (int32_t p : sv.pages) pages[n_ids + ar.pos[int64_t{p} * ps] / ps] = p;
      }
      n_ids += n_table;
      last[b] = e.len - (n_table - 1) * ps;
      for (int32_t j = 0; j < e.n; ++j)
        slots[int64_t{s} * n_tok + e.row + j] = sv.slot(sv.n_tokens - e.n + j);
    }
    indptr[order.size()] = static_cast<int32_t>(n_ids);
  }
  words = pages_off(n_tok) + n_ids;
  return {};
}

Status CudaRunner::Impl::run(std::span<const BatchEntry> batch, std::vector<float>& out) {
  if (!kv) return make_error("cuda runner: no KV store attached");
  release_gone_slots();
  int32_t n_tok = 0, n_rows = 0;
  SIEVE_TRY(plan(batch, n_tok, n_rows));
  SIEVE_TRY(apply_row_copies());
  int64_t words = 0;
  SIEVE_TRY(fill_tables(batch, n_tok, words));
  // Only what the step uses travels: the fixed head, this step's slots and page ids.
  SIEVE_TRY(cuda_check(
      cudaMemcpyAsync(io_dev, io_host, words * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
      "step inputs"));
  const bool decode_only =
      std::all_of(order.begin(), order.end(), [](const StepEntry& e) { return e.decode; });
  bool launched = false;
  if (decode_only && !graphs_off) {
    std::vector<int32_t> key{0};
    for (const StepEntry& e : order) {
      if (!e.sparse) {
        ++key[0];
      } else {
        key.push_back(e.slot);
        key.push_back(e.pol);
      }
    }
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      if (graphs.size() >= 64) {  // compositions change as requests come and go: start afresh
        for (auto& [k2, g] : graphs) cudaGraphExecDestroy(g);
        graphs.clear();
      }
      cudaGraph_t captured = nullptr;
      cudaGraphExec_t exec = nullptr;
      Status st =
          cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
      if (st) {
        st = enqueue(n_tok, n_rows);
        const cudaError_t e = cudaStreamEndCapture(stream, &captured);
        if (st && e != cudaSuccess) st = cuda_check(e, "capture");
      }
      if (st && captured) st = cuda_check(cudaGraphInstantiate(&exec, captured, 0), "graph");
      if (captured) cudaGraphDestroy(captured);
      if (!st) {
        log_warn("cuda: decode steps run without graphs: {}", st.message());
        graphs_off = true;
        (void)cudaGetLastError();
      } else {
        it = graphs.emplace(std::move(key), exec).first;
      }
    }
    if (it != graphs.end()) {
      SIEVE_TRY(cuda_check(cudaGraphLaunch(it->second, stream), "graph launch"));
      launched = true;
      ++stats.graph_steps;
    }
  }
  if (!launched) SIEVE_TRY(enqueue(n_tok, n_rows));
  SIEVE_TRY(
      cuda_check(cudaMemcpyAsync(logits_host, logits, int64_t{n_rows} * hp.n_vocab * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream),
                 "logits"));
  if (sc_hits) {
    SIEVE_TRY(cuda_check(
        cudaMemcpyAsync(hits_host, sc_hits, S * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream),
        "selection cache hits"));
  }
  SIEVE_TRY(cuda_check(cudaStreamSynchronize(stream), "forward"));

  // Logits rows are in the runner's order; the scheduler reads them in its own.
  out_row.assign(batch.size(), 0);
  int32_t r = 0;
  for (const StepEntry& e : order) {
    if (e.src >= 0) out_row[e.src] = r;
    r += e.all_logits ? e.n : 1;
  }
  const int64_t V = hp.n_vocab;
  int64_t real_rows = 0;
  for (const BatchEntry& be : batch)
    real_rows += be.all_logits ? static_cast<int64_t>(be.tokens.size()) : 1;
  out.resize(static_cast<size_t>(real_rows) * V);
  int64_t dst = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t nr = batch[i].all_logits ? static_cast<int64_t>(batch[i].tokens.size()) : 1;
    std::memcpy(out.data() + dst * V, logits_host + int64_t{out_row[i]} * V,
                nr * V * sizeof(float));
    dst += nr;
  }
  // Per-request statistics (the stats line and the server's usage).
  int32_t n_full = 0;
  for (LayerKind kind : hp.layer_kind) n_full += kind == LayerKind::full ? 1 : 0;
  ++stats.steps;
  for (const StepEntry& e : order) {
    if (e.src < 0) continue;  // padding
    if (e.decode)
      ++stats.decode_tokens;
    else
      stats.prefill_tokens += e.n;
    SparseSeq* sp = batch[e.src].sparse;
    if (e.decode) (e.sparse ? stats.sparse_layer_steps : stats.dense_layer_steps) += n_full;
    if (!sp) continue;
    SparseStats& ss = sp->stats;
    ss.layer_steps += n_full;
    ss.context_tokens += int64_t{e.len} * n_full;
    if (!e.sparse) {
      ss.selected_tokens += int64_t{e.len} * n_full;
      continue;
    }
    const GpuPolicy& pol = pols[e.pol];
    if (pol.scorer != GpuScorer::none) ss.selections += n_full;
    ss.selected_tokens +=
        int64_t{std::min(e.len, pol.sinks + pol.top_k + pol.local + e.n)} * n_full;
    if (e.decode && pol.selection_cache) {
      ss.cache_lookups += n_full;
      Slot& sl = slots[e.slot];
      ss.cache_hits += hits_host[e.slot] - sl.hits_seen;
      sl.hits_seen = hits_host[e.slot];
    }
  }
  return {};
}

// ---- the public face ----

CudaRunner::CudaRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaRunner::~CudaRunner() = default;

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(const Model& model, const RunnerLimits& lim,
                                                       const Options& opt) {
  auto impl = std::make_unique<Impl>();
  SIEVE_TRY(impl->init(model, lim, opt));
  return std::unique_ptr<CudaRunner>(new CudaRunner(std::move(impl)));
}

Status CudaRunner::supports(const PolicyConfig& p) const {
  auto g = gpu_policy_from(p, &impl_->hp);
  if (!g) return g.error();
  if (g->sparse && g->top_k > k_max_top_k) {
    return make_error(
        "policy '{}': top_k={} is above the CUDA backend's {} (lower top_k or use --backend cpu)",
        p.preset, g->top_k, k_max_top_k);
  }
  return {};
}

Status CudaRunner::run(std::span<const BatchEntry> batch, std::vector<float>& logits) {
  return impl_->run(batch, logits);
}
int64_t CudaRunner::kv_capacity_bytes() const {
  return impl_->kv_capacity;
}
Status CudaRunner::attach(KvStore& kv) {
  return impl_->attach(kv);
}
std::string CudaRunner::device_name() const {
  return impl_->prop.name;
}
int64_t CudaRunner::weight_bytes() const {
  return impl_->weight_bytes;
}
int64_t CudaRunner::kv_pool_bytes() const {
  return impl_->kv_mem.bytes;
}
const CudaRunnerStats& CudaRunner::stats() const {
  return impl_->stats;
}

RunnerFactory cuda_runner_factory(const CudaRunner::Options& opt) {
  return [opt](const Model& m, const RunnerLimits& lim) -> Result<std::unique_ptr<ModelRunner>> {
    auto r = CudaRunner::create(m, lim, opt);
    if (!r) return r.error();
    return std::unique_ptr<ModelRunner>(std::move(r.value()));
  };
}

}  // namespace sieve
