// Randomized stress: many sequences appended in mixed steps, admitted with shared prefixes,
// evicted, truncated, preempted on "no room" and freed, over full and window streams. After
// every operation the store's invariants must hold and every held row must be the row
// written for its (stream, position, token prefix), with a tag proving that no content
// computed after an eviction is ever served as a cached prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "kv/kv_store.h"
#include "kv/kv_test_util.h"

namespace sieve {
namespace {

using V = std::vector<int32_t>;

class Stress {
 public:
  explicit Stress(uint32_t seed) : rng_(seed) {
    KvConfig c;
    c.n_layer = 2;
    c.n_kv_head = 2;
    c.n_head_group = 2;  // 4 streams of one head each
    c.head_dim = 6;
    c.page_size = 4;
    c.sketch_dim = 2;
    c.n_token_scores = 1;
    c.capacity = {KvCapacity::full(), KvCapacity::sliding(10, 3), KvCapacity::full(),
                  KvCapacity::sliding(5, 0)};
    c.hash_salt = "stress";
    c.budget_bytes = make_kv_geometry([&] {
                       KvConfig t = c;
                       t.budget_bytes = 1 << 30;
                       return t;
                     }())
                         ->page_bytes *
                     170;
    kv_ = std::make_unique<KvStore>(kv_test::make_store(c));
    // a tiny vocabulary makes different prompts share pages by chance too
    for (int b = 0; b < 3; ++b) {
      V p(60);
      for (int32_t& t : p) t = rand_int(0, 3);
      library_.push_back(p);
    }
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      const int r = rand_int(0, 99);
      if (seqs_.size() < 2 || (r < 14 && seqs_.size() < 10))
        add();
      else if (r < 60)
        step();
      else if (r < 72)
        evict();
      else if (r < 77)
        truncate();
      else if (r < 85)
        publish();
      else if (r < 90)
        free_one();
      else
        step();
      verify_all();
      if (::testing::Test::HasFatalFailure()) return;
    }
    while (!seqs_.empty()) {
      ASSERT_TRUE(kv_->free_sequence(seqs_.begin()->first).ok());
      seqs_.erase(seqs_.begin());
      SIEVE_EXPECT_KV_OK(*kv_);
    }
    EXPECT_EQ(kv_->pool().n_used(), 0);
  }

  int64_t n_hit_tokens() const { return kv_->stats().n_prefix_hit_tokens; }
  int n_no_room = 0, n_cow = 0, n_window_drops = 0, n_evictions = 0;

 private:
  struct Seq {
    V prompt;
    int32_t n_prompt_done = 0;
    std::vector<V> held;                          // [stream] positions the store must hold
    std::vector<std::map<int32_t, int32_t>> tag;  // [stream] position -> tag written
    std::vector<int32_t> n_evictions;             // [stream]
  };

  int rand_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  const KvGeometry& geo() const { return kv_->geometry(); }

  void add() {
    V prompt(library_[rand_int(0, 2)]);
    prompt.resize(rand_int(1, 60));
    for (int n = rand_int(0, 6); n > 0; --n) prompt.push_back(rand_int(0, 3));
    const int32_t peek = kv_->peek_prefix(prompt);
    const KvSeqAdd a = kv_->add_sequence(prompt).value();
    ASSERT_EQ(a.n_cached, peek);
    ASSERT_EQ(a.n_cached % geo().page_size, 0);
    ASSERT_LT(a.n_cached, static_cast<int32_t>(prompt.size()));
    Seq s;
    s.prompt = prompt;
    s.n_prompt_done = a.n_cached;
    s.held.resize(geo().n_stream);
    s.tag.resize(geo().n_stream);
    s.n_evictions.assign(geo().n_stream, 0);
    for (int32_t st = 0; st < geo().n_stream; ++st) {
      s.held[st] = kv_test::positions(*kv_, a.seq, st);
      for (int32_t p : s.held[st]) s.tag[st][p] = 0;  // shared prefix content is plain
      const KvCapacity& cap = geo().capacity[st];
      for (int32_t p = 0; p < a.n_cached; ++p) {
        const bool needed = !cap.is_window() || p < cap.n_sink || p >= a.n_cached - cap.window;
        if (needed) {
          ASSERT_TRUE(std::binary_search(s.held[st].begin(), s.held[st].end(), p)) << p;
        }
      }
    }
    seqs_.emplace(a.seq, std::move(s));
  }

  KvSeqId pick() {
    auto it = seqs_.begin();
    std::advance(it, rand_int(0, static_cast<int>(seqs_.size()) - 1));
    return it->first;
  }

  // Snapshot of everything an unsuccessful operation must leave alone.
  std::vector<V> snapshot() const {
    std::vector<V> out;
    for (const auto& [id, s] : seqs_)
      for (int32_t st = 0; st < geo().n_stream; ++st) {
        out.push_back(kv_test::pages(*kv_, id, st));
        out.push_back(kv_test::positions(*kv_, id, st));
      }
    out.push_back({kv_->pool().n_free(), kv_->pool().n_cached()});
    return out;
  }

  void step() {
    std::vector<KvSeqId> ids;
    for (int n = rand_int(1, 4); n > 0; --n) {
      const KvSeqId id = pick();
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::vector<V> tokens;
    for (KvSeqId id : ids) {
      Seq& s = seqs_[id];
      const int32_t left = static_cast<int32_t>(s.prompt.size()) - s.n_prompt_done;
      if (left > 0) {
        const int32_t n = std::min(left, rand_int(1, 12));
        tokens.emplace_back(s.prompt.begin() + s.n_prompt_done,
                            s.prompt.begin() + s.n_prompt_done + n);
      } else {
        tokens.push_back({rand_int(0, 3)});
      }
    }
    std::vector<KvAppend> step;
    for (size_t i = 0; i < ids.size(); ++i) step.push_back({ids[i], tokens[i]});
    const KvRoom planned = kv_->plan(step).value();
    const auto before = snapshot();
    std::vector<int32_t> next_pos;
    for (KvSeqId id : ids) next_pos.push_back(kv_->n_tokens(id));
    const KvRoom room = kv_->reserve(step).value();
    ASSERT_EQ(room.fits(), planned.fits());
    ASSERT_EQ(room.n_pages_needed, planned.n_pages_needed);
    if (!room.fits()) {
      ++n_no_room;
      ASSERT_EQ(snapshot(), before);
      // preempt: the scheduler frees a sequence and retries later
      ASSERT_TRUE(kv_->free_sequence(ids[0]).ok());
      seqs_.erase(ids[0]);
      return;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      Seq& s = seqs_[ids[i]];
      const int32_t p = next_pos[i];
      const int32_t n = static_cast<int32_t>(tokens[i].size());
      if (s.n_prompt_done < static_cast<int32_t>(s.prompt.size())) s.n_prompt_done += n;
      const std::span<const int32_t> toks = kv_->tokens(ids[i]);
      for (int32_t st = 0; st < geo().n_stream; ++st) {
        const V actual = kv_test::positions(*kv_, ids[i], st);
        V expect_all = s.held[st];
        for (int32_t j = 0; j < n; ++j) expect_all.push_back(p + j);
        const KvCapacity& cap = geo().capacity[st];
        if (!cap.is_window()) {
          ASSERT_EQ(actual, expect_all);
        } else {
          // dropped = expect_all - actual: only invisible, non-sink tokens; the rest kept
          ASSERT_TRUE(
              std::includes(expect_all.begin(), expect_all.end(), actual.begin(), actual.end()));
          for (int32_t pos : expect_all) {
            const bool kept = std::binary_search(actual.begin(), actual.end(), pos);
            if (!kept) ++n_window_drops;
            if (pos < cap.n_sink || pos >= p - cap.window) {
              ASSERT_TRUE(kept) << pos;
            }
          }
        }
        s.held[st] = actual;
        // write the new rows
        const int32_t len = kv_->stream_len(ids[i], st);
        for (int32_t idx = len - n; idx < len; ++idx) {
          KvRowRef r = kv_->row(ids[i], st, idx);
          const int32_t tag = s.n_evictions[st];
          s.tag[st][r.position] = tag;
          for (int32_t e = 0; e < geo().n_head * geo().head_dim; ++e) {
            r.k_f32()[e] = kv_test::k_value(e, st, r.position, toks, tag);
            r.v_f32()[e] = -r.k_f32()[e];
          }
          r.sketch[0] = static_cast<float>(r.position);
          r.sketch[1] = static_cast<float>(tag);
          r.scores[0] = 0.5f * r.position;
        }
      }
      if (rand_int(0, 4) != 0) {
        ASSERT_TRUE(kv_->publish(ids[i]).ok());
      }
    }
  }

  void evict() {
    const KvSeqId id = pick();
    const int32_t st = rand_int(0, geo().n_stream - 1);
    const int32_t len = kv_->stream_len(id, st);
    V idx;
    const int pct = rand_int(5, 40);
    for (int32_t i = 0; i < len; ++i)
      if (rand_int(0, 99) < pct) idx.push_back(i);
    const auto before = snapshot();
    const KvRoom room = kv_->evict(id, st, idx).value();
    if (!room.fits()) {
      ++n_no_room;
      ASSERT_EQ(snapshot(), before);
      return;
    }
    apply_eviction(id, st, idx, room);
  }

  void truncate() {
    const KvSeqId id = pick();
    const int32_t st = rand_int(0, geo().n_stream - 1);
    const int32_t len = kv_->stream_len(id, st);
    const int32_t keep = rand_int(0, len);
    V idx;
    for (int32_t i = keep; i < len; ++i) idx.push_back(i);
    const auto before = snapshot();
    const KvRoom room = kv_->truncate(id, st, keep).value();
    if (!room.fits()) {
      ++n_no_room;
      ASSERT_EQ(snapshot(), before);
      return;
    }
    apply_eviction(id, st, idx, room);
  }

  void apply_eviction(KvSeqId id, int32_t st, const V& idx, const KvRoom& room) {
    Seq& s = seqs_[id];
    if (idx.empty()) return;
    ++n_evictions;
    if (room.n_pages_needed > 0) ++n_cow;
    V kept;
    size_t e = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(s.held[st].size()); ++i) {
      if (e < idx.size() && idx[e] == i) {
        ++e;
        continue;
      }
      kept.push_back(s.held[st][i]);
    }
    s.held[st] = kept;
    ++s.n_evictions[st];
  }

  void publish() { ASSERT_TRUE(kv_->publish(pick()).ok()); }

  void free_one() {
    const KvSeqId id = pick();
    ASSERT_TRUE(kv_->free_sequence(id).ok());
    seqs_.erase(id);
  }

  void verify_all() {
    SIEVE_EXPECT_KV_OK(*kv_);
    const KvView view = kv_->view();
    for (const auto& [id, s] : seqs_) {
      const std::span<const int32_t> toks = kv_->tokens(id);
      ASSERT_GE(static_cast<int32_t>(toks.size()), s.n_prompt_done);
      for (int32_t p = 0; p < s.n_prompt_done; ++p) ASSERT_EQ(toks[p], s.prompt[p]);
      for (int32_t st = 0; st < geo().n_stream; ++st) {
        const KvSeqView v = view.seq(id, st);
        ASSERT_EQ(v.n_tokens, static_cast<int32_t>(s.held[st].size()));
        for (int32_t i = 0; i < v.n_tokens; ++i) {
          const int32_t pos = v.position(i);
          ASSERT_EQ(pos, s.held[st][i]);
          const int32_t tag = s.tag[st].at(pos);
          for (int32_t e = 0; e < geo().n_head * geo().head_dim; ++e) {
            const float want = kv_test::k_value(e, st, pos, toks, tag);
            ASSERT_EQ(v.k(i)[e], want) << "seq " << id << " stream " << st << " pos " << pos;
            ASSERT_EQ(v.v(i)[e], -want);
          }
          ASSERT_EQ(v.sketch(i)[0], static_cast<float>(pos));
          ASSERT_EQ(v.sketch(i)[1], static_cast<float>(tag));
          ASSERT_EQ(v.scores(i)[0], 0.5f * pos);
        }
      }
    }
  }

  std::mt19937 rng_;
  std::unique_ptr<KvStore> kv_;
  std::vector<V> library_;
  std::map<KvSeqId, Seq> seqs_;
};

TEST(KvStress, RandomOperationsKeepInvariantsAndContent) {
  int64_t hits = 0;
  int no_room = 0, cow = 0, drops = 0, evictions = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    Stress s(seed);
    s.run(1500);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "seed " << seed;
      return;
    }
    hits += s.n_hit_tokens();
    no_room += s.n_no_room;
    cow += s.n_cow;
    drops += s.n_window_drops;
    evictions += s.n_evictions;
  }
  // the run must actually exercise every path it claims to test
  EXPECT_GT(hits, 0);
  EXPECT_GT(no_room, 0);
  EXPECT_GT(cow, 0);
  EXPECT_GT(drops, 0);
  EXPECT_GT(evictions, 0);
  std::printf(
      "stress: %lld prefix-hit tokens, %d no-room, %d copy-on-write, %d window drops, %d "
      "evictions\n",
      static_cast<long long>(hits), no_room, cow, drops, evictions);
}

}  // namespace
}  // namespace sieve
