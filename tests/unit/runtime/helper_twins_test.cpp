//===- helper_twins_test.cpp - twins of the executor's helper families ----===//
//
// Each helper family's CPU twin (runtime/twins/) against the reference CPU
// ops (runtime/cpu/ops.h: norms, RoPE, top-k, routing, SiLU) or an fp64
// formula on small random data, launched with the executor's grids and
// blocks. Where the twin's arithmetic is the reference's (RoPE, SwiGLU, the
// router's weights, the DSA rule) the test asks for the same bits; where
// the kernel sums in another order (block reductions, fp32 MLA products) it
// states a tolerance. Every launch also checks its argument count against
// the family's ABI (FamilyInfo::kernelParams).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/base/numeric.h"
#include "runtime/cpu/ops.h"
#include "runtime/twins/twin.h"
#include "twin_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <cstring>
#include <numeric>
#include <random>

namespace {

using glm::rt::twins::Arg;
using glm::rt::twins::Launch;
namespace cpu = glm::rt::cpu;
using glm::twintest::Call;
using glm::twintest::randn;


bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return glm::rt::floatToBits(a) == glm::rt::floatToBits(b);
}

/// max |got - want| / max |want| over the pairs.
struct Err {
  double maxAbs = 0, maxRef = 0;
  void add(double got, double want) {
    maxAbs = std::max(maxAbs, std::fabs(got - want));
    maxRef = std::max(maxRef, std::fabs(want));
  }
  double rel() const { return maxAbs / std::max(maxRef, 1e-30); }
};

unsigned blocks(int64_t n, int64_t per = 256) {
  return (unsigned)std::max<int64_t>(1, (n + per - 1) / per);
}

TEST(HelperTwins, EveryHelperFamilyHasATwin) {
  int helpers = 0;
  for (const glm::codegen::FamilyInfo &f : glm::codegen::families()) {
    if (f.nvrtcExtra.empty())
      continue; // not a helper family (kCodegenTwins' side)
    ++helpers;
    EXPECT_NE(glm::rt::twins::findTwin(f.family), nullptr) << f.family;
  }
  EXPECT_EQ(helpers, 47);
}

TEST(HelperTwins, EmbedDecodesEveryStoredValue) {
  std::vector<uint16_t> f16(65536);
  std::iota(f16.begin(), f16.end(), 0);
  std::vector<uint8_t> e8(256);
  std::iota(e8.begin(), e8.end(), 0);
  const int tok = 0;
  for (int dt : {1, 3}) {
    const int d = dt == 1 ? 65536 : 256;
    std::vector<float> x(d);
    Call("embed_tokens", blocks(d), 1, 1, 256)
        .p(dt == 1 ? (const void *)f16.data() : e8.data())
        .i(dt)
        .p(nullptr)
        .p(&tok)
        .p(x.data())
        .i(d)
        .run();
    size_t bad = 0;
    for (int i = 0; i < d; ++i)
      bad += !sameBits(x[i], dt == 1 ? glm::rt::halfToFloat((uint16_t)i)
                                     : glm::rt::e4m3ToFloat((uint8_t)i));
    EXPECT_EQ(bad, 0u) << "dt " << dt;
  }
  // bf16 rows with fp8-style row scales, two tokens.
  std::mt19937 rng(1);
  const int d = 40, V = 5;
  std::vector<float> vals = randn(rng, (size_t)V * d);
  std::vector<uint16_t> bf(vals.size());
  for (size_t i = 0; i < vals.size(); ++i)
    bf[i] = glm::rt::floatToBf16(vals[i]);
  std::vector<float> rs = {0.5f, 2.0f, 1.0f, 4.0f, 0.25f};
  std::vector<int> toks = {3, 1};
  std::vector<float> x(2 * d);
  Call("embed_tokens", blocks(d), 2, 1, 256)
      .p(bf.data())
      .i(2)
      .p(rs.data())
      .p(toks.data())
      .p(x.data())
      .i(d)
      .run();
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < d; ++i)
      EXPECT_EQ(x[b * d + i],
                glm::rt::bf16ToFloat(bf[toks[b] * d + i]) * rs[toks[b]]);
}

TEST(HelperTwins, RmsNormRowsMatchesCpuRmsNorm) {
  std::mt19937 rng(2);
  for (int n : {100, 2048, 6144, 12000}) {
    const int B = 3, xs = n + 8, ys = n;
    std::vector<float> x = randn(rng, (size_t)B * xs, 2.0f);
    std::vector<float> w = randn(rng, n);
    std::vector<float> y((size_t)B * ys);
    const int K = (n + 1023) / 1024;
    const unsigned G = K > 8 ? 1u : (unsigned)K; // as the executor
    Call("rms_norm_rows", G, B, 1, 1024)
        .p(x.data())
        .p(w.data())
        .p(y.data())
        .i(n)
        .f(1e-5)
        .i(xs)
        .i(ys)
        .run();
    Err e;
    std::vector<float> ref(n);
    for (int b = 0; b < B; ++b) {
      cpu::rmsNorm(x.data() + (size_t)b * xs, w.data(), ref.data(), n, 1e-5);
      for (int i = 0; i < n; ++i)
        e.add(y[(size_t)b * ys + i], ref[i]);
    }
    EXPECT_LE(e.rel(), 1e-6) << "n " << n; // fp64 sums in another order
    // In place (G = 1): the same bits.
    std::vector<float> in = x;
    Call("rms_norm_rows", 1, B, 1, 1024)
        .p(in.data())
        .p(w.data())
        .p(in.data())
        .i(n)
        .f(1e-5)
        .i(xs)
        .i(xs)
        .run();
    size_t differ = 0;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i)
        differ += !sameBits(in[(size_t)b * xs + i], y[(size_t)b * ys + i]);
    EXPECT_EQ(differ, 0u) << "n " << n;
  }
}

TEST(HelperTwins, AddRmsNormIsTheAddThenTheNorm) {
  std::mt19937 rng(3);
  const int n = 2048, B = 2;
  std::vector<float> x = randn(rng, (size_t)B * n, 2.0f);
  std::vector<float> delta = randn(rng, (size_t)B * n, 0.5f);
  std::vector<float> w = randn(rng, n);
  std::vector<float> xo((size_t)B * n), y((size_t)B * n), sum(x.size()),
      want((size_t)B * n);
  for (size_t i = 0; i < x.size(); ++i)
    sum[i] = x[i] + delta[i];
  Call("add_rms_norm", 2, B, 1, 1024)
      .p(x.data())
      .p(delta.data())
      .p(xo.data())
      .p(w.data())
      .p(y.data())
      .i(n)
      .f(1e-5)
      .run();
  Call("rms_norm_rows", 1, B, 1, 1024)
      .p(sum.data())
      .p(w.data())
      .p(want.data())
      .i(n)
      .f(1e-5)
      .i(n)
      .i(n)
      .run();
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_TRUE(sameBits(xo[i], sum[i])) << i;
    ASSERT_TRUE(sameBits(y[i], want[i])) << i;
  }
}

TEST(HelperTwins, RopeRowsIsCpuRopeBitForBit) {
  std::mt19937 rng(4);
  const int H = 3, dn = 8, dr = 16, B = 2, row = H * (dn + dr);
  std::vector<float> q = randn(rng, (size_t)B * row);
  std::vector<int> pos = {5, 1234};
  std::vector<float> want = q;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      cpu::ropeInterleave(want.data() + b * row + h * (dn + dr) + dn, dr,
                          pos[b], 10000.0);
  // The executor's q rope: x = q + dn, stride dn + dr, block max(32, dr/2).
  Call("rope_rows", H, B, 1, 32)
      .p(q.data() + dn)
      .i(dr)
      .i(dn + dr)
      .i(row)
      .p(pos.data())
      .f(10000.0)
      .run();
  for (size_t i = 0; i < q.size(); ++i)
    ASSERT_TRUE(sameBits(q[i], want[i])) << i;
}

TEST(HelperTwins, KvStoreIsNormThenRope) {
  std::mt19937 rng(5);
  const int kvr = 96, dr = 16, lat = kvr + dr, B = 2, maxCtx = 8;
  std::vector<float> kva = randn(rng, (size_t)B * lat), w = randn(rng, kvr);
  std::vector<float> cache((size_t)3 * maxCtx * lat, -7.0f);
  std::vector<int> seq = {2, 0}, pos = {3, 7};
  Call("kv_store", 1, B, 1, 256)
      .p(kva.data())
      .p(w.data())
      .p(cache.data())
      .p(seq.data())
      .p(pos.data())
      .i(kvr)
      .i(dr)
      .i(maxCtx)
      .f(1e-6)
      .f(10000.0)
      .unpaged()
      .run();
  for (int b = 0; b < B; ++b) {
    std::vector<float> want(lat);
    cpu::rmsNorm(kva.data() + b * lat, w.data(), want.data(), kvr, 1e-6);
    std::copy(kva.begin() + b * lat + kvr, kva.begin() + (b + 1) * lat,
              want.begin() + kvr);
    cpu::ropeInterleave(want.data() + kvr, dr, pos[b], 10000.0);
    const float *got = cache.data() + ((size_t)seq[b] * maxCtx + pos[b]) * lat;
    Err e;
    for (int i = 0; i < kvr; ++i)
      e.add(got[i], want[i]);
    EXPECT_LE(e.rel(), 1e-6);
    for (int i = kvr; i < lat; ++i)
      EXPECT_TRUE(sameBits(got[i], want[i])) << i; // RoPE of copied values
  }
}

TEST(HelperTwins, IndexKeyStoreIsLayerNormThenRope) {
  std::mt19937 rng(6);
  const int hd = 64, dr = 16, B = 2, maxCtx = 4;
  std::vector<float> k = randn(rng, (size_t)B * hd, 3.0f), w = randn(rng, hd),
                     bias = randn(rng, hd);
  std::vector<float> keys((size_t)2 * maxCtx * hd);
  std::vector<int> seq = {1, 0}, pos = {0, 3};
  Call("index_key_store", 1, B, 1, 256)
      .p(k.data())
      .p(w.data())
      .p(bias.data())
      .p(keys.data())
      .p(seq.data())
      .p(pos.data())
      .i(hd)
      .i(dr)
      .i(maxCtx)
      .f(10000.0)
      .unpaged()
      .run();
  for (int b = 0; b < B; ++b) {
    std::vector<float> want(hd);
    cpu::layerNorm(k.data() + b * hd, w.data(), bias.data(), want.data(), hd,
                   1e-6);
    cpu::ropeInterleave(want.data(), dr, pos[b], 10000.0);
    const float *got = keys.data() + ((size_t)seq[b] * maxCtx + pos[b]) * hd;
    Err e;
    for (int i = 0; i < hd; ++i)
      e.add(got[i], want[i]);
    EXPECT_LE(e.rel(), 1e-6);
  }
}

TEST(HelperTwins, IndexerScoresAndDsaSelectFollowTheDsaRule) {
  std::mt19937 rng(7);
  const int nh = 5, hd = 16, maxCtx = 300, B = 2, topk = 32;
  std::vector<float> qi = randn(rng, (size_t)B * nh * hd),
                     keys = randn(rng, (size_t)B * maxCtx * hd),
                     wts = randn(rng, (size_t)B * nh);
  std::vector<int> seq = {1, 0}, pos = {250, 20};
  std::vector<double> score((size_t)B * maxCtx, 0.0);
  const double hs = 1.0 / std::sqrt((double)nh), ds = 1.0 / std::sqrt(16.0);
  Call("indexer_scores_ctx", 64, B, 1, 256)
      .p(qi.data())
      .p(keys.data())
      .p(wts.data())
      .p(score.data())
      .p(seq.data())
      .p(pos.data())
      .i(nh)
      .i(hd)
      .i(maxCtx)
      .f(hs)
      .f(ds)
      .unpaged()
      .run();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t <= pos[b]; ++t) {
      double want = 0;
      for (int h = 0; h < nh; ++h) {
        const double d =
            cpu::dot(qi.data() + (b * nh + h) * hd,
                     keys.data() + ((size_t)seq[b] * maxCtx + t) * hd, hd) *
            ds;
        want += (double)wts[b * nh + h] * hs * (d > 0 ? d : 0.0);
      }
      ASSERT_EQ(score[(size_t)b * maxCtx + t], want) << b << " " << t;
    }
  // Ties: round some scores so equal values pick the lower position.
  for (size_t i = 0; i < score.size(); i += 3)
    score[i] = std::round(score[i]);
  std::vector<int> flags((size_t)B * maxCtx), sel((size_t)B * maxCtx, -1),
      nsel(B);
  Call("dsa_select", 1, B, 1, 1024)
      .p(score.data())
      .p(pos.data())
      .i(topk)
      .p(flags.data())
      .p(sel.data())
      .p(nsel.data())
      .i(maxCtx)
      .run();
  for (int b = 0; b < B; ++b) {
    const int T = pos[b] + 1;
    std::vector<double> s(score.begin() + (size_t)b * maxCtx,
                          score.begin() + (size_t)b * maxCtx + T);
    std::vector<int64_t> want =
        T <= topk ? [&] {
          std::vector<int64_t> all(T);
          std::iota(all.begin(), all.end(), 0);
          return all;
        }()
                  : cpu::topkIndices(s, topk);
    std::sort(want.begin(), want.end());
    ASSERT_EQ(nsel[b], (int)want.size()) << b;
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_EQ(sel[(size_t)b * maxCtx + j], want[j]) << b << " " << j;
  }
  std::vector<int> iota((size_t)B * maxCtx, -1), n2(B);
  Call("dsa_iota", 4, B, 1, 256)
      .p(iota.data())
      .p(n2.data())
      .p(pos.data())
      .i(maxCtx)
      .run();
  for (int b = 0; b < B; ++b) {
    EXPECT_EQ(n2[b], pos[b] + 1);
    for (int t = 0; t <= pos[b]; ++t)
      ASSERT_EQ(iota[(size_t)b * maxCtx + t], t);
  }
}

/// kv_b [R, kvr] stored as dt with scales sk; wd: the dequantized values.
struct KvB {
  std::vector<uint8_t> bytes;
  std::vector<float> scale, wd;
};
KvB makeKvB(std::mt19937 &rng, int R, int kvr, int dt, int sk) {
  KvB k;
  std::vector<float> v = randn(rng, (size_t)R * kvr, 0.05f);
  k.wd.resize(v.size());
  if (dt == 3) {
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    const int sc = sk == 1 ? (kvr + 127) / 128 : sk == 3 ? kvr / 32 : 1;
    const int sr = sk == 1 ? (R + 127) / 128 : R;
    k.bytes.resize(v.size());
    std::vector<uint8_t> e8;
    if (sk == 3) {
      e8.resize((size_t)R * sc);
      for (auto &e : e8)
        e = (uint8_t)(121 + rng() % 4); // 2^-6 .. 2^-3
      k.scale.resize((e8.size() + 3) / 4);
      std::memcpy(k.scale.data(), e8.data(), e8.size());
    } else {
      k.scale.resize((size_t)sr * sc);
      for (auto &s : k.scale)
        s = u(rng) / 64.0f;
    }
    for (int o = 0; o < R; ++o)
      for (int c = 0; c < kvr; ++c) {
        const float s =
            sk == 1   ? k.scale[(size_t)(o / 128) * sc + c / 128]
            : sk == 2 ? k.scale[o]
                      : std::ldexp(1.0f, e8[(size_t)o * sc + c / 32] - 127);
        const size_t i = (size_t)o * kvr + c;
        k.bytes[i] = glm::rt::floatToE4m3(v[i] / s);
        k.wd[i] = glm::rt::e4m3ToFloat(k.bytes[i]) * s;
      }
    return k;
  }
  k.bytes.resize(v.size() * (dt == 0 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == 0) {
      k.wd[i] = v[i];
      std::memcpy(k.bytes.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h =
          dt == 1 ? glm::rt::floatToHalf(v[i]) : glm::rt::floatToBf16(v[i]);
      k.wd[i] = dt == 1 ? glm::rt::halfToFloat(h) : glm::rt::bf16ToFloat(h);
      std::memcpy(k.bytes.data() + 2 * i, &h, 2);
    }
  }
  return k;
}

/// dsa_select against its rule written out: t is chosen when fewer than k
/// candidates come before it in (score descending, position ascending)
/// order (-0 equal to +0), on runs of ties, at 1 to 3000 candidates, pools
/// of 1 and 4.
TEST(HelperTwins, DsaSelectIsTheTopKWithTiesToLowerPositions) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> v(-12, 12);
  for (int pool : {1, 4})
    for (int T : {1, 5, 64, 777, 3000})
      for (int k : {1, 3, 64, 2048}) {
        const int maxCtx = 3000 * 4, p = T * pool + pool - 2; // pool tail
        std::vector<double> score((size_t)maxCtx / pool);
        for (double &x : score) {
          const int q = v(rng);
          x = q == 0 ? (rng() & 1 ? -0.0 : 0.0) : q * 0.5;
        }
        std::vector<int> pos = {p}, flags(score.size()), sel(maxCtx, -1),
                         nsel(1);
        Call("dsa_select", 1, 1, 1, 1024)
            .targ("pool", std::to_string(pool))
            .p(score.data())
            .p(pos.data())
            .i(k)
            .p(flags.data())
            .p(sel.data())
            .p(nsel.data())
            .i(maxCtx)
            .run();
        std::vector<int> want;
        for (int t = 0; t < T; ++t) {
          int before = 0;
          for (int u = 0; u < T; ++u)
            before += score[u] > score[t] || (score[u] == score[t] && u < t);
          if (T <= k || before < k)
            for (int j = 0; j < pool; ++j)
              want.push_back(t * pool + j);
        }
        for (int t = T * pool; t <= p; ++t)
          want.push_back(t);
        ASSERT_EQ(nsel[0], int(want.size()))
            << "pool " << pool << " T " << T << " k " << k;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), sel.begin()))
            << "pool " << pool << " T " << T << " k " << k;
      }
}

TEST(HelperTwins, AbsorbedMlaMatchesFp64Attention) {
  std::mt19937 rng(8);
  const int H = 3, dn = 24, dr = 8, dv = 20, B = 2, maxCtx = 1200;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  std::vector<int> heads = {0, 2}; // this rank's heads
  const int nh = (int)heads.size();
  std::vector<int> seq = {1, 0}, nsel = {5, 1100};
  // kvr 64: the chunked paths (16-byte rows); 36: the scalar ones.
  for (int kvr : {64, 36}) {
    const int lat = kvr + dr, R = H * (dn + dv);
    std::vector<float> q = randn(rng, (size_t)B * H * (dn + dr));
    std::vector<float> cache = randn(rng, (size_t)B * maxCtx * lat);
    std::vector<int> sel((size_t)B * maxCtx, 0);
    for (int b = 0; b < B; ++b) {
      std::vector<int> all(maxCtx);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + nsel[b]);
      std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * maxCtx);
    }
    const int forms[][2] = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {3, 2}, {3, 3}};
    for (auto &form : forms) {
      const int dt = form[0], sk = form[1];
      if (sk == 3 && kvr % 32)
        continue; // MXFP8 needs 32-column groups
      SCOPED_TRACE("kvr " + std::to_string(kvr) + " dt " + std::to_string(dt) +
                   " sk " + std::to_string(sk));
      KvB kv = makeKvB(rng, R, kvr, dt, sk);
      const void *sp = kv.scale.empty() ? nullptr : kv.scale.data();
      std::vector<float> qabs((size_t)B * H * kvr), p((size_t)B * H * maxCtx),
          ctx((size_t)B * H * kvr), ov((size_t)B * H * dv, 0.0f);
      for (int threads : {64, 256}) {
        Call("mla_qabs", nh * ((kvr + 31) / 32), B, 1, threads)
            .p(q.data())
            .p(kv.bytes.data())
            .i(dt)
            .p(sp)
            .i(sk)
            .p(heads.data())
            .p(qabs.data())
            .i(H)
            .i(dn)
            .i(dr)
            .i(dv)
            .i(kvr)
            .run();
        Err e;
        for (int b = 0; b < B; ++b)
          for (int h : heads)
            for (int c = 0; c < kvr; ++c) {
              double s = 0;
              for (int i = 0; i < dn; ++i)
                s += (double)kv.wd[((size_t)h * (dn + dv) + i) * kvr + c] *
                     q[((size_t)b * H + h) * (dn + dr) + i];
              e.add(qabs[((size_t)b * H + h) * kvr + c], s);
            }
        EXPECT_LE(e.rel(), 2e-6) << "qabs t" << threads;
      }
      Call("mla_core", nh, B, 1, 1024)
          .p(q.data())
          .p(qabs.data())
          .p(cache.data())
          .p(seq.data())
          .p(sel.data())
          .p(nsel.data())
          .p(p.data())
          .i(maxCtx)
          .p(ctx.data())
          .p(heads.data())
          .i(H)
          .i(dn)
          .i(dr)
          .i(kvr)
          .f(scale)
          .unpaged()
          .run();
      Call("mla_out", nh * ((dv + 31) / 32), B, 1, 256)
          .p(kv.bytes.data())
          .i(dt)
          .p(sp)
          .i(sk)
          .p(ctx.data())
          .p(heads.data())
          .p(ov.data())
          .i(H)
          .i(dn)
          .i(dv)
          .i(kvr)
          .run();
      // fp64 attention from the fp32 q_abs the first launch produced.
      Err e;
      for (int b = 0; b < B; ++b)
        for (int h : heads) {
          const int n = nsel[b];
          const float *cb = cache.data() + (size_t)seq[b] * maxCtx * lat;
          const float *qa = qabs.data() + ((size_t)b * H + h) * kvr;
          const float *qp = q.data() + ((size_t)b * H + h) * (dn + dr) + dn;
          std::vector<double> pr(n), cx(kvr, 0.0);
          for (int j = 0; j < n; ++j) {
            const float *ent = cb + (size_t)sel[(size_t)b * maxCtx + j] * lat;
            pr[j] =
                (cpu::dot(ent, qa, kvr) + cpu::dot(ent + kvr, qp, dr)) * scale;
          }
          cpu::softmax(pr);
          for (int j = 0; j < n; ++j)
            for (int c = 0; c < kvr; ++c)
              cx[c] +=
                  pr[j] * cb[(size_t)sel[(size_t)b * maxCtx + j] * lat + c];
          for (int j = 0; j < dv; ++j) {
            double s = 0;
            for (int c = 0; c < kvr; ++c)
              s += (double)kv.wd[((size_t)h * (dn + dv) + dn + j) * kvr + c] *
                   cx[c];
            e.add(ov[((size_t)b * H + h) * dv + j], s);
          }
        }
      EXPECT_LE(e.rel(), 1e-5) << "qabs -> core -> out";
      // The one-launch fp64 kernel on the same q, kv_b as fp32 W^T.
      if (dt != 0 || sk != 0)
        continue;
      std::vector<float> kvBT((size_t)kvr * R);
      for (int o = 0; o < R; ++o)
        for (int c = 0; c < kvr; ++c)
          kvBT[(size_t)c * R + o] = kv.wd[(size_t)o * kvr + c];
      std::vector<double> pd((size_t)B * H * maxCtx);
      std::vector<float> ov2((size_t)B * H * dv, 0.0f);
      Call("mla_attn", nh, B, 1, 256)
          .p(q.data())
          .p(kvBT.data())
          .p(cache.data())
          .p(seq.data())
          .p(sel.data())
          .p(nsel.data())
          .p(pd.data())
          .i(maxCtx)
          .p(ov2.data())
          .p(heads.data())
          .i(H)
          .i(dn)
          .i(dr)
          .i(dv)
          .i(kvr)
          .f(scale)
          .run();
      Err e2;
      for (size_t i = 0; i < ov.size(); ++i)
        e2.add(ov2[i], ov[i]);
      EXPECT_LE(e2.rel(), 1e-5) << "mla_attn vs the three launches";
    }
  }
}

TEST(HelperTwins, RouteIsTheCpuRouter) {
  struct Case {
    int E, k, B;
    bool normalize, ties;
  };
  for (const Case c :
       {Case{256, 8, 3, true, false}, Case{256, 8, 2, true, true},
        Case{33, 4, 1, false, true}, Case{16, 20, 1, true, false}}) {
    std::mt19937 rng(40 + c.E + c.k);
    std::vector<float> logits = randn(rng, (size_t)c.B * c.E), bias(c.E);
    for (auto &v : bias)
      v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    if (c.ties) {
      for (auto &v : logits)
        v = float(int(v * 2.0f)) / 2.0f;
      std::fill(bias.begin(), bias.end(), 0.0f);
    }
    std::vector<int> ids((size_t)c.B * c.k);
    std::vector<float> w((size_t)c.B * c.k);
    Call("route", 1, c.B, 1, (c.E + 31) / 32 * 32)
        .p(logits.data())
        .p(bias.data())
        .i(c.E)
        .i(c.k)
        .i(c.normalize)
        .f(2.5)
        .p(ids.data())
        .p(w.data())
        .run();
    for (int b = 0; b < c.B; ++b) {
      std::vector<double> l(logits.begin() + (size_t)b * c.E,
                            logits.begin() + (size_t)(b + 1) * c.E);
      const cpu::RouterChoice rc = cpu::routeExperts(
          l, bias.data(), std::min(c.k, c.E), c.normalize, 2.5);
      for (int kk = 0; kk < c.k; ++kk) {
        const bool ok = kk < (int)rc.experts.size();
        EXPECT_EQ(ids[(size_t)b * c.k + kk], ok ? (int)rc.experts[kk] : -1);
        EXPECT_TRUE(sameBits(w[(size_t)b * c.k + kk],
                             ok ? (float)rc.weights[kk] : 0.0f))
            << "E" << c.E << " b" << b << " slot " << kk;
      }
    }
  }
}

/// NaN logits (a NaN activation upstream) rank last: still k distinct
/// valid ids, the finite experts first (route.cuh's pick table holds 64,
/// which unordered NaN scores used to overrun).
TEST(HelperTwins, RouteRanksNanScoresLast) {
  const int E = 256, k = 8;
  std::mt19937 rng(77);
  std::vector<float> logits = randn(rng, E);
  for (int e = 0; e < E; ++e)
    if (e % 64 != 5) // four finite experts
      logits[e] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int> ids(k);
  std::vector<float> w(k);
  Call("route", 1, 1, 1, E)
      .p(logits.data())
      .p(nullptr)
      .i(E)
      .i(k)
      .i(1)
      .f(2.5)
      .p(ids.data())
      .p(w.data())
      .run();
  std::set<int> seen(ids.begin(), ids.end());
  EXPECT_EQ(seen.size(), size_t(k));
  for (int i : ids)
    EXPECT_TRUE(i >= 0 && i < E) << i;
  for (int e : {5, 69, 133, 197})
    EXPECT_TRUE(seen.count(e)) << e;
}

TEST(HelperTwins, SwigluIsSiluTimesUpOnOwnedChunks) {
  std::mt19937 rng(9);
  const int n = 300, B = 2, gs = 320;
  std::vector<float> g = randn(rng, (size_t)B * gs),
                     u = randn(rng, (size_t)B * gs);
  std::vector<uint8_t> own = {1, 0, 1};
  // limit 0: no clamp; 0.5 (GLM-5.3-Flash's swiglu_limit): gate <= 0.5, up
  // in [-0.5, 0.5] before the product, as the reference's swigluPart.
  for (double limit : {0.0, 0.5}) {
    std::vector<float> act((size_t)B * n, -1.0f);
    Call("swiglu", blocks(n), B, 1, 256)
        .p(g.data())
        .p(u.data())
        .i(gs)
        .p(act.data())
        .i(n)
        .p(own.data())
        .f(limit)
        .run();
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < n; ++j) {
        double gg = g[b * gs + j], uu = u[b * gs + j];
        if (limit > 0) {
          gg = std::min(gg, limit);
          uu = std::clamp(uu, -limit, limit);
        }
        const float want = own[j / 128] ? (float)(cpu::silu(gg) * uu) : 0.0f;
        ASSERT_TRUE(sameBits(act[b * n + j], want))
            << b << " " << j << " limit " << limit;
      }
  }
}

TEST(HelperTwins, GemvAnyMatchesCpuGemvInEveryStoredForm) {
  std::mt19937 rng(10);
  const int in = 96, out = 37, B = 2, xs = 100, ys = 40;
  std::vector<float> x = randn(rng, (size_t)B * xs);
  const int forms[][2] = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {3, 2}, {3, 3}};
  for (auto &form : forms) {
    KvB w = makeKvB(rng, out, in, form[0], form[1]);
    cpu::Matrix m;
    m.rows = out;
    m.cols = in;
    m.data = w.wd;
    std::vector<float> y((size_t)B * ys, 0.0f), ref(out);
    Call("gemv_any", blocks(out, 8), B, 1, 256)
        .p(x.data())
        .i(xs)
        .p(w.bytes.data())
        .i(form[0])
        .p(w.scale.empty() ? nullptr : w.scale.data())
        .i(form[1])
        .p(y.data())
        .i(ys)
        .i(in)
        .i(out)
        .run();
    for (int b = 0; b < B; ++b) {
      cpu::gemv(m, x.data() + (size_t)b * xs, ref.data());
      Err e;
      for (int o = 0; o < out; ++o)
        e.add(y[(size_t)b * ys + o], ref[o]);
      EXPECT_LE(e.rel(), 1e-5) << "dt " << form[0] << " sk " << form[1];
    }
  }
}

TEST(HelperTwins, HfExpertsMatchFp64Experts) {
  // Two rows, three routed experts of which each row takes two, plus a
  // shared expert: act, down per 128-chunk unit, the ordered unit sum.
  std::mt19937 rng(11);
  const int d = 24, I = 200, E = 3, K = 2, B = 2;
  const int chunks = (I + 127) / 128;
  const long long stride = (long long)I * d;
  KvB gate = makeKvB(rng, E * I, d, 2, 0), up = makeKvB(rng, E * I, d, 2, 0);
  KvB down = makeKvB(rng, E * d, I, 2, 0);
  std::vector<float> x = randn(rng, (size_t)B * d);
  std::vector<int> ids = {2, 0, 1, 2};
  std::vector<float> wts = {0.7f, 0.3f, 0.5f, 0.5f};
  std::vector<double> act((size_t)B * K * I);
  const int slots = K * chunks;
  std::vector<double> part((size_t)B * slots * d);
  std::vector<float> y((size_t)B * d);
  Call("hf_expert_act", blocks(I), K, B, 256)
      .p(gate.bytes.data())
      .p(up.bytes.data())
      .i(2)
      .p(x.data())
      .p(ids.data())
      .i(stride)
      .i(I)
      .i(d)
      .p(nullptr)
      .i(2)
      .i(0)
      .p(act.data())
      .f(0.0) // no clamp
      .run();
  Call("hf_expert_down", blocks(d), K * chunks, B, 256)
      .p(down.bytes.data())
      .i(2)
      .p(act.data())
      .p(ids.data())
      .p(wts.data())
      .i(stride)
      .i(I)
      .i(d)
      .i(K)
      .p(part.data())
      .i(slots)
      .i(0)
      .run();
  Call("reduce_units", blocks(d), B, 1, 256)
      .p(part.data())
      .i(slots)
      .i(d)
      .p(y.data())
      .run();
  Err e;
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < d; ++r) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        const int ex = ids[b * K + k];
        for (int j = 0; j < I; ++j) {
          double g = 0, v = 0;
          for (int i = 0; i < d; ++i) {
            g += (double)gate.wd[((size_t)ex * I + j) * d + i] * x[b * d + i];
            v += (double)up.wd[((size_t)ex * I + j) * d + i] * x[b * d + i];
          }
          s += wts[b * K + k] * cpu::silu(g) * v *
               down.wd[((size_t)ex * d + r) * I + j];
        }
      }
      e.add(y[b * d + r], s);
    }
  EXPECT_LE(e.rel(), 1e-6);
}

TEST(HelperTwins, GlueFamiliesMoveTheRightElements) {
  // sum_parts: fixed-order fp32 sum.
  std::vector<float> parts = {1.0f, 2.0f, 1e8f, -1e8f, 3.0f, 0.5f};
  std::vector<float> out(2);
  Call("sum_parts", 1, 1, 1, 256).p(parts.data()).i(3).i(2).p(out.data()).run();
  EXPECT_EQ(out[0], (1.0f + 1e8f) + 3.0f);
  EXPECT_EQ(out[1], (2.0f + -1e8f) + 0.5f);
  // onehot rows.
  std::vector<float> X(2 * 10, -1.0f);
  Call("onehot", 1, 2, 1, 256).p(X.data()).i(2).i(10).i(4).run();
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(X[b * 10 + c], c == 4 + b ? 1.0f : 0.0f);
  // transpose [rows][cols] view.
  std::vector<float> src(12), dst(12);
  std::iota(src.begin(), src.end(), 0.0f);
  Call("transpose", 1, 1, 1, 256).p(src.data()).p(dst.data()).i(3).i(4).run();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(dst[r * 4 + c], src[c * 3 + r]);
  // vocab_gather of two ranks' slices [2][B][maxCount].
  const int B = 2, maxCount = 3, V = 5;
  std::vector<long long> vb = {0, 3, 5};
  std::vector<float> g(2 * B * maxCount), logits(B * V, -1.0f);
  std::iota(g.begin(), g.end(), 0.0f);
  Call("vocab_gather", 1, 2, B, 256)
      .p(g.data())
      .p(vb.data())
      .i(B)
      .i(maxCount)
      .p(logits.data())
      .i(V)
      .run();
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < 2; ++r)
      for (long long i = 0; i < vb[r + 1] - vb[r]; ++i)
        EXPECT_EQ(logits[b * V + vb[r] + i], g[(r * B + b) * maxCount + i]);
  // EXL3 expert inputs, both layouts.
  const int d = 8, E = 3, K = 2;
  std::vector<float> x(B * d), suh(2 * E * d);
  std::iota(x.begin(), x.end(), 1.0f);
  std::iota(suh.begin(), suh.end(), 0.5f);
  std::vector<int> ids = {2, -1, 0, 1};
  std::vector<float> xh(2 * B * K * d);
  Call("exl3_expert_in", 1, K, 2 * B, 256)
      .p(x.data())
      .p(suh.data())
      .p(ids.data())
      .p(xh.data())
      .i(d)
      .i(E)
      .i(B)
      .run();
  for (int p = 0; p < 2; ++p)
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < K; ++k)
        for (int i = 0; i < d; ++i) {
          const int e = ids[b * K + k];
          EXPECT_EQ(xh[((p * B + b) * K + k) * d + i],
                    e < 0 ? x[b * d + i] * 0.0f
                          : x[b * d + i] * suh[(p * E + e) * d + i]);
        }
  const int slots = K + 1; // one shared expert after the routed ones
  std::vector<float> xm(2 * B * slots * d), suh2(2 * (E + 1) * d);
  std::iota(suh2.begin(), suh2.end(), 0.25f);
  Call("moe_exl3_in", 1, slots, 2 * B, 256)
      .p(x.data())
      .p(suh2.data())
      .p(ids.data())
      .p(xm.data())
      .i(d)
      .i(E + 1)
      .i(E)
      .i(K)
      .i(B)
      .run();
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < slots; ++k)
      for (int p = 0; p < 2; ++p)
        for (int i = 0; i < d; ++i) {
          const int e = k < K ? ids[b * K + k] : E + (k - K);
          EXPECT_EQ(xm[((b * slots + k) * 2 + p) * d + i],
                    e < 0 ? x[b * d + i] * 0.0f
                          : x[b * d + i] * suh2[(p * (E + 1) + e) * d + i]);
        }
  // Fills: splitmix64 words under the mask; a constant.
  std::vector<uint32_t> r(100);
  Call("fill_random", 1024, 1, 1, 256)
      .p(r.data())
      .i(100)
      .i(77)
      .i(0xBBFFBBFF)
      .run();
  for (int i = 0; i < 100; ++i) {
    uint64_t z = 77 + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ASSERT_EQ(r[i], (uint32_t)z & 0xBBFFBBFFu) << i;
  }
  std::vector<float> f(33, 0.0f);
  Call("fill_f32", 1024, 1, 1, 256).p(f.data()).i(33).f(1.5).run();
  for (float v : f)
    EXPECT_EQ(v, 1.5f);
}

} // namespace
