#include "backend/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/attention_test_util.h"
#include "backend/cpu/ops.h"
#include "core/fp16.h"

namespace sieve {
namespace {

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class AttendTest : public ::testing::TestWithParam<std::tuple<int, int, int, int, int>> {};

TEST_P(AttendTest, MatchesDoubleReference) {
  const auto [d, G, n_keys, n_q, window] = GetParam();
  std::mt19937 rng(d * 131 + G * 7 + n_keys + window);
  PagedHead kv(d, 16, n_keys, rng, 2);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(n_q) * G * d);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(n_q);
  // the last n_q tokens as queries (prefill chunk / decode), positions of the KV
  for (int t = 0; t < n_q; ++t) qpos[t] = kv.pos[n_keys - n_q + t];
  AttnQuery aq{q.data(), qpos.data(), n_q, G, d, 1.0f / std::sqrt(static_cast<float>(d)), window};
  KeySet all{nullptr, 0, 0, n_keys};
  std::vector<float> o(q.size()), ref(q.size());
  attend(aq, kv.view(), all, o.data());
  attend_ref(aq, kv.view(), all, ref.data());
  EXPECT_LT(max_abs_diff(o, ref), 2e-5f);

  // Split the keys in three parts (sparse index list, range, range) and merge the states.
  std::vector<int32_t> idx;
  for (int j = 0; j < n_keys / 3; ++j) idx.push_back(j);
  KeySet a{idx.data(), static_cast<int32_t>(idx.size()), 0, 0};
  KeySet b{nullptr, 0, n_keys / 3, 2 * n_keys / 3};
  KeySet c{nullptr, 0, 2 * n_keys / 3, n_keys};
  const int64_t rows = static_cast<int64_t>(n_q) * G;
  std::vector<float> oa(q.size()), ob(q.size()), ma(rows), la(rows), mb(rows), lb(rows);
  attend(aq, kv.view(), a, oa.data(), ma.data(), la.data());
  attend(aq, kv.view(), b, ob.data(), mb.data(), lb.data());
  merge_attn(oa.data(), ma.data(), la.data(), ob.data(), mb.data(), lb.data(), rows, d);
  attend(aq, kv.view(), c, ob.data(), mb.data(), lb.data());
  merge_attn(oa.data(), ma.data(), la.data(), ob.data(), mb.data(), lb.data(), rows, d);
  normalize_attn(oa.data(), la.data(), rows, d);
  EXPECT_LT(max_abs_diff(oa, ref), 2e-5f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttendTest,
    ::testing::Values(std::make_tuple(64, 3, 97, 1, 0), std::make_tuple(64, 3, 97, 17, 0),
                      std::make_tuple(64, 3, 300, 41, 0), std::make_tuple(256, 4, 130, 9, 0),
                      std::make_tuple(256, 4, 700, 33, 64), std::make_tuple(64, 1, 45, 45, 10),
                      // long key sets: decode and a short chunk at 9K keys
                      std::make_tuple(64, 3, 9001, 1, 0), std::make_tuple(64, 3, 9001, 5, 0),
                      std::make_tuple(128, 2, 5003, 2, 0), std::make_tuple(24, 2, 50, 5, 0)));

TEST(Attend, SparseIndexListEqualsReference) {
  std::mt19937 rng(5);
  PagedHead kv(64, 8, 211, rng);
  std::vector<int32_t> idx;
  for (int j = 0; j < 211; j += 3) idx.push_back(j);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(3 * 64);
  for (auto& x : q) x = nd(rng);
  int32_t qpos = kv.pos[210];
  AttnQuery aq{q.data(), &qpos, 1, 3, 64, 0.125f, 0};
  KeySet ks{idx.data(), static_cast<int32_t>(idx.size()), 0, 0};
  std::vector<float> o(q.size()), ref(q.size());
  attend(aq, kv.view(), ks, o.data());
  attend_ref(aq, kv.view(), ks, ref.data());
  EXPECT_LT(max_abs_diff(o, ref), 2e-5f);
}

TEST(Attend, NoVisibleKeyGivesZero) {
  std::mt19937 rng(9);
  PagedHead kv(64, 4, 10, rng);
  std::vector<float> q(64, 1.0f), o(64, 5.0f);
  int32_t qpos = 0;  // every key position is >= 3
  AttnQuery aq{q.data(), &qpos, 1, 1, 64, 0.125f, 0};
  attend(aq, kv.view(), KeySet{nullptr, 0, 0, 10}, o.data());
  for (float x : o) EXPECT_EQ(x, 0.0f);
}

TEST(Rope, NormAndNeoxRotatePairs) {
  std::vector<float> x = {1, 0, 0, 1, 1, 0, 0, 1};
  int32_t pos = 1;
  std::vector<float> a = x;
  rope(a.data(), &pos, 1, 1, 8, 8, 10000.0f, RopeMode::norm);
  // pair (0,1) rotated by angle 1
  EXPECT_NEAR(a[0], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(a[1], std::sin(1.0f), 1e-6);
  std::vector<float> b = x;
  rope(b.data(), &pos, 1, 1, 8, 8, 10000.0f, RopeMode::neox);
  // pair (0,4): x0 = 1, x4 = 1 rotated by angle 1
  EXPECT_NEAR(b[0], std::cos(1.0f) - std::sin(1.0f), 1e-6);
  EXPECT_NEAR(b[4], std::sin(1.0f) + std::cos(1.0f), 1e-6);
  // norms are preserved
  double na = 0, nx = 0;
  for (int i = 0; i < 8; ++i) na += a[i] * a[i], nx += x[i] * x[i];
  EXPECT_NEAR(na, nx, 1e-5);
}

// rotate_near (one table row) turns vectors as rotate (angle addition) does, both modes, both
// signs, with n_rot < head_dim leaving the rest alone.
TEST(Rope, RotateNearEqualsRotate) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (const RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
    for (const int n_rot : {64, 32}) {
      const int d = 64;
      RopeRotator rot(d, n_rot, 10000.0f, mode);
      const std::vector<int64_t> delta = {
          0, 1, -1, 31, -31, 517, -900, RopeRotator::kNear - 1, 1 - RopeRotator::kNear};
      const int n = static_cast<int>(delta.size());
      std::vector<float> x(static_cast<size_t>(n) * d);
      for (auto& v : x) v = nd(rng);
      std::vector<float> near = x, want = x;
      rot.rotate_near(near.data(), n, d, delta.data());
      for (int t = 0; t < n; ++t) rot.rotate(want.data() + int64_t{t} * d, 1, delta[t]);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(near[i], want[i], 2e-6f) << i;
      for (int t = 0; t < n; ++t) {
        for (int i = n_rot; i < d; ++i) ASSERT_EQ(near[int64_t{t} * d + i], x[int64_t{t} * d + i]);
      }
    }
  }
}

TEST(RmsNorm, MatchesFormula) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 0.5f, 2, 1}, o(4);
  rms_norm(x.data(), w.data(), 1e-5f, 1, 4, o.data());
  const float s = 1.0f / std::sqrt(7.5f + 1e-5f);
  EXPECT_NEAR(o[2], 3 * s * 2, 1e-6);
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// A row computed in one call (prefill path), computed within a block of other rows, and
// computed as kAttnSegment-sized split-K parts merged in order (decode path) are bitwise
// equal: what keeps greedy outputs independent of chunk splits and batching.
TEST(Attend, PrefillRowEqualsSplitSegmentsBitwise) {
  std::mt19937 rng(11);
  const int d = 64, G = 3, n = 1700;
  PagedHead kv(d, 16, n, rng);
  std::normal_distribution<float> nd(0, 1);
  // five query rows at the last five positions; the last row is the one compared
  std::vector<float> q(5 * G * d);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(5);
  for (int t = 0; t < 5; ++t) qpos[t] = kv.pos[n - 5 + t];
  for (int32_t window : {0, 700}) {
    std::vector<float> block(q.size());
    attend(AttnQuery{q.data(), qpos.data(), 5, G, d, 0.125f, window}, kv.view(),
           KeySet{nullptr, 0, 0, n}, block.data());
    const float* last_q = q.data() + 4 * G * d;
    std::vector<float> alone(G * d);
    attend(AttnQuery{last_q, &qpos[4], 1, G, d, 0.125f, window}, kv.view(),
           KeySet{nullptr, 0, 0, n}, alone.data());
    std::vector<float> acc_o(G * d), acc_m(G), acc_l(G), po(G * d), pm(G), pl(G);
    for (int32_t k0 = 0; k0 < n; k0 += kAttnSegment) {
      AttnQuery aq{last_q, &qpos[4], 1, G, d, 0.125f, window};
      attend(aq, kv.view(), KeySet{nullptr, 0, k0, std::min(n, k0 + kAttnSegment)}, po.data(),
             pm.data(), pl.data());
      if (k0 == 0) {
        acc_o = po, acc_m = pm, acc_l = pl;
      } else {
        merge_attn(acc_o.data(), acc_m.data(), acc_l.data(), po.data(), pm.data(), pl.data(), G, d);
      }
    }
    normalize_attn(acc_o.data(), acc_l.data(), G, d);
    for (int i = 0; i < G * d; ++i) {
      ASSERT_EQ(block[4 * G * d + i], alone[i]) << "window " << window << " i " << i;
      ASSERT_EQ(acc_o[i], alone[i]) << "window " << window << " i " << i;
    }
  }
}

// RTPurbo's local heads at decode: window_segments() cuts sinks + window into split-K parts
// whose in-order merge is bitwise attend() over the whole stream, and skips the keys between.
TEST(Attend, WindowSegmentsMergeToTheWholeRowBitwise) {
  std::mt19937 rng(12);
  const int d = 64, G = 3, n = 2900;
  PagedHead kv(d, 16, n, rng);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(G * d);
  for (auto& x : q) x = nd(rng);
  const int32_t qpos = kv.pos[n - 1];
  for (const auto& [window, sinks] :
       {std::pair{1200, 4}, {513, 4}, {100, 0}, {1024, 700}, {5000, 4}, {0, 0}}) {
    const AttnQuery aq{q.data(), &qpos, 1, G, d, 0.125f, window, sinks};
    std::vector<float> whole(G * d);
    attend(aq, kv.view(), KeySet{nullptr, 0, 0, n}, whole.data());
    std::vector<KeySet> sets;
    window_segments(aq, kv.view(), n, sets);
    const int32_t width = window > 0 ? std::min(window, n) : n;
    EXPECT_LE(sets.size(), static_cast<size_t>(width / kAttnSegment + 2)) << window;
    std::vector<float> acc_o(G * d), acc_m(G), acc_l(G), po(G * d), pm(G), pl(G);
    for (size_t s = 0; s < sets.size(); ++s) {
      if (s > 0) {
        EXPECT_EQ(sets[s].begin % kAttnSegment, 0) << window;
      }
      attend(aq, kv.view(), sets[s], po.data(), pm.data(), pl.data());
      if (s == 0) {
        acc_o = po, acc_m = pm, acc_l = pl;
      } else {
        merge_attn(acc_o.data(), acc_m.data(), acc_l.data(), po.data(), pm.data(), pl.data(), G, d);
      }
    }
    normalize_attn(acc_o.data(), acc_l.data(), G, d);
    for (int i = 0; i < G * d; ++i)
      ASSERT_EQ(acc_o[i], whole[i]) << "window " << window << " sinks " << sinks << " i " << i;
  }
}

// RTPurbo's local heads: sinks next to a sliding window (AttnQuery::n_sink).
TEST(Attention, SinksBesideAWindowIgnoreAStrongKeyOutsideBoth) {
  std::mt19937 rng(3);
  const int d = 32, n = 300, W = 40, S = 4, G = 2, nq = 37;
  PagedHead h(d, 8, n, rng, 1, 0);  // positions 0..n-1
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(nq) * G * d);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(nq);
  for (int t = 0; t < nq; ++t) qpos[t] = n - nq + t;
  // A key far outside every row's window and past the sinks that matches the last query.
  const int strong = 120;
  uint16_t* strong_k = h.kp[strong / 8].data() + (strong % 8) * d;
  for (int c = 0; c < d; ++c) strong_k[c] = f32_to_fp16(20.0f * q[(nq - 1) * G * d + c]);
  AttnQuery aq{q.data(), qpos.data(), nq, G, d, 0.2f, W, S};
  std::vector<float> o(q.size()), ref(q.size()), lst(q.size());
  attend(aq, h.view(), KeySet{nullptr, 0, 0, n}, o.data());
  attend_ref(aq, h.view(), KeySet{nullptr, 0, 0, n}, ref.data());
  EXPECT_LT(max_abs_diff(o, ref), 2e-5f);
  // The same as attention over the explicit set sinks + window, row by row.
  for (int t = 0; t < nq; ++t) {
    std::vector<int32_t> keys;
    for (int j = 0; j < S; ++j) keys.push_back(j);
    for (int j = std::max(S, qpos[t] - W + 1); j <= qpos[t]; ++j) keys.push_back(j);
    AttnQuery one{q.data() + static_cast<size_t>(t) * G * d, &qpos[t], 1, G, d, 0.2f, 0, 0};
    attend(one, h.view(), KeySet{keys.data(), static_cast<int32_t>(keys.size()), 0, 0},
           lst.data() + static_cast<size_t>(t) * G * d);
  }
  EXPECT_LT(max_abs_diff(o, lst), 2e-5f);
  // Changing the strong key changes nothing; without the sinks the result differs.
  for (int c = 0; c < d; ++c) strong_k[c] = f32_to_fp16(-20.0f * q[c]);
  std::vector<float> o2(q.size()), no_sink(q.size());
  attend(aq, h.view(), KeySet{nullptr, 0, 0, n}, o2.data());
  EXPECT_EQ(o, o2);
  AttnQuery ws{q.data(), qpos.data(), nq, G, d, 0.2f, W, 0};
  attend(ws, h.view(), KeySet{nullptr, 0, 0, n}, no_sink.data());
  EXPECT_GT(max_abs_diff(o, no_sink), 1e-4f);
}

// The engine's split-K decode over an index list: one part per kAttnSegment keys (pos_base =
// its first index), merged in order, then normalised.
// With kept_k / kept_v: the list's first n_kept keys come from those rows (keep_rows), or with
// fill are written there.
std::vector<float> attend_in_segments(const AttnQuery& aq, const KvHeadView& kv,
                                      const std::vector<int32_t>& idx, const RopeRotator* rot,
                                      uint16_t* kept_k = nullptr, uint16_t* kept_v = nullptr,
                                      int32_t n_kept = 0, bool fill = false) {
  const int d = aq.head_dim;
  const int n_sel = static_cast<int>(idx.size());
  const int64_t rows = int64_t{aq.n_q} * aq.n_group;
  std::vector<float> oa(rows * d), ob(rows * d), ma(rows), la(rows), mb(rows), lb(rows);
  for (int k0 = 0; k0 < n_sel; k0 += kAttnSegment) {
    const int k1 = std::min(n_sel, k0 + kAttnSegment);
    KeySet part{idx.data() + k0, k1 - k0, 0, 0, rot, k0};
    if (n_kept > k0) {
      part.kept_k = kept_k + int64_t{k0} * d;
      part.kept_v = kept_v + int64_t{k0} * d;
      part.n_kept = std::min(n_kept, k1) - k0;
      part.fill = fill;
    }
    if (k0 == 0) {
      attend(aq, kv, part, oa.data(), ma.data(), la.data());
    } else {
      attend(aq, kv, part, ob.data(), mb.data(), lb.data());
      merge_attn(oa.data(), ma.data(), la.data(), ob.data(), mb.data(), lb.data(), rows, d);
    }
  }
  normalize_attn(oa.data(), la.data(), rows, d);
  return oa;
}

// Compact positions (KeySet::rot): attention over a selected list whose c-th key takes
// position pos_base + c equals attention over a copy of those keys re-rotated to positions
// 0.., and the split into segments merges to the same result.
TEST(Attend, CompactPositionsEqualAReRotatedCopy) {
  std::mt19937 rng(11);
  const int d = 64, n = 2000, G = 3, n_q = 4;
  PagedHead h(d, 16, n, rng, 1, 0);  // positions 0..n-1
  RopeRotator rot(d, d, 10000.0f, RopeMode::norm);
  rot.reserve(n + 1);
  std::vector<int32_t> idx;
  for (int j = 0; j < n - n_q; j += 1 + j % 3) idx.push_back(j);  // a scattered selection
  for (int j = n - n_q; j < n; ++j) idx.push_back(j);             // the queries' own tokens, last
  const int n_sel = static_cast<int>(idx.size());
  // The copy: every selected K re-rotated to its compact position (f32, then f16 as stored).
  std::mt19937 rng2(12);
  PagedHead c(d, 16, n_sel, rng2, 1, 0);
  std::vector<float> row(d);
  for (int i = 0; i < n_sel; ++i) {
    f16_to_f32_row(h.view().k_row(idx[i]), row.data(), d);
    rot.rotate(row.data(), 1, i - idx[i]);
    for (int x = 0; x < d; ++x) c.kp[i / 16][(i % 16) * d + x] = f32_to_fp16(row[x]);
    std::copy(h.view().v_row(idx[i]), h.view().v_row(idx[i]) + d,
              c.vp[i / 16].data() + (i % 16) * d);
  }
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(n_q) * G * d);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(n_q);
  for (int t = 0; t < n_q; ++t) qpos[t] = n_sel - n_q + t;  // compact query positions
  const AttnQuery aq{q.data(), qpos.data(), n_q, G, d, 0.125f};
  std::vector<float> o(q.size()), ref(q.size()), copy(q.size());
  attend(aq, h.view(), KeySet{idx.data(), n_sel, 0, 0, &rot, 0}, o.data());
  attend_ref(aq, h.view(), KeySet{idx.data(), n_sel, 0, 0, &rot, 0}, ref.data());
  attend(aq, c.view(), KeySet{nullptr, 0, 0, n_sel}, copy.data());
  EXPECT_LT(max_abs_diff(o, ref), 2e-5f);
  EXPECT_LT(max_abs_diff(o, copy), 5e-3f);  // the copy rounds the rotated K to f16
  // One part per kAttnSegment keys (pos_base = its first index), merged in order as the
  // engine's split-K decode does, gives the whole bitwise.
  ASSERT_GT(n_sel, 2 * kAttnSegment);
  const std::vector<float> oa = attend_in_segments(aq, h.view(), idx, &rot);
  for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(oa[i], o[i]) << i;
}

// Kept rows (keep_rows). The attention that first reads a scattered list fills the copy of
// its first n_kept keys (KeySet::fill), whole or split into segments alike, and the attention
// that reads the copy instead (KeySet::kept_k) equals the gather: bit for bit under original
// positions (the copy is exact); under compact positions it equals attending over a copy of
// every key re-rotated to its compact position and rounded to f16, and stays close to the
// gather. Prefixes end inside a tile, on a tile boundary, past a segment and at the list's end.
TEST(Attend, KeptRowsEqualTheGather) {
  std::mt19937 rng(17);
  const int d = 64, n = 3000, G = 3;
  PagedHead h(d, 16, n, rng, 1, 0, 3);  // positions 0..n-1, three KV heads per row as stored
  RopeRotator rot(d, d, 10000.0f, RopeMode::norm);
  rot.reserve(n + 1);
  std::vector<int32_t> idx;
  for (int j = 0; j < n - 1; j += 1 + j % 4) idx.push_back(j);
  idx.push_back(n - 1);
  const int n_sel = static_cast<int>(idx.size());
  ASSERT_GT(n_sel, kAttnSegment + 5);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(G) * d);
  for (auto& x : q) x = nd(rng);
  for (const RopeRotator* r : std::initializer_list<const RopeRotator*>{nullptr, &rot}) {
    const int32_t qpos = r ? n_sel - 1 : n - 1;
    const AttnQuery aq{q.data(), &qpos, 1, G, d, 0.125f};
    std::vector<float> want(q.size());
    attend(aq, h.view(), KeySet{idx.data(), n_sel, 0, 0, r, 0}, want.data());
    // The filling attention: its own result is the gather's, and a split fill writes the same copy.
    std::vector<uint16_t> kk(static_cast<size_t>(n_sel) * d), kv(kk.size());
    KeySet fill{idx.data(), n_sel, 0, 0, r, 0};
    fill.kept_k = kk.data();
    fill.kept_v = kv.data();
    fill.fill = true;
    fill.n_kept = n_sel;
    std::vector<float> filled(q.size());
    attend(aq, h.view(), fill, filled.data());
    std::vector<uint16_t> kk2(kk.size()), kv2(kv.size());
    const std::vector<float> filled_split =
        attend_in_segments(aq, h.view(), idx, r, kk2.data(), kv2.data(), n_sel, true);
    EXPECT_EQ(kk2, kk);
    EXPECT_EQ(kv2, kv);
    if (r) {
      EXPECT_LT(max_abs_diff(filled, want), 2e-5f);  // every key rotated, no turned query
    } else {
      EXPECT_EQ(filled, want);
      EXPECT_EQ(filled_split, want);
    }
    std::vector<float> copy(q.size());
    if (r) {  // the whole list re-rotated and rounded, as pages of a store
      PagedHead c(d, 16, n_sel, rng, 1, 0);
      for (int i = 0; i < n_sel; ++i) {
        std::copy(kk.begin() + int64_t{i} * d, kk.begin() + int64_t{i + 1} * d,
                  c.kp[i / 16].begin() + (i % 16) * d);
        std::copy(kv.begin() + int64_t{i} * d, kv.begin() + int64_t{i + 1} * d,
                  c.vp[i / 16].begin() + (i % 16) * d);
      }
      attend(aq, c.view(), KeySet{nullptr, 0, 0, n_sel}, copy.data());
    }
    for (int n_kept : {37, 64, kAttnSegment + 5, n_sel}) {
      KeySet ks{idx.data(), n_sel, 0, 0, r, 0};
      ks.kept_k = kk.data();
      ks.kept_v = kv.data();
      ks.n_kept = n_kept;
      std::vector<float> got(q.size());
      attend(aq, h.view(), ks, got.data());
      const std::vector<float> split =
          attend_in_segments(aq, h.view(), idx, r, kk.data(), kv.data(), n_kept);
      if (!r) {
        ASSERT_EQ(got, want) << "n_kept " << n_kept;
        ASSERT_EQ(split, want) << "split, n_kept " << n_kept;
        continue;
      }
      EXPECT_LT(max_abs_diff(got, want), 5e-3f) << "n_kept " << n_kept;
      EXPECT_LT(max_abs_diff(split, want), 5e-3f) << "split, n_kept " << n_kept;
      if (n_kept == n_sel) {
        EXPECT_EQ(got, copy);
      }
    }
  }
}

// Compact positions over the engine's key-set shape: sinks (offset 0), scattered picks, a
// contiguous window and the query's own token. The sink and window tiles are read as stored
// with the query turned instead of their keys (one shared offset per tile), the picks are
// re-rotated key by key; all of it agrees with the double-precision reference, and the
// split-K parts merged in order equal the whole bitwise.
TEST(Attend, CompactWindowTilesTurnTheQuery) {
  std::mt19937 rng(21);
  const int d = 64, n = 6000, G = 3, sinks = 128, window = 700;
  PagedHead h(d, 16, n, rng, 1, 0);
  RopeRotator rot(d, d, 10000.0f, RopeMode::norm);
  rot.reserve(n + 1);
  std::vector<int32_t> idx;
  for (int j = 0; j < sinks; ++j) idx.push_back(j);
  for (int j = sinks; j < n - window - 1; j += 1 + j % 7) idx.push_back(j);
  for (int j = n - window - 1; j < n; ++j) idx.push_back(j);  // window + the query's token
  const int n_sel = static_cast<int>(idx.size());
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(G) * d);
  for (auto& x : q) x = nd(rng);
  const int32_t qpos = n_sel - 1;
  const AttnQuery aq{q.data(), &qpos, 1, G, d, 0.125f};
  const KeySet all{idx.data(), n_sel, 0, 0, &rot, 0};
  std::vector<float> o(q.size()), ref(q.size());
  attend(aq, h.view(), all, o.data());
  attend_ref(aq, h.view(), all, ref.data());
  EXPECT_LT(max_abs_diff(o, ref), 2e-5f);
  const std::vector<float> oa = attend_in_segments(aq, h.view(), idx, &rot);
  for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(oa[i], o[i]) << i;
}

// Sketch and indexer scores over rows at a stride (a KV head's slice of each token's row):
// within float rounding of a double reference for dims 8, 16, 32 and an odd 5 (the scalar
// path), and bitwise the same whether a range is scored at once or cut into pieces of any
// length (the last partial block of 8 goes through a padded copy, formed the same way).
TEST(StridedScores, MatchReferenceAndDoNotDependOnTheCut) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0, 1);
  for (int d : {8, 16, 32, 5}) {
    const int n_heads = 3, n = 37;
    const int64_t stride = int64_t{n_heads} * d;
    std::vector<float> rows(static_cast<size_t>(n) * stride), q(d);
    for (float& x : rows) x = nd(rng);
    for (float& x : q) x = nd(rng);
    for (int h = 0; h < n_heads; ++h) {
      const float* k = rows.data() + int64_t{h} * d;
      std::vector<float> whole(n), pieces(n);
      strided_scores(q.data(), k, stride, n, d, 0.5f, whole.data());
      for (int t = 0; t < n; ++t) {
        double ref = 0;
        for (int c = 0; c < d; ++c) ref += double{q[c]} * k[t * stride + c];
        EXPECT_NEAR(whole[t], 0.5 * ref, 1e-5 * (1 + std::fabs(ref))) << d << " " << h << " " << t;
      }
      for (int t = 0; t < n;) {
        const int len = std::min<int>(n - t, 1 + static_cast<int>(rng() % 11));
        strided_scores(q.data(), k + t * stride, stride, len, d, 0.5f, pieces.data() + t);
        t += len;
      }
      EXPECT_EQ(whole, pieces) << d << " " << h;
    }
  }
}

// Pre-RoPE selection scores (KeySet::fixed, pos_base 0): every key, stored rotated at its own
// position, is turned back to position 0, so q . k equals the dot product of the unrotated
// vectors whatever the key's position - here positions 5..~40K, past any trained window. Key
// strides 1 and 20 take the near path (the tile's offset on the query, each key turned by its
// distance from the tile's first), stride 37 spans more than kNear per tile and turns every key
// by its whole offset; both RoPE modes.
TEST(KeyScores, FixedPositionZeroEqualsPreRopeDots) {
  for (const RopeMode mode : {RopeMode::neox, RopeMode::norm}) {
    for (const int stride : {37, 20, 1}) {
      std::mt19937 rng(31);
      const int d = 64, n = 1000, G = 3;
      PagedHead h(d, 16, n, rng, stride, 5);  // token j at position 5 + stride j
      RopeRotator rot(d, d, 10000.0f, mode);
      rot.reserve(5 + int64_t{stride} * n + 1);
      std::normal_distribution<float> nd(0, 1);
      std::vector<float> q(static_cast<size_t>(G) * d);
      for (auto& x : q) x = nd(rng);
      std::vector<float> s(static_cast<size_t>(G) * n);
      key_scores(q.data(), G, d, 0.5f, h.view(), KeySet{nullptr, 0, 0, n, &rot, 0, true}, s.data(),
                 n);
      std::vector<float> k(d);
      for (int j = 0; j < n; ++j) {
        f16_to_f32_row(h.view().k_row(j), k.data(), d);
        const int32_t back = -h.pos[j];
        rope(k.data(), &back, 1, 1, d, d, 10000.0f, mode);  // the key before RoPE
        for (int g = 0; g < G; ++g) {
          double ref = 0;
          for (int x = 0; x < d; ++x) ref += double{q[g * d + x]} * k[x];
          ASSERT_NEAR(s[int64_t{g} * n + j], 0.5 * ref, 2e-3)
              << j << " " << g << " stride " << stride;
        }
      }
    }
  }
  std::mt19937 rng(31);
  const int d = 64, n = 1000, G = 3;
  PagedHead h(d, 16, n, rng, 37, 5);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(G) * d);
  for (auto& x : q) x = nd(rng);
  std::vector<float> s(static_cast<size_t>(G) * n), k(d);
  // Without the rotator the stored (rotated) keys are scored as they are.
  key_scores(q.data(), G, d, 0.5f, h.view(), KeySet{nullptr, 0, 0, n, nullptr, 0, true}, s.data(),
             n);
  f16_to_f32_row(h.view().k_row(n - 1), k.data(), d);
  double raw = 0;
  for (int x = 0; x < d; ++x) raw += double{q[x]} * k[x];
  EXPECT_NEAR(s[n - 1], 0.5 * raw, 1e-3);
}

}  // namespace
}  // namespace sieve
