//===- flash_twins_test.cpp - twins of the GLM-5.3-Flash decode families --===//
//
// The twins of mhc_mix, mhc_post, kda_decode, kpool_store and the pooled
// indexer_scores_ctx / dsa_select (runtime/twins/twin_flash.cpp,
// twin_dsa.cpp), each driven through a Launch in its family's ABI, against
// the fp64 CPU reference of GLM-5.3-Flash (runtime/cpu/flash_ops.h: the mHC
// map, the conv step, forget gate and delta rule, the k-pool key) on random
// data: several sizes (S = 4 × d = 4096, dk = dv = 128, and tiny ones), B
// rows each with its own state slot, several consecutive tokens for the
// stateful kernels. The kernels compute in fp32 (the fp64 reference is
// HF's fp32 to ~1e-6): relative error (max|twin − ref| / max|ref|) <= 1e-5
// everywhere; selections are exact.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/cpu/flash_ops.h"
#include "runtime/cpu/ops.h"

#include "twin_test_util.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace {

using namespace glm::twintest;
namespace cpu = glm::rt::cpu;
using KV = glm::plan::KeyValues;

/// Runs the twin of `family` after checking the argument count against the
/// family's ABI (its PARAMS macro).
void run(const std::string &family, const KV &targs, unsigned gx, unsigned gy,
         unsigned bx, std::vector<Arg> args) {
  ASSERT_EQ(args.size(), glm::codegen::familyInfo(family).kernelParams.size())
      << family;
  runTwin(launch(family, targs, gx, gy, bx, std::move(args)));
}

std::vector<double> toD(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

constexpr double kTol = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- mHC

struct MhcCase {
  int S, d, G, threads;
};

class FlashTwinsMhc : public ::testing::TestWithParam<MhcCase> {};

TEST_P(FlashTwinsMhc, MixAndPostMatchTheReferenceOverTwoSites) {
  const MhcCase c = GetParam();
  const int S = c.S, d = c.d, G = c.G, B = 2, M = (2 + S) * S, iters = 20;
  const double rmsEps = 1e-5, hcEps = 1e-6;
  std::mt19937 rng(S * 1000 + d);
  const KV targs = {{"streams", std::to_string(S)},
                    {"threads", std::to_string(c.threads)}};
  auto site = [&] {
    cpu::HyperConnWeights w;
    w.fn.rows = M;
    w.fn.cols = (int64_t)S * d;
    w.fn.data = randn(rng, (size_t)M * S * d, 0.02f);
    w.base = randn(rng, M, 0.5f);
    w.scale = randn(rng, 3, 0.5f);
    for (float &s : w.scale)
      s = 1.0f + s;
    return w;
  };
  // The fn GEMV another family does: fp64 dot, fp32 out.
  auto project = [&](const cpu::HyperConnWeights &w,
                     const std::vector<float> &X) {
    std::vector<float> m((size_t)B * M);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < M; ++i)
        m[(size_t)b * M + i] =
            (float)cpu::dot(w.fn.row(i), X.data() + (size_t)b * S * d,
                            (int64_t)S * d);
    return m;
  };
  auto rowOf = [&](const std::vector<float> &X, int b) {
    return std::vector<float>(X.begin() + (size_t)b * S * d,
                              X.begin() + (size_t)(b + 1) * S * d);
  };
  std::vector<float> X = randn(rng, (size_t)B * S * d);
  std::vector<double> parts; // the previous post's, empty at the first site
  for (int s = 0; s < 2; ++s) {
    const cpu::HyperConnWeights w = site();
    const std::vector<float> m = project(w, X);
    std::vector<float> u((size_t)B * d, kNaN), coef((size_t)B * M, kNaN);
    run("mhc_mix", targs, G, B, c.threads,
        {P(X.data()), P(m.data()), P(w.base.data()), P(w.scale.data()), I(0),
         P(parts.empty() ? nullptr : parts.data()), I(G), P(u.data()),
         P(coef.data()), I(d), F(rmsEps), F(hcEps), I(iters)});
    std::vector<float> y = randn(rng, (size_t)B * d);
    std::vector<float> Xo((size_t)B * S * d, kNaN), Xi = X;
    std::vector<double> outParts((size_t)B * G, 0.0);
    run("mhc_post", targs, G, B, c.threads,
        {P(y.data()), I(d), P(X.data()), P(coef.data()), P(Xo.data()),
         P(outParts.data()), I(d)});
    run("mhc_post", targs, G, B, c.threads, // in place: the same bits
        {P(y.data()), I(d), P(Xi.data()), P(coef.data()), P(Xi.data()),
         P(nullptr), I(d)});
    EXPECT_EQ(0, std::memcmp(Xi.data(), Xo.data(), Xo.size() * 4));
    const std::string tag = "S" + std::to_string(S) + " d" +
                            std::to_string(d) + " G" + std::to_string(G) +
                            " site " + std::to_string(s);
    for (int b = 0; b < B; ++b) {
      std::vector<float> xb = rowOf(X, b);
      const cpu::HyperMix hm =
          cpu::hyperConnMix(w, xb, S, rmsEps, hcEps, iters);
      std::vector<double> want(hm.pre);
      want.insert(want.end(), hm.post.begin(), hm.post.end());
      want.insert(want.end(), hm.comb.begin(), hm.comb.end());
      expectRel("mhc_mix coef " + tag, coef.data() + (size_t)b * M,
                want.data(), M, kTol);
      const std::vector<double> uRef = toD(cpu::hyperConnCollapse(hm, xb, S));
      expectRel("mhc_mix u " + tag, u.data() + (size_t)b * d, uRef.data(), d,
                kTol);
      const std::vector<float> yb(y.begin() + (size_t)b * d,
                                  y.begin() + (size_t)(b + 1) * d);
      cpu::hyperConnExpand(hm, yb, xb, S);
      const std::vector<double> xRef = toD(xb);
      expectRel("mhc_post X' " + tag, Xo.data() + (size_t)b * S * d,
                xRef.data(), (size_t)S * d, kTol);
      // The partials add up to Σ X'² of the twin's own X'.
      double ss = 0, sp = 0;
      for (size_t i = 0; i < (size_t)S * d; ++i)
        ss += (double)Xo[(size_t)b * S * d + i] * Xo[(size_t)b * S * d + i];
      for (int g = 0; g < G; ++g)
        sp += outParts[(size_t)b * G + g];
      EXPECT_NEAR(sp, ss, 1e-6 * ss) << tag;
    }
    X = Xo;
    parts = outParts; // the next site reads the partials
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, FlashTwinsMhc,
    ::testing::Values(MhcCase{4, 4096, 16, 256}, MhcCase{4, 64, 1, 128},
                      MhcCase{2, 20, 3, 128}, MhcCase{1, 7, 2, 128},
                      MhcCase{3, 40, 4, 256}),
    [](const auto &i) {
      return "S" + std::to_string(i.param.S) + "_d" +
             std::to_string(i.param.d) + "_G" + std::to_string(i.param.G);
    });

TEST(FlashTwins, MhcPostWithoutStreamsBroadcastsTheEmbedding) {
  const int S = 4, d = 10, M = (2 + S) * S;
  std::mt19937 rng(3);
  std::vector<float> y = randn(rng, d), coef(M, 0.0f), X((size_t)S * d, kNaN);
  for (int i = 0; i < S; ++i)
    coef[S + i] = 1.0f;
  std::vector<double> parts(2);
  run("mhc_post", {{"streams", "4"}, {"threads", "128"}}, 2, 1, 128,
      {P(y.data()), I(d), P(nullptr), P(coef.data()), P(X.data()),
       P(parts.data()), I(d)});
  double ss = 0;
  for (int i = 0; i < S; ++i)
    for (int c = 0; c < d; ++c) {
      EXPECT_EQ(X[(size_t)i * d + c], y[c]);
      ss += (double)y[c] * y[c];
    }
  EXPECT_NEAR(parts[0] + parts[1], ss, 1e-6 * ss);
}

TEST(FlashTwins, MhcHeadIsTheStreamsMean) {
  const int S = 4, d = 300, B = 2;
  std::mt19937 rng(5);
  std::vector<float> X = randn(rng, (size_t)B * S * d), out((size_t)B * d);
  run("mhc_head", {{"streams", "4"}, {"threads", "256"}}, 2, B, 256,
      {P(X.data()), P(out.data()), I(d)});
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < d; ++c) {
      double acc = 0; // the reference's order (CpuForward::runTokens)
      for (int j = 0; j < S; ++j)
        acc += X[((size_t)b * S + j) * d + c];
      EXPECT_EQ(out[(size_t)b * d + c], (float)(acc / S)) << b << " " << c;
    }
}

// ---------------------------------------------------------------- KDA

struct KdaCase {
  int H, h0, n, dk, dv, K, threads, rows, wdt;
  float lower;
};

class FlashTwinsKda : public ::testing::TestWithParam<KdaCase> {};

TEST_P(FlashTwinsKda, TokensMatchTheReferenceStepByStep) {
  const KdaCase c = GetParam();
  const int H = c.H, h0 = c.h0, n = c.n, dk = c.dk, dv = c.dv, K = c.K;
  const int B = 2, slots = 3, T = 6, K1 = K - 1;
  const int seq[B] = {2, 0};
  const double eps = 1e-5;
  std::mt19937 rng(dk * 100 + dv + n);
  // Weights as stored (wdt) and as the reference sees them (rounded).
  auto weight = [&](size_t count, float sd, float mean = 0.0f) {
    std::vector<float> v = randn(rng, count, sd);
    for (float &x : v)
      x = roundTo(c.wdt, x + mean);
    return v;
  };
  const std::vector<float> convQ = weight((size_t)H * dk * K, 0.5f),
                           convK = weight((size_t)H * dk * K, 0.5f),
                           convV = weight((size_t)H * dv * K, 0.5f),
                           aLog = weight(H, 0.7f, 1.0f),
                           dtBias = weight((size_t)H * dk, 0.5f),
                           oNorm = weight(dv, 0.2f, 1.0f);
  auto stored = [&](const std::vector<float> &v) { return storeAs(c.wdt, v); };
  const std::vector<uint8_t> sQ = stored(convQ), sK = stored(convK),
                             sV = stored(convV), sA = stored(aLog),
                             sD = stored(dtBias), sN = stored(oNorm);
  // The fused projection row: [q | k | v | f | gate], stride ins; b apart.
  const int oq = 0, ok = n * dk, ov = 2 * n * dk, of = ov + n * dv,
            og = of + n * dk, ins = og + n * dv + 3, bs = n + 1;
  std::vector<float> convState((size_t)slots * n * (2 * dk + dv) * K1, kNaN),
      state((size_t)slots * n * dk * dv, kNaN);
  // Reference state per (row, head).
  std::vector<std::vector<double>> Sref(B * n,
                                        std::vector<double>((size_t)dk * dv));
  std::vector<std::vector<float>> cref(
      B * n, std::vector<float>((size_t)(2 * dk + dv) * std::max(K1, 1), 0));
  const KV targs = {{"rows", std::to_string(c.rows)},
                    {"threads", std::to_string(c.threads)}};
  const std::string tag = "dk" + std::to_string(dk) + " dv" +
                          std::to_string(dv) + " t" +
                          std::to_string(c.threads) + " r" +
                          std::to_string(c.rows) + " wdt" +
                          std::to_string(c.wdt);
  for (int t = 0; t < T; ++t) {
    const std::vector<float> in = randn(rng, (size_t)B * ins),
                             bRaw = randn(rng, (size_t)B * bs);
    const std::vector<int> pos = {t, t};
    std::vector<float> out((size_t)B * n * dv, kNaN);
    run("kda_decode", targs, n, B, c.threads,
        {P(in.data() + oq), P(in.data() + ok), P(in.data() + ov),
         P(in.data() + of), P(in.data() + og), I(ins), P(bRaw.data()), I(bs),
         P(sQ.data()), P(sK.data()), P(sV.data()), P(sA.data()),
         P(sD.data()), P(sN.data()), I(c.wdt), P(convState.data()),
         P(state.data()), P(seq), P(pos.data()), P(out.data()), I(h0), I(dk),
         I(dv), I(K), F(c.lower), F(eps)});
    std::vector<double> want((size_t)B * n * dv);
    for (int b = 0; b < B; ++b)
      for (int hl = 0; hl < n; ++hl) {
        const int h = h0 + hl;
        const float *row = in.data() + (size_t)b * ins;
        std::vector<double> q(dk), k(dk), v(dv), g(dk), o(dv);
        float *cs = cref[b * n + hl].data();
        for (int a = 0; a < dk; ++a) {
          q[a] = cpu::causalConvStep(convQ.data() + ((size_t)h * dk + a) * K,
                                     cs + (size_t)a * K1, K,
                                     row[oq + hl * dk + a]);
          k[a] = cpu::causalConvStep(convK.data() + ((size_t)h * dk + a) * K,
                                     cs + (size_t)(dk + a) * K1, K,
                                     row[ok + hl * dk + a]);
          g[a] = cpu::kdaForgetGate((double)row[of + hl * dk + a] +
                                        dtBias[(size_t)h * dk + a],
                                    aLog[h], c.lower != 0.0f, c.lower);
        }
        for (int j = 0; j < dv; ++j)
          v[j] = cpu::causalConvStep(convV.data() + ((size_t)h * dv + j) * K,
                                     cs + (size_t)(2 * dk + j) * K1, K,
                                     row[ov + hl * dv + j]);
        cpu::kdaL2Norm(q.data(), dk);
        cpu::kdaL2Norm(k.data(), dk);
        for (double &x : q)
          x /= std::sqrt((double)dk);
        const double beta = cpu::sigmoid(bRaw[(size_t)b * bs + hl]);
        cpu::kdaRecurrentStep(Sref[b * n + hl], q.data(), k.data(), v.data(),
                              g.data(), beta, dk, dv, o.data());
        double ss = 0;
        for (double x : o)
          ss += x * x;
        const double inv = 1.0 / std::sqrt(ss / dv + eps);
        for (int j = 0; j < dv; ++j)
          want[((size_t)b * n + hl) * dv + j] =
              oNorm[j] * (o[j] * inv) *
              cpu::sigmoid(row[og + hl * dv + j]);
      }
    expectRel("kda_decode out " + tag + " token " + std::to_string(t),
              out.data(), want.data(), want.size(), kTol);
  }
  for (int b = 0; b < B; ++b)
    for (int hl = 0; hl < n; ++hl) {
      const float *S =
          state.data() + ((size_t)seq[b] * n + hl) * (size_t)dk * dv;
      expectRel("kda_decode state " + tag + " row " + std::to_string(b) +
                    " head " + std::to_string(hl),
                S, Sref[b * n + hl].data(), (size_t)dk * dv, kTol);
    }
  // Slot 1 belongs to no row: untouched.
  for (size_t i = 0; i < (size_t)n * dk * dv; ++i)
    ASSERT_TRUE(std::isnan(state[(size_t)1 * n * dk * dv + i]));
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, FlashTwinsKda,
    ::testing::Values(KdaCase{4, 1, 2, 128, 128, 4, 256, 64, 0, -5.0f},
                      KdaCase{2, 0, 2, 128, 128, 4, 512, 32, 2, -5.0f},
                      KdaCase{1, 0, 1, 128, 128, 4, 128, 128, 0, -5.0f},
                      KdaCase{3, 0, 3, 16, 20, 4, 128, 4, 2, -5.0f},
                      KdaCase{3, 2, 1, 20, 16, 3, 128, 8, 1, 0.0f},
                      KdaCase{2, 1, 1, 64, 96, 1, 128, 64, 0, -5.0f}),
    [](const auto &i) {
      const KdaCase &c = i.param;
      return "dk" + std::to_string(c.dk) + "_dv" + std::to_string(c.dv) +
             "_K" + std::to_string(c.K) + "_t" + std::to_string(c.threads) +
             "_r" + std::to_string(c.rows) + "_wdt" + std::to_string(c.wdt) +
             (c.lower == 0.0f ? "_softplus" : "");
    });

// ---------------------------------------------------------------- k-pool

TEST(FlashTwins, KpoolStoreScoresAndSelectionMatchTheReference) {
  for (int hd : {128, 16}) {
    const int Pool = 4, maxCtx = 64, B = 2, slots = 2, nh = 4, want = 2, T = 23;
    const int threads = hd == 128 ? 128 : 64, adt = 2, gs = hd + 5;
    const int seq[B] = {1, 0};
    std::mt19937 rng(hd);
    const std::vector<float> lnW = randn(rng, hd, 0.3f),
                             lnB = randn(rng, hd, 0.1f);
    std::vector<float> ape = randn(rng, (size_t)Pool * hd);
    for (float &x : ape)
      x = roundTo(adt, x);
    const std::vector<uint8_t> apeS = storeAs(adt, ape);
    std::vector<float> ring((size_t)slots * 2 * Pool * hd, kNaN),
        pools((size_t)slots * (maxCtx / Pool) * hd, kNaN);
    std::vector<std::vector<float>> keys(B), gates(B), poolRef(B);
    const KV ts = {{"threads", std::to_string(threads)}};
    for (int t = 0; t < T; ++t) {
      const std::vector<float> k = randn(rng, (size_t)B * hd),
                               gate = randn(rng, (size_t)B * gs);
      const std::vector<int> pos = {t, t};
      run("kpool_store", ts, 1, B, threads,
          {P(k.data()), P(lnW.data()), P(lnB.data()), P(gate.data()), I(gs),
           P(apeS.data()), I(adt), P(ring.data()), P(pools.data()), P(seq),
           P(pos.data()), I(hd), I(Pool), I(maxCtx)});
      for (int b = 0; b < B; ++b) {
        std::vector<float> kn(hd);
        cpu::layerNorm(k.data() + (size_t)b * hd, lnW.data(), lnB.data(),
                       kn.data(), hd, 1e-6);
        keys[b].insert(keys[b].end(), kn.begin(), kn.end());
        gates[b].insert(gates[b].end(), gate.begin() + (size_t)b * gs,
                        gate.begin() + (size_t)b * gs + hd);
        if ((t + 1) % Pool == 0) {
          const std::vector<float> pk =
              cpu::kpoolKey(keys[b].data() + (size_t)(t + 1 - Pool) * hd,
                            gates[b].data() + (size_t)(t + 1 - Pool) * hd,
                            ape.data(), Pool, hd);
          const std::vector<double> pkD = toD(pk);
          expectRel("kpool_store pool hd" + std::to_string(hd) + " token " +
                        std::to_string(t),
                    pools.data() +
                        ((size_t)seq[b] * (maxCtx / Pool) + t / Pool) * hd,
                    pkD.data(), hd, kTol);
        }
      }
      // Scores over the complete pools, then the selection.
      const std::vector<float> qi = randn(rng, (size_t)B * nh * hd),
                               wts = randn(rng, (size_t)B * nh);
      const double headScale = 1.0 / std::sqrt((double)nh),
                   dotScale = 1.0 / std::sqrt((double)hd);
      std::vector<double> score((size_t)B * (maxCtx / Pool), 0.0);
      const KV tp = {{"pool", "4"}, {"threads", "128"}};
      run("indexer_scores_ctx", tp, 2, B, 128,
          {P(qi.data()), P(pools.data()), P(wts.data()), P(score.data()),
           P(seq), P(pos.data()), I(nh), I(hd), I(maxCtx), F(headScale),
           F(dotScale), P(nullptr), I(0)});
      std::vector<int> flags((size_t)B * (maxCtx / Pool)), sel((size_t)B * maxCtx),
          nsel(B);
      run("dsa_select", {{"pool", "4"}, {"threads", "256"}}, 1, B, 256,
          {P(score.data()), P(pos.data()), I(want), P(flags.data()),
           P(sel.data()), P(nsel.data()), I(maxCtx)});
      for (int b = 0; b < B; ++b) {
        // The reference forward's rule (cpu/forward.cpp attendMla).
        const int cands = (t + 1) / Pool;
        std::vector<int64_t> chosen;
        if (cands <= want) {
          chosen.resize(cands);
          std::iota(chosen.begin(), chosen.end(), 0);
        } else {
          std::vector<double> sc(cands);
          for (int p = 0; p < cands; ++p) {
            const float *kp =
                pools.data() + ((size_t)seq[b] * (maxCtx / Pool) + p) * hd;
            double acc = 0;
            for (int hh = 0; hh < nh; ++hh) {
              const double v =
                  cpu::dot(qi.data() + ((size_t)b * nh + hh) * hd, kp, hd) *
                  dotScale;
              acc += (double)wts[(size_t)b * nh + hh] * headScale *
                     std::max(v, 0.0);
            }
            sc[p] = acc;
            EXPECT_NEAR(score[(size_t)b * (maxCtx / Pool) + p], acc,
                        1e-12 * std::max(1.0, std::fabs(acc)));
          }
          chosen = cpu::topkIndices(sc, want);
          std::sort(chosen.begin(), chosen.end());
        }
        std::vector<int> ref;
        for (int64_t p : chosen)
          for (int j = 0; j < Pool; ++j)
            ref.push_back(int(p * Pool + j));
        for (int u = cands * Pool; u <= t; ++u)
          ref.push_back(u);
        ASSERT_EQ(nsel[b], (int)ref.size()) << "hd " << hd << " token " << t;
        EXPECT_TRUE(std::equal(ref.begin(), ref.end(),
                               sel.begin() + (size_t)b * maxCtx))
            << "hd " << hd << " token " << t << " row " << b;
      }
    }
  }
}

// Pool 1 is the plain DSA indexer: the same selection as before.
TEST(FlashTwins, DsaSelectPoolOneKeepsTheTokenRule) {
  const int maxCtx = 16, k = 3;
  const std::vector<double> score = {0.5, 2.0, -1.0, 2.0, 0.1, 3.0};
  const std::vector<int> pos = {5};
  std::vector<int> flags(maxCtx), sel(maxCtx), nsel(1);
  run("dsa_select", {{"threads", "256"}}, 1, 1, 256,
      {P(score.data()), P(pos.data()), I(k), P(flags.data()), P(sel.data()),
       P(nsel.data()), I(maxCtx)});
  ASSERT_EQ(nsel[0], 3);
  EXPECT_EQ(sel[0], 1);
  EXPECT_EQ(sel[1], 3);
  EXPECT_EQ(sel[2], 5);
}

} // namespace
