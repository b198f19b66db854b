//===- indexer_scores_mma_test.cpp - the tensor-core indexer scores' twin -===//
//
// indexer_scores_mma's twin (runtime/twins/twin_dsa.cpp: the kernel's fp16
// hi + lo operands, exact products, fp64 sums) against the fp64 scores of
// indexer_scores_ctx's twin on the same stored keys: f32, bf16 and e4m3
// index keys, GLM-5.3's 32 heads x 128 dims, the tiny models' 8 x 32
// (tests/oracle/goldens/glm_dsa_a) and 2 x 64 (synth --preset tiny), 4, 16
// and 64 heads, prefill chunks of several rows with
// causal positions whose T is not a multiple of the 64-key tile, rows in
// two KV slots, and the shapes the kernel refuses (nothing written).
//
//===----------------------------------------------------------------------===//
#include "codegen/templates/indexer_scores_mma.cuh"
#include "codegen/templates/kv_cache.cuh"
#include "twin_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using glm::twintest::Call;
using glm::twintest::randn;

/// Rows of n values stored in KV form `kv` as kv_cache.cuh's writers store
/// them (bf16 round to nearest even; E4M3 bytes of x / (amax / 448) and the
/// row's fp32 scale).
std::vector<uint8_t> storeRows(const std::vector<float> &v, int n, int kv) {
  const size_t rows = v.size() / n;
  const int64_t rb = glm::kv::rowBytes(kv, n);
  std::vector<uint8_t> out(rows * rb);
  for (size_t r = 0; r < rows; ++r) {
    const float *x = v.data() + r * n;
    uint8_t *p = out.data() + r * rb;
    if (kv == glm::kv::kF32) {
      std::memcpy(p, x, 4 * n);
    } else if (kv == glm::kv::kBf16) {
      for (int i = 0; i < n; ++i) {
        const uint16_t b = glm::kv::bf16Of(x[i]);
        std::memcpy(p + 2 * i, &b, 2);
      }
    } else {
      float amax = 0;
      for (int i = 0; i < n; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float s = glm::kv::e4m3Scale(amax);
      for (int i = 0; i < n; ++i)
        p[i] = glm::kv::e4m3Of(x[i] / s);
      std::memcpy(p + n, &s, 4);
    }
  }
  return out;
}

/// One launch of `family` (256 threads) over B rows; scores NaN-poisoned.
std::vector<double>
scores(const char *family, unsigned gx, int kv, const std::vector<float> &q,
       const std::vector<uint8_t> &keys, const std::vector<float> &w,
       const std::vector<int> &seq, const std::vector<int> &pos, int nh, int hd,
       int maxCtx) {
  const int B = int(pos.size());
  std::vector<double> s(size_t(B) * maxCtx, NAN);
  const char *kvName = kv == 0 ? "f32" : kv == 1 ? "bf16" : "e4m3";
  Call c(family, gx, unsigned(B), 1, 256);
  if (kv != 0)
    c.targ("kv", kvName);
  c.p(q.data())
      .p(keys.data())
      .p(w.data())
      .p(s.data())
      .p(seq.data())
      .p(pos.data())
      .i(nh)
      .i(hd)
      .i(maxCtx)
      .f(1.0 / std::sqrt(double(nh)))
      .f(1.0 / std::sqrt(double(hd)))
      .unpaged();
  c.run();
  return s;
}

struct Case {
  int nh, hd, B, p0, maxCtx, kv;
  bool twoSlots; // rows alternate between slots 1 and 0
};

std::string caseName(const Case &c) {
  const char *kv[] = {"f32", "bf16", "e4m3"};
  return "nh" + std::to_string(c.nh) + " hd" + std::to_string(c.hd) + " B" +
         std::to_string(c.B) + " p0 " + std::to_string(c.p0) + " " + kv[c.kv] +
         (c.twoSlots ? " two slots" : "");
}

class IndexerScoresMma : public ::testing::TestWithParam<Case> {};

// The twin against the fp64 scores: q and f32 keys keep ~22 bits (hi + lo,
// lo.lo dropped), bf16 / e4m3 keys are exact as stored, so the scores agree
// to ~1e-7 of the largest (measured 4e-8 .. 1e-7); 1e-6 stated, as the
// kernel's header. Keys t >= T of each row stay unwritten.
TEST_P(IndexerScoresMma, TwinFollowsTheFp64Scores) {
  const Case c = GetParam();
  std::mt19937 rng(
      unsigned(c.nh * 131 + c.hd * 7 + c.B + c.p0 + c.kv * 977 + c.twoSlots));
  const int slots = 2;
  const std::vector<float> q = randn(rng, size_t(c.B) * c.nh * c.hd),
                           w = randn(rng, size_t(c.B) * c.nh);
  const std::vector<uint8_t> keys =
      storeRows(randn(rng, size_t(slots) * c.maxCtx * c.hd), c.hd, c.kv);
  std::vector<int> seq(c.B), pos(c.B);
  for (int b = 0; b < c.B; ++b) {
    seq[b] = c.twoSlots ? (b & 1) ^ 1 : 1;
    pos[b] = c.p0 + b; // a chunk's causal rows
  }
  const std::vector<double> want =
      scores("indexer_scores_ctx", 64, c.kv, q, keys, w, seq, pos, c.nh, c.hd,
             c.maxCtx);
  const std::vector<double> got =
      scores("indexer_scores_mma", glm::indexerMmaGridX(c.B), c.kv, q, keys, w,
             seq, pos, c.nh, c.hd, c.maxCtx);
  double maxAbs = 0, maxRef = 0;
  size_t written = 0;
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.maxCtx; ++t) {
      const size_t i = size_t(b) * c.maxCtx + t;
      if (t > pos[b]) {
        ASSERT_TRUE(std::isnan(got[i])) << "row " << b << " key " << t;
        continue;
      }
      ASSERT_FALSE(std::isnan(got[i])) << "row " << b << " key " << t;
      ++written;
      maxAbs = std::max(maxAbs, std::fabs(got[i] - want[i]));
      maxRef = std::max(maxRef, std::fabs(want[i]));
    }
  const double rel = maxAbs / std::max(maxRef, 1e-30);
  std::printf("[twin] indexer_scores_mma %-40s rel=%.3g tol=1e-06 (%zu)\n",
              caseName(c).c_str(), rel, written);
  EXPECT_LE(rel, 1e-6) << caseName(c);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int kv = 0; kv < 3; ++kv) {
    // GLM-5.3: 4 rows a block; T = 1 .. 200 and 700 .. 736 (ragged tiles).
    v.push_back({32, 128, 5, 0, 256, kv, false});
    v.push_back({32, 128, 37, 700, 800, kv, false});
    // The tiny models: 16 rows a block, a partial last group.
    v.push_back({8, 32, 21, 60, 128, kv, false});
    v.push_back({8, 32, 19, 3, 64, kv, true});
    v.push_back({16, 64, 9, 100, 160, kv, true});
    // The synth tiny preset (2 x 64: 64 rows a block), 4 heads, and 64
    // heads (partials of 4 warps a row).
    v.push_back({2, 64, 70, 5, 128, kv, false});
    v.push_back({4, 32, 33, 40, 100, kv, true});
    v.push_back({64, 64, 6, 90, 100, kv, false});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, IndexerScoresMma, ::testing::ValuesIn(cases()),
                         [](const auto &info) {
                           std::string n = caseName(info.param);
                           for (char &ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return n;
                         });

// The tensor-core split alone, where the fp64 kernel reads the same values:
// keys that are fp16 values (exact hi, lo = 0) and q with a lo part, so
// only the q split's rounding and dropped lo.lo remain; the dot of one
// head then equals the fp64 dot of the split q to the last bit.
TEST(IndexerScoresMmaTwin, UsesTheHiLoSplitOfQ) {
  const int nh = 8, hd = 32, maxCtx = 64;
  std::vector<float> q(size_t(nh) * hd, 0.0f), w(nh, 0.0f), k(maxCtx * hd);
  w[0] = 1.0f;
  const float x = 1.0f + 0x1p-20f; // hi = 1, lo = 2^-20 (exact)
  for (int i = 0; i < hd; ++i)
    q[i] = i == 0 ? x : 0.0f;
  for (int t = 0; t < maxCtx; ++t)
    for (int i = 0; i < hd; ++i)
      k[size_t(t) * hd + i] = i == 0 ? float(t + 1) : 1.0f;
  const std::vector<uint8_t> keys = storeRows(k, hd, 0);
  const std::vector<int> seq = {0}, pos = {maxCtx - 1};
  const std::vector<double> s =
      scores("indexer_scores_mma", 1, 0, q, keys, w, seq, pos, nh, hd, maxCtx);
  const double hs = 1.0 / std::sqrt(8.0), ds = 1.0 / std::sqrt(32.0);
  for (int t = 0; t < maxCtx; ++t)
    EXPECT_EQ(s[t], (1.0 + 0x1p-20) * (t + 1) * ds * hs) << t;
}

// Shapes the kernel does not take (indexerMmaTakes): nothing written, as
// on the GPU; the compiler keeps indexer_scores_ctx for them.
TEST(IndexerScoresMmaTwin, RefusedShapesWriteNothing) {
  EXPECT_TRUE(glm::indexerMmaTakes(32, 128, 256));
  EXPECT_TRUE(glm::indexerMmaTakes(8, 32, 256));
  EXPECT_TRUE(glm::indexerMmaTakes(2, 64, 256));
  EXPECT_TRUE(glm::indexerMmaTakes(128, 32, 256));
  EXPECT_FALSE(glm::indexerMmaTakes(1, 64, 256));   // 128 tokens a block
  EXPECT_FALSE(glm::indexerMmaTakes(5, 16, 256));   // helper_twins' shape
  EXPECT_FALSE(glm::indexerMmaTakes(12, 32, 256));  // glm_dsa_b's heads
  EXPECT_FALSE(glm::indexerMmaTakes(256, 32, 256)); // over 128 rows
  EXPECT_FALSE(glm::indexerMmaTakes(32, 192, 256)); // over 128 dims
  EXPECT_FALSE(glm::indexerMmaTakes(32, 48, 256));  // not 32-dim chunks
  EXPECT_FALSE(glm::indexerMmaTakes(32, 128, 128));
  const int nh = 12, hd = 128, maxCtx = 64;
  std::vector<float> q(size_t(nh) * hd, 1.0f), w(nh, 1.0f);
  const std::vector<uint8_t> keys =
      storeRows(std::vector<float>(size_t(maxCtx) * hd, 1.0f), hd, 0);
  const std::vector<int> seq = {0}, pos = {maxCtx - 1};
  const std::vector<double> s =
      scores("indexer_scores_mma", 1, 0, q, keys, w, seq, pos, nh, hd, maxCtx);
  for (double v : s)
    EXPECT_TRUE(std::isnan(v));
}

} // namespace
