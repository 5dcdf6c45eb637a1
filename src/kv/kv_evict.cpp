// Token eviction: drop arbitrary tokens of one stream, compact the rest in place.
#include <algorithm>
#include <numeric>

#include "core/assert.h"
#include "kv/kv_store.h"

namespace sieve {

Result<KvRoom> KvStore::evict(KvSeqId id, int32_t stream, std::span<const int32_t> indices) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return make_error("kv evict: unknown sequence {}", id);
  if (stream < 0 || stream >= geo_.n_stream)
    return make_error("kv evict: stream {} out of range 0..{}", stream, geo_.n_stream - 1);
  StreamTable& st = it->second.streams[stream];
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= st.n_tokens)
      return make_error("kv evict: index {} out of range 0..{} (sequence {}, stream {})",
                        indices[i], st.n_tokens - 1, id, stream);
    if (i > 0 && indices[i] <= indices[i - 1])
      return make_error("kv evict: indices must strictly increase ({} after {})", indices[i],
                        indices[i - 1]);
  }
  if (indices.empty()) return KvRoom{0, pool_.n_available()};

  const int32_t ps = geo_.page_size;
  const int32_t e0 = indices[0];
  const int32_t p0 = e0 / ps;  // pages before p0 are untouched
  const int32_t n_keep = st.n_tokens - static_cast<int32_t>(indices.size());
  const int32_t n_pages_keep = (n_keep + ps - 1) / ps;

  // Destination of kept token d (d >= p0 * ps) is page d / ps of the NEW table. Reusing the
  // old page at the same index is safe in place: it held token d, which the forward scan has
  // already read (source index >= destination index). A page other tables share must not
  // change under them, so its place takes a fresh page (copy-on-write).
  int64_t n_fresh = 0;
  for (int32_t k = p0; k < n_pages_keep; ++k) n_fresh += pool_.refcount(st.pages[k]) > 1 ? 1 : 0;
  const KvRoom room{n_fresh, pool_.n_available()};
  if (!room.fits()) return room;

  const KvArenas& a = pool_.arenas();
  // Tokens from e0 on move or vanish: the plain-prefix property ends at e0's position.
  st.pristine_pos = std::min(st.pristine_pos, a.pos[a.slot(st.pages[p0], e0 % ps)]);
  st.published_pos = std::min(st.published_pos, st.pristine_pos);

  std::vector<int32_t> dest(st.pages.begin() + p0, st.pages.begin() + n_pages_keep);
  for (int32_t& page : dest) {
    if (pool_.refcount(page) > 1) {
      page = pool_.allocate(stream);
    } else {
      pool_.forget_hash(page);  // its content changes (or it becomes the partial last page)
    }
  }
  // Forward scan from the start of page p0: tokens before e0 stay at their slot unless their
  // page was replaced; later kept tokens shift down over the evicted ones.
  size_t next_evicted = 0;
  int32_t d = p0 * ps;
  for (int32_t i = p0 * ps; i < st.n_tokens; ++i) {
    if (next_evicted < indices.size() && indices[next_evicted] == i) {
      ++next_evicted;
      continue;
    }
    const int64_t src = a.slot(st.pages[i / ps], i % ps);
    const int64_t dst = a.slot(dest[d / ps - p0], d % ps);
    if (src != dst) copy_token(dst, src);
    ++d;
  }
  SIEVE_ASSERT(d == n_keep);

  // Old pages no longer in the table: replaced shared ones and everything past the new end.
  // Released last page first so that LRU reclaims deeper content first.
  std::vector<int32_t> old(st.pages.begin() + p0, st.pages.end());
  st.pages.resize(n_pages_keep);
  std::copy(dest.begin(), dest.end(), st.pages.begin() + p0);
  for (size_t k = old.size(); k-- > 0;) {
    const int32_t idx = p0 + static_cast<int32_t>(k);
    if (idx >= n_pages_keep || st.pages[idx] != old[k]) pool_.release(old[k]);
  }
  st.n_tokens = n_keep;
  return room;
}

Result<KvRoom> KvStore::truncate(KvSeqId id, int32_t stream, int32_t n_keep) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return make_error("kv truncate: unknown sequence {}", id);
  if (stream < 0 || stream >= geo_.n_stream)
    return make_error("kv truncate: stream {} out of range 0..{}", stream, geo_.n_stream - 1);
  const int32_t n = it->second.streams[stream].n_tokens;
  if (n_keep < 0 || n_keep > n)
    return make_error("kv truncate: n_keep = {} out of range 0..{}", n_keep, n);
  std::vector<int32_t> tail(n - n_keep);
  std::iota(tail.begin(), tail.end(), n_keep);
  return evict(id, stream, tail);
}

}  // namespace sieve
