// Validation and planning for the CUDA launches (host compiler: the error messages use
// fmt, which nvcc's front end cannot compile).
#include "backend/cuda/cuda_ops.h"

#include <algorithm>

namespace sieve::cuda {
namespace {

constexpr int k_decode_tile = 64;
constexpr int k_max_splits = 256;

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return make_error("cuda: {} failed: {} (hint: check the sizes and pointers passed in)", what,
                    cudaGetErrorString(e));
}

Status check_pages(const page_table& pt, const char* who) {
  if (pt.indptr == nullptr || pt.indices == nullptr || pt.last_page_len == nullptr)
    return make_error("{}: page table pointers must be set (indptr, indices, last_page_len)", who);
  if (pt.batch <= 0) return make_error("{}: batch = {}, expected > 0", who, pt.batch);
  if (pt.page_size <= 0) return make_error("{}: page_size = {}, expected > 0", who, pt.page_size);
  return {};
}

Status check_kv(const paged_kv& kv, int n_q_heads, bool need_v, const char* who) {
  SIEVE_TRY(check_pages(kv.pages, who));
  if (kv.k == nullptr || (need_v && kv.v == nullptr))
    return make_error("{}: K/V pointers are null", who);
  if (kv.type != dtype::bf16 && kv.type != dtype::f16)
    return make_error("{}: kv type {} unsupported (bf16 or f16)", who, static_cast<int>(kv.type));
  if (kv.head_dim != 64 && kv.head_dim != 128 && kv.head_dim != 256)
    return make_error("{}: head_dim = {} unsupported (64, 128 or 256; pad others)", who,
                      kv.head_dim);
  if (kv.n_kv_heads <= 0 || n_q_heads % kv.n_kv_heads != 0)
    return make_error("{}: n_q_heads = {} is not a multiple of n_kv_heads = {}", who, n_q_heads,
                      kv.n_kv_heads);
  if (n_q_heads / kv.n_kv_heads > 8)
    return make_error("{}: {} query heads per kv head; at most 8 are supported", who,
                      n_q_heads / kv.n_kv_heads);
  return {};
}

Status check_set(const token_set& s, int n_kv, const char* who) {
  if (s.sel_idx == nullptr) return {};
  if (s.sel_count == nullptr) return make_error("{}: sel_idx set but sel_count is null", who);
  if (s.sel_heads != 1 && s.sel_heads != n_kv)
    return make_error("{}: sel_heads = {}, expected 1 or n_kv_heads = {}", who, s.sel_heads, n_kv);
  if (s.n_sink < 0 || s.n_window < 0) return make_error("{}: negative n_sink / n_window", who);
  return {};
}

void fix_shift(page_table& pt) {
  pt.page_shift = page_shift_of(pt.page_size);
}

}  // namespace

Result<device_facts> current_device() {
  static device_facts facts;
  static cudaError_t err = [] {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    cudaDeviceProp prop{};
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) return e;
    facts.n_sm = prop.multiProcessorCount;
    facts.l2_bytes = prop.l2CacheSize;
    facts.cc_major = prop.major;
    facts.cc_minor = prop.minor;
    facts.global_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    return cudaSuccess;
  }();
  if (err != cudaSuccess) return make_error("cuda: no usable device ({})", cudaGetErrorString(err));
  return facts;
}

int32_t page_shift_of(int32_t page_size) {
  if (page_size <= 0 || (page_size & (page_size - 1)) != 0) return -1;
  int s = 0;
  while ((1 << s) < page_size) ++s;
  return s;
}

int64_t score_row_stride(int32_t max_len) {
  const int64_t t = select_tile_scores();
  return std::max<int64_t>(1, (max_len + t - 1) / t) * t;
}
int32_t select_max_tiles(int32_t max_len) {
  const int t = select_tile_scores();
  return std::max(1, (max_len + t - 1) / t);
}
int64_t select_ws_bytes(int32_t n_rows, int32_t max_len) {
  return select_workspace_bytes(n_rows, select_max_tiles(max_len));
}
int64_t select_ws_header_bytes() {
  return select_header_bytes();
}

int32_t decode_splits(int32_t n_groups, int32_t max_list, int32_t n_sm, int32_t head_dim) {
  // one wave of resident CTAs (two per SM, one for head_dim 256): every CTA streams its
  // share once and the prologue/epilogue cost is paid once; at least two tiles per split
  const int per_sm = head_dim >= 256 ? 1 : 2;
  const int target = std::max(1, per_sm * n_sm / std::max(1, n_groups));
  const int by_work = std::max(1, max_list / (2 * k_decode_tile));
  return std::clamp(std::min(target, by_work), 1, k_max_splits);
}
int64_t decode_ws_o_floats(int32_t batch, int32_t n_kv, int32_t n_splits, int32_t G,
                           int32_t head_dim) {
  return static_cast<int64_t>(batch) * n_kv * n_splits * G * head_dim;
}
int64_t decode_ws_ml_floats(int32_t batch, int32_t n_kv, int32_t n_splits, int32_t G) {
  return static_cast<int64_t>(batch) * n_kv * n_splits * G * 2;
}
namespace {
// Tokens per CTA such that n_rows * ceil(max_len / chunk) CTAs fit in one wave of `resident`
// CTAs: a second wave of a few CTAs costs a whole CTA's time (exact scoring at 1M, B=1: 8 rows
// x 50 chunks = 400 CTAs for 396 slots took 824 us, 49 chunks 603-608 us; bench/RESULTS-cuda.md,
// run 6). A multiple of `align`, at least `min_chunk`; rows beyond one wave get one CTA each.
int32_t one_wave_chunk(int64_t n_rows, int64_t max_len, int64_t resident, int64_t align,
                       int64_t min_chunk) {
  const int64_t per_row = std::max<int64_t>(1, resident / std::max<int64_t>(1, n_rows));
  const int64_t c = (max_len + per_row - 1) / per_row;
  return static_cast<int32_t>(std::max((c + align - 1) / align * align, min_chunk));
}
}  // namespace

int32_t score_chunk_tokens(int32_t n_rows, int32_t max_len, int32_t n_sm) {
  // three resident CTAs per SM (64 KB of K stages each), >= 512 tokens per CTA
  return one_wave_chunk(n_rows, max_len, 3 * static_cast<int64_t>(n_sm), k_decode_tile, 512);
}
int32_t sketch_chunk_tokens(int32_t n_rows, int32_t max_len, int32_t n_sm) {
  // about two CTAs per SM; 1024 tokens (4 per thread) per step
  return one_wave_chunk(n_rows, max_len, 2 * static_cast<int64_t>(n_sm), 1024, 1024);
}

Status decode_attention(decode_params p, const launch_cfg& lc) {
  const char* who = "decode_attention";
  SIEVE_TRY(check_kv(p.kv, p.n_q_heads, true, who));
  SIEVE_TRY(check_set(p.set, p.kv.n_kv_heads, who));
  if (p.q == nullptr || p.o == nullptr) return make_error("{}: q / o are null", who);
  if (p.n_splits < 1 || p.n_splits > k_max_splits)
    return make_error("{}: n_splits = {} outside [1, {}]", who, p.n_splits, k_max_splits);
  if (p.n_splits > 1 && (p.ws_o == nullptr || p.ws_ml == nullptr || p.ws_counter == nullptr))
    return make_error("{}: n_splits = {} needs ws_o, ws_ml and ws_counter", who, p.n_splits);
  fix_shift(p.kv.pages);
  return cuda_status(launch_decode(p, false, lc), who);
}

Status score_exact(decode_params p, const launch_cfg& lc) {
  const char* who = "score_exact";
  SIEVE_TRY(check_kv(p.kv, p.n_q_heads, false, who));
  if (p.q == nullptr || p.logits == nullptr || p.stats == nullptr)
    return make_error("{}: q / logits / stats are null", who);
  if (p.chunk_tokens <= 0 || p.chunk_tokens % k_decode_tile != 0)
    return make_error("{}: chunk_tokens = {} must be a positive multiple of {}", who,
                      p.chunk_tokens, k_decode_tile);
  if (p.n_splits < 1) return make_error("{}: n_splits (chunks) = {}", who, p.n_splits);
  if (p.zero_ws != nullptr && p.zero_bytes % 16 != 0)
    return make_error("{}: zero_bytes = {} must be a multiple of 16", who, p.zero_bytes);
  fix_shift(p.kv.pages);
  return cuda_status(launch_decode(p, true, lc), who);
}

Status soft_vote(soft_vote_params p, const launch_cfg& lc) {
  const char* who = "soft_vote";
  if (p.logits == nullptr || p.stats == nullptr || p.scores == nullptr)
    return make_error("{}: logits / stats / scores are null", who);
  if (p.G < 1 || p.G > 8) return make_error("{}: G = {} outside [1, 8]", who, p.G);
  if (p.fold < 1 || p.n_rows % p.fold != 0 || p.fold * p.G > soft_vote_max_heads)
    return make_error("{}: fold = {} must divide n_rows = {} with fold x G <= {}", who, p.fold,
                      p.n_rows, soft_vote_max_heads);
  if (p.hist.seq_len == nullptr)
    return make_error("{}: hist.seq_len is required (row lengths)", who);
  if (p.logit_stride % 4 != 0 || p.score_stride % 4 != 0)
    return make_error("{}: strides must be multiples of 4 (use score_row_stride)", who);
  auto dev = current_device();
  if (!dev) return dev.error();
  const int tiles = select_max_tiles(p.max_len);
  const int grid_x = std::clamp(2 * dev->n_sm / std::max(1, p.n_rows / p.fold), 1, tiles);
  return cuda_status(launch_soft_vote(p, grid_x, lc), who);
}

Status sketch_score(sketch_score_params p, const launch_cfg& lc) {
  const char* who = "sketch_score";
  SIEVE_TRY(check_pages(p.sk.pages, who));
  if (p.sk.keys == nullptr || p.q == nullptr) return make_error("{}: keys / q are null", who);
  if (p.sk.dim != 8 && p.sk.dim != 16 && p.sk.dim != 32)
    return make_error("{}: sketch dim = {} unsupported (8, 16 or 32)", who, p.sk.dim);
  if (p.sk.type != dtype::bf16 && p.sk.type != dtype::fp8_e4m3 && p.sk.type != dtype::int8)
    return make_error("{}: sketch type {} unsupported (bf16, fp8_e4m3, int8)", who,
                      static_cast<int>(p.sk.type));
  if (p.n_sq < 1 || p.n_sq > 32) return make_error("{}: n_sq = {} outside [1, 32]", who, p.n_sq);
  if (p.chunk_tokens <= 0 || p.n_chunks <= 0)
    return make_error("{}: chunk_tokens / n_chunks unset", who);
  if (p.mode == sketch_mode::stats && p.stats == nullptr)
    return make_error("{}: stats mode needs stats", who);
  if (p.mode == sketch_mode::vote && p.stats == nullptr)
    return make_error("{}: vote mode needs pass-1 stats", who);
  if (p.mode != sketch_mode::stats && p.scores == nullptr)
    return make_error("{}: scores are null", who);
  if (p.mode != sketch_mode::stats && p.hist.ws.base != nullptr && p.hist.seq_len == nullptr)
    return make_error("{}: the fused histogram needs hist.seq_len", who);
  if (p.zero_ws != nullptr && p.zero_bytes % 16 != 0)
    return make_error("{}: zero_bytes = {} must be a multiple of 16", who, p.zero_bytes);
  fix_shift(p.sk.pages);
  return cuda_status(launch_sketch_score(p, lc), who);
}

Status select(select_params p, bool hist_done, const launch_cfg& lc) {
  const char* who = "select";
  if (p.scores == nullptr || p.seq_len == nullptr || p.out_idx == nullptr ||
      p.out_count == nullptr || p.ws.base == nullptr)
    return make_error("{}: scores / seq_len / out_idx / out_count / ws.base must be set", who);
  if (p.n_rows <= 0 || p.rows_per_seq <= 0)
    return make_error("{}: n_rows = {}, rows_per_seq = {}", who, p.n_rows, p.rows_per_seq);
  if (p.out_stride < p.budget.k_max)
    return make_error("{}: out_stride = {} < k_max = {}", who, p.out_stride, p.budget.k_max);
  if (p.budget.k_max < 0 || p.budget.k_min < 0)
    return make_error("{}: negative k_max / k_min", who);
  if (p.score_stride % 4 != 0) return make_error("{}: score_stride must be a multiple of 4", who);
  if (p.ws.n_rows < p.n_rows)
    return make_error("{}: workspace sized for {} rows, need {}", who, p.ws.n_rows, p.n_rows);
  auto dev = current_device();
  if (!dev) return dev.error();
  const int grid_x = std::clamp(4 * dev->n_sm / p.n_rows, 1, p.ws.max_tiles);
  return cuda_status(launch_select(p, hist_done, grid_x, lc), who);
}

Status kv_append(kv_append_params p, const launch_cfg& lc) {
  const char* who = "kv_append";
  if (p.n_new < 0) return make_error("{}: n_new = {}", who, p.n_new);
  if (p.n_new == 0) return {};
  if (p.k == nullptr || p.v == nullptr || p.k_new == nullptr || p.v_new == nullptr ||
      p.slot == nullptr)
    return make_error("{}: k / v / k_new / v_new / slot are null", who);
  if (p.head_dim % 8 != 0)
    return make_error("{}: head_dim = {} must be a multiple of 8", who, p.head_dim);
  if (p.type != dtype::bf16 && p.type != dtype::f16)
    return make_error("{}: kv type must be bf16 or f16", who);
  if (p.sk_keys != nullptr) {
    if (p.n_sk_heads <= 0 || p.n_kv_heads % p.n_sk_heads != 0)
      return make_error("{}: n_sk_heads = {} must divide n_kv_heads = {}", who, p.n_sk_heads,
                        p.n_kv_heads);
    if (p.proj == nullptr || p.sk_dim <= 0)
      return make_error("{}: sketch needs proj and sk_dim", who);
    if (p.sk_scale <= 0.f) return make_error("{}: sk_scale = {} must be > 0", who, p.sk_scale);
  }
  if (static_cast<int64_t>(p.n_kv_heads) * p.head_dim * 4 > 64 * 1024)
    return make_error("{}: n_kv_heads * head_dim = {} too large for one CTA", who,
                      p.n_kv_heads * p.head_dim);
  return cuda_status(launch_kv_append(p, lc), who);
}

Status sketch_query(sketch_query_params p, const launch_cfg& lc) {
  const char* who = "sketch_query";
  if (p.q == nullptr) return make_error("{}: q is null", who);
  if (p.batch <= 0 || p.n_q_heads <= 0 || p.head_dim <= 0)
    return make_error("{}: empty shape", who);
  if (p.proj != nullptr) {
    if (p.n_kv_heads <= 0 || p.n_q_heads % p.n_kv_heads != 0 || p.n_sk_heads <= 0 ||
        p.n_kv_heads % p.n_sk_heads != 0)
      return make_error("{}: heads must nest: n_q {} / n_kv {} / n_sk {}", who, p.n_q_heads,
                        p.n_kv_heads, p.n_sk_heads);
    if (p.q_out == nullptr) return make_error("{}: proj set but q_out is null", who);
  }
  return cuda_status(launch_sketch_query(p, lc), who);
}

Status selection_cache_probe(sel_cache_params p, const launch_cfg& lc) {
  const char* who = "selection_cache_probe";
  if (!p.q || !p.pos || !p.seq_len || !p.fp || !p.state || !p.sel_idx || !p.sel_count || !p.skip)
    return make_error("{}: q, pos, seq_len, fp, state, sel_idx, sel_count and skip must be set",
                      who);
  if (p.n_q_heads <= 0 || p.head_dim <= 0 || p.head_dim > 256)
    return make_error("{}: {} heads of dim {} (dim 1..256)", who, p.n_q_heads, p.head_dim);
  if (p.n_rot < 0 || p.n_rot > p.head_dim || p.n_rot % 2 != 0)
    return make_error("{}: n_rot {} with head_dim {}", who, p.n_rot, p.head_dim);
  if (p.n_rot > 0 && !p.inv_freq)
    return make_error("{}: inv_freq (the RoPE pairs' angles per position) must be set", who);
  if (p.n_sink < 0 || p.n_window < 0 || p.max_gap < 0)
    return make_error("{}: n_sink {}, n_window {}, max_gap {}", who, p.n_sink, p.n_window,
                      p.max_gap);
  return cuda_status(launch_sel_cache(p, lc), who);
}

Status score_fold(score_fold_params p, const launch_cfg& lc) {
  const char* who = "score_fold";
  if (p.in == nullptr || p.out == nullptr || p.seq_len == nullptr)
    return make_error("{}: in / out / seq_len must be set", who);
  if (p.n_in <= 0 || p.fold <= 0 || p.n_in % p.fold != 0)
    return make_error("{}: fold = {} must divide n_in = {}", who, p.fold, p.n_in);
  if (p.pool < 0 || p.pool > 4096)
    return make_error("{}: pool = {} outside [0, 4096]", who, p.pool);
  if (p.max_len <= 0) return make_error("{}: max_len = {}", who, p.max_len);
  if (p.in_stride < p.max_len || p.out_stride < p.max_len)
    return make_error("{}: strides {} / {} shorter than max_len = {}", who, p.in_stride,
                      p.out_stride, p.max_len);
  auto dev = current_device();
  if (!dev) return dev.error();
  const int tiles = (p.max_len + score_fold_tile() - 1) / score_fold_tile();
  const int grid_x = std::clamp(2 * dev->n_sm / (p.n_in / p.fold), 1, tiles);
  return cuda_status(launch_score_fold(p, grid_x, lc), who);
}

Status clear_selection(int32_t* count, const int32_t* skip, const launch_cfg& lc) {
  if (count == nullptr) return make_error("clear_selection: count is null");
  return cuda_status(launch_clear_selection(count, skip, lc), "clear_selection");
}

Status hard_vote(hard_vote_params p, int32_t max_len, const launch_cfg& lc) {
  const char* who = "hard_vote";
  if (p.idx == nullptr || p.count == nullptr || p.soft == nullptr || p.votes == nullptr ||
      p.out == nullptr || p.seq_len == nullptr)
    return make_error("{}: idx / count / soft / votes / out / seq_len must be set", who);
  if (p.n_heads <= 0 || p.heads_per_row <= 0 || p.n_heads % p.heads_per_row != 0)
    return make_error("{}: heads_per_row = {} must divide n_heads = {}", who, p.heads_per_row,
                      p.n_heads);
  if (max_len <= 0 || p.stride < max_len)
    return make_error("{}: stride {} shorter than max_len {}", who, p.stride, max_len);
  auto dev = current_device();
  if (!dev) return dev.error();
  const int rows = p.n_heads / p.heads_per_row;
  const int grid_x = std::clamp(2 * dev->n_sm / rows, 1, (max_len + 255) / 256);
  return cuda_status(launch_hard_vote(p, grid_x, lc), who);
}

Status block_sums(block_pick_params p, const launch_cfg& lc) {
  const char* who = "block_sums";
  if (p.scores == nullptr || p.block_scores == nullptr || p.n_blocks == nullptr ||
      p.seq_len == nullptr)
    return make_error("{}: scores / block_scores / n_blocks / seq_len must be set", who);
  if (p.block <= 0 || p.n_rows <= 0 || p.max_len <= 0 || p.stride < p.max_len)
    return make_error("{}: block {}, rows {}, max_len {}, stride {}", who, p.block, p.n_rows,
                      p.max_len, p.stride);
  return cuda_status(launch_block_sums(p, lc), who);
}

Status block_expand(block_pick_params p, const launch_cfg& lc) {
  const char* who = "block_expand";
  if (p.blk_idx == nullptr || p.blk_count == nullptr || p.out_idx == nullptr ||
      p.out_count == nullptr || p.seq_len == nullptr)
    return make_error("{}: blk_idx / blk_count / out_idx / out_count / seq_len must be set", who);
  if (p.block <= 0 || p.n_rows <= 0 || p.max_blocks < 0 || p.max_blocks > p.blk_stride ||
      int64_t{p.max_blocks} * p.block > p.out_stride)
    return make_error("{}: {} blocks of {} do not fit out_stride = {} (block stride {})", who,
                      p.max_blocks, p.block, p.out_stride, p.blk_stride);
  return cuda_status(launch_block_expand(p, lc), who);
}

Status quest_score(quest_params p, const launch_cfg& lc) {
  const char* who = "quest_score";
  SIEVE_TRY(check_kv(p.kv, p.n_q_heads, false, who));
  if (p.kv.type != dtype::bf16) return make_error("{}: keys must be bf16", who);
  if (p.kv.pages.batch != 1) return make_error("{}: one sequence per call", who);
  if (p.q == nullptr || p.scores == nullptr || p.n_blocks == nullptr)
    return make_error("{}: q / scores / n_blocks are null", who);
  const int32_t G = p.n_q_heads / p.kv.n_kv_heads;
  if (G > 8 || p.kv.head_dim > 256)
    return make_error("{}: {} query heads per KV head of dim {} (at most 8 of 256)", who, G,
                      p.kv.head_dim);
  if (p.block <= 0 || p.sinks < 0 || p.local < 0 || p.n_queries < 1)
    return make_error("{}: block {}, sinks {}, local {}, queries {}", who, p.block, p.sinks,
                      p.local, p.n_queries);
  auto dev = current_device();
  if (!dev) return dev.error();
  const int grid_x = std::max(1, 2 * dev->n_sm / p.kv.n_kv_heads);
  fix_shift(p.kv.pages);
  return cuda_status(launch_quest_score(p, grid_x, lc), who);
}

Status quest_expand(quest_expand_params p, const launch_cfg& lc) {
  const char* who = "quest_expand";
  if (p.blk_idx == nullptr || p.blk_count == nullptr || p.seq_len == nullptr ||
      p.out_idx == nullptr || p.out_count == nullptr)
    return make_error("{}: blk_idx / blk_count / seq_len / out_idx / out_count must be set", who);
  if (p.n_rows <= 0 || p.block <= 0 || p.n_queries < 1)
    return make_error("{}: rows {}, block {}, queries {}", who, p.n_rows, p.block, p.n_queries);
  if (p.max_blocks < 0 || p.max_blocks > p.blk_stride ||
      int64_t{p.out_stride} < (int64_t{p.max_blocks} + 2) * p.block)
    return make_error("{}: {} blocks of {} (block stride {}) do not fit out_stride = {}", who,
                      p.max_blocks, p.block, p.blk_stride, p.out_stride);
  return cuda_status(launch_quest_expand(p, lc), who);
}

Status prefill_attention(prefill_params p, const launch_cfg& lc) {
  const char* who = "prefill_attention";
  SIEVE_TRY(check_kv(p.kv, p.n_q_heads, true, who));
  SIEVE_TRY(check_set(p.set, p.kv.n_kv_heads, who));
  if (p.q == nullptr || p.o == nullptr || p.qo_indptr == nullptr)
    return make_error("{}: q / o / qo_indptr are null", who);
  if (p.max_q <= 0 || p.total_q <= 0)
    return make_error("{}: max_q = {}, total_q = {}", who, p.max_q, p.total_q);
  if (p.n_splits < 1) return make_error("{}: n_splits = {}", who, p.n_splits);
  if (p.n_splits > 1 && (p.ws_o == nullptr || p.ws_ml == nullptr))
    return make_error("{}: n_splits > 1 needs ws_o and ws_ml", who);
  if (p.tile_rows != 0 && p.tile_rows != 64 && p.tile_rows != 128)
    return make_error("{}: tile_rows = {} (0, 64 or 128)", who, p.tile_rows);
  fix_shift(p.kv.pages);
  return cuda_status(launch_prefill(p, lc), who);
}

int32_t prefill_splits(const prefill_params& p, int32_t max_splits) {
  auto dev = current_device();
  if (!dev || p.kv.n_kv_heads <= 0 || p.n_q_heads <= 0) return 1;
  const int64_t G = p.n_q_heads / p.kv.n_kv_heads;
  const int64_t rows = prefill_rows_per_cta(p);
  const int64_t ctas =
      (p.max_q * G + rows - 1) / rows * p.kv.n_kv_heads * std::max(1, p.kv.pages.batch);
  const int64_t slots = int64_t{dev->n_sm} * std::max(1, prefill_resident_ctas(p));
  if (ctas <= 0 || ctas >= slots) return 1;
  return static_cast<int32_t>(std::clamp<int64_t>(slots / ctas, 1, max_splits));
}

int64_t step_ws_bytes(int32_t batch) {
  auto dev = current_device();
  return step_workspace_bytes(batch, dev ? dev->n_sm : 1024);
}
int64_t step_ws_hist_word(int32_t b) {
  auto dev = current_device();
  return step_workspace_hist_word(b, dev ? dev->n_sm : 1024);
}

namespace {
void normalize_step(step_params& p) {
  fix_shift(p.sk.pages);
  fix_shift(p.attend.kv.pages);
  if (!p.score) {  // only the key format picks the instance
    p.sk.type = dtype::fp8_e4m3;
    p.sk.dim = 16;
  }
}
}  // namespace

step_sync sparse_step_mode(step_params p) {
  normalize_step(p);
  return launch_step_choice(p);
}

Status sparse_step(step_params p, const launch_cfg& lc) {
  const char* who = "sparse_step";
  if (p.batch <= 0) return make_error("{}: batch = {}, expected > 0", who, p.batch);
  if (!(p.budget.top_p > 0.f))
    return make_error("{}: top_p = {} must be > 0 (>= 1: top-k only)", who, p.budget.top_p);
  if (p.budget.top_p < 1.f && p.score)
    return make_error(
        "{}: top_p = {} with score = true: the step's raw sketch logits are no distribution to "
        "take a mass share of; score with sketch_score (vote mode) and select alone (score = "
        "false) over its probabilities",
        who, p.budget.top_p);
  if (p.budget.top_p < 1.f && (p.sync == step_sync::grid || (p.attend_on && !p.attend_chained)))
    return make_error(
        "{}: top_p = {} runs in the cluster path only: use sync = automatic or cluster with the "
        "attention chained or off (or select())",
        who, p.budget.top_p);
  if (p.score) {
    SIEVE_TRY(check_pages(p.sk.pages, who));
    if (p.sk.pages.batch != p.batch)
      return make_error("{}: the sketch page table holds {} sequences, step has {}", who,
                        p.sk.pages.batch, p.batch);
    if (page_shift_of(p.sk.pages.page_size) < 0)
      return make_error("{}: page_size = {} must be a power of two", who, p.sk.pages.page_size);
    if (p.sk.n_sk_heads != 1)
      return make_error(
          "{}: {} sketch heads; the fused step scores one shared sketch head per sequence (use "
          "sketch_score + select for per-kv-head rows)",
          who, p.sk.n_sk_heads);
    if (p.sk.type != dtype::fp8_e4m3 || p.sk.dim != 16)
      return make_error(
          "{}: sketch keys must be fp8_e4m3 with d_s 16 (got type {}, d_s {}); other formats "
          "run the separate kernels",
          who, static_cast<int>(p.sk.type), p.sk.dim);
    if (p.sk.keys == nullptr || p.q == nullptr) return make_error("{}: keys / q are null", who);
    if (p.n_sq < 1 || p.n_sq > 32) return make_error("{}: n_sq = {} outside [1, 32]", who, p.n_sq);
  }
  if (p.scores == nullptr || p.seq_len == nullptr || p.out_idx == nullptr ||
      p.out_count == nullptr || p.ws == nullptr)
    return make_error("{}: scores / seq_len / out_idx / out_count / ws must be set", who);
  if (p.budget.k_max < 0) return make_error("{}: negative k_max", who);
  if (p.rows_per_seq < 1 || (p.rows_per_seq > 1 && (p.score || p.attend_on)))
    return make_error(
        "{}: rows_per_seq = {}; more than one row per sequence is for selection alone (score "
        "and attend_on false)",
        who, p.rows_per_seq);
  if (p.batch % p.rows_per_seq != 0)
    return make_error("{}: batch = {} rows is not a multiple of rows_per_seq = {}", who, p.batch,
                      p.rows_per_seq);
  if (p.max_len <= 0)
    return make_error("{}: max_len = {} (the longest sequence) must be set", who, p.max_len);
  if (p.out_stride < p.budget.k_max)
    return make_error("{}: out_stride = {} < k_max = {}", who, p.out_stride, p.budget.k_max);
  if (p.attend_on) {
    const decode_params& a = p.attend;
    SIEVE_TRY(check_kv(a.kv, a.n_q_heads, true, who));
    if (a.kv.pages.batch != p.batch)
      return make_error("{}: attention page table holds {} sequences, step has {}", who,
                        a.kv.pages.batch, p.batch);
    if (a.q == nullptr || a.o == nullptr) return make_error("{}: attend q / o are null", who);
    if (a.set.sel_idx != p.out_idx || a.set.sel_count != p.out_count ||
        a.set.sel_stride != p.out_stride || a.set.sel_heads != 1 || a.set.n_sink != p.budget.lo ||
        a.set.n_window != p.budget.tail - 1)
      return make_error(
          "{}: attend.set must read this step's selection (sel_idx/sel_count/sel_stride = "
          "out_*, sel_heads 1, n_sink = budget.lo, n_window = budget.tail - 1)",
          who);
    if (a.n_splits < 1 || a.n_splits > k_max_splits)
      return make_error("{}: n_splits = {} outside [1, {}]", who, a.n_splits, k_max_splits);
    if (a.n_splits > 1 && (a.ws_o == nullptr || a.ws_ml == nullptr || a.ws_counter == nullptr))
      return make_error("{}: n_splits = {} needs ws_o, ws_ml and ws_counter", who, a.n_splits);
  } else if (p.attend.kv.head_dim != 64 && p.attend.kv.head_dim != 128 &&
             p.attend.kv.head_dim != 256) {
    p.attend.kv.head_dim = 128;  // selection only: any instance will do
    if (p.attend.kv.type != dtype::f16) p.attend.kv.type = dtype::bf16;
  }
  normalize_step(p);
  const cudaError_t e = launch_sparse_step(p, lc);
  if (e == cudaErrorInvalidConfiguration)
    return make_error("{}: batch = {} exceeds the resident CTAs of the device; split the batch",
                      who, p.batch);
  if (e == cudaErrorNotSupported)
    return make_error(
        "{}: the cluster path (sync = cluster, or a top-p budget) needs an sm_90 device, the "
        "attention chained or off, and rows that fit the shared memory of one cluster (max_len "
        "= {}); use step_sync::automatic with top-k, or select() for top-p",
        who, p.max_len);
  if (e == cudaErrorLaunchOutOfResources)
    return make_error(
        "{}: max_len = {} is too long for the per-CTA buffers at batch {}; split the batch or "
        "use the separate kernels",
        who, p.max_len, p.batch);
  SIEVE_TRY(cuda_status(e, who));
  if (!p.attend_on || !p.attend_chained) return {};
  // With lc.pdl the decode kernel's launch overlaps the step's tail. The step kernel does not
  // trigger its dependents early: griddepcontrol.launch_dependents at its start made the pair
  // 5-15 us slower on the H200 (run 6).
  return cuda_status(launch_decode(p.attend, false, lc), who);
}

}  // namespace sieve::cuda
