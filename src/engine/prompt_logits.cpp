#include "engine/prompt_logits.h"

#include <algorithm>

#include "engine/forward.h"
#include "engine/kv_binding.h"

namespace sieve {

Result<std::vector<float>> prompt_logits(const Model& model, ThreadPool& pool,
                                         std::span<const int32_t> prompt, int32_t n_batch) {
  if (prompt.empty()) return make_error("the prompt is empty");
  if (n_batch <= 0) return make_error("batch size {} must be positive", n_batch);
  const ModelHParams& hp = model.hp;
  const int64_t n = static_cast<int64_t>(prompt.size());
  KvConfig cfg = kv_config_for(hp, 0, 16, hp.arch + ":" + hp.name);
  cfg.budget_bytes = kv_budget_bytes(hp, n, 1, 16, 0, n_batch);
  cfg.prefix_cache = false;  // every position's logits are computed
  auto store = KvStore::create(cfg);
  if (!store) return store.error();
  KvStore& kv = store.value();
  Forward fwd(model, pool, kv);
  auto added = kv.add_sequence(std::span<const int32_t>());
  if (!added) return added.error();
  std::vector<float> all, logits;
  for (int64_t i = 0; i < n; i += n_batch) {
    const int64_t m = std::min<int64_t>(n_batch, n - i);
    const KvAppend app{added->seq, prompt.subspan(i, m)};
    auto room = kv.reserve(std::span<const KvAppend>(&app, 1));
    if (!room) return room.error();
    if (!room->fits()) return make_error("the KV store has no room for {} more tokens", m);
    BatchEntry e;
    e.seq = added->seq;
    e.tokens = prompt.subspan(i, m);
    e.all_logits = true;
    SIEVE_TRY(fwd.run(std::span<const BatchEntry>(&e, 1), logits));
    all.insert(all.end(), logits.begin(), logits.end());
    SIEVE_TRY(kv.publish(added->seq));
  }
  return all;
}

}  // namespace sieve
