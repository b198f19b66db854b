//===- flash_decode_gpu_test.cpp - GLM-5.3-Flash decode families vs twins -===//
//
// mhc_mix, mhc_post, kda_decode, kpool_store and the pooled
// indexer_scores_ctx / dsa_select, built as a plan builds them (--fmad=false)
// and launched with the grids their templates document, against their C++
// twins (runtime/twins/twin_flash.cpp, twin_dsa.cpp) on the same inputs.
// Tolerance: the same bits. The kernels use only IEEE-exact operations
// (flash_math.cuh spells out exp) and their fp32 / fp64 sums in the twins'
// orders; the one libm call, kda_decode's softplus form (no lower bound), is
// held to 1e-6. Stateful kernels run several tokens, each launch starting
// from the twin's state of the token before.
//
//===----------------------------------------------------------------------===//
#include "gpu_dual.h"
#include "gpu_test_util.h"

#include "codegen/templates/kv_cache.cuh"

#include <numeric>

namespace glm::gputest {
namespace {

class FlashDecodeGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(FlashDecodeGpu, MhcMixAndPostMatchTwinsExactly) {
  struct Case {
    int S, d, G, threads;
  };
  for (const Case c : {Case{4, 4096, 16, 256}, Case{4, 4096, 1, 1024},
                       Case{2, 20, 3, 128}, Case{3, 40, 4, 256}}) {
    const int B = 3, M = (2 + c.S) * c.S;
    std::mt19937 rng(c.S * 100 + c.G);
    const std::string tag = "S" + std::to_string(c.S) + " d" +
                            std::to_string(c.d) + " G" + std::to_string(c.G);
    const std::map<std::string, std::string> st = {
        {"streams", std::to_string(c.S)}};
    const std::vector<float> X = randn(rng, (size_t)B * c.S * c.d),
                             m = randn(rng, (size_t)B * M, 20.0f),
                             base = randn(rng, M, 0.5f),
                             scale = randn(rng, 3, 0.5f);
    std::vector<double> parts((size_t)B * c.G);
    for (double &p : parts)
      p = std::fabs((double)randn(rng, 1)[0]) * c.d;
    for (int wdt : {0, 2})
      for (bool withParts : {false, true}) {
        Dual mix("mhc_mix", c.threads, st);
        mix.buf(X).buf(m).buf(storeAs(wdt, base)).buf(storeAs(wdt, scale));
        mix.i32(wdt);
        if (withParts)
          mix.buf(parts);
        else
          mix.null();
        mix.i32(c.G)
            .out<float>((size_t)B * c.d)
            .out<float>((size_t)B * M)
            .i32(c.d)
            .f64(1e-5)
            .f64(1e-6)
            .i32(20);
        mix.run(c.G, B, 1, c.threads);
        const std::string t2 = tag + (withParts ? " parts" : " own ss") +
                               " " + dtName(wdt);
        mix.check(7, "u " + t2, 0);
        mix.check(8, "coef " + t2, 0);
      }
    // Post: into another buffer with partials, in place, and without X.
    std::vector<float> coef = randn(rng, (size_t)B * M, 0.5f);
    const std::vector<float> y = randn(rng, (size_t)B * (c.d + 5));
    {
      Dual post("mhc_post", c.threads, st);
      post.buf(y).i32(c.d + 5).buf(X).buf(coef);
      post.out<float>((size_t)B * c.S * c.d).out<double>((size_t)B * c.G);
      post.i32(c.d);
      post.run(c.G, B, 1, c.threads);
      post.check(4, "X' " + tag, 0);
      post.checkD(5, "ss partials " + tag, 0);
    }
    {
      Dual post("mhc_post", c.threads, st);
      const int xs = post.hold(X);
      post.buf(y).i32(c.d + 5).arg(xs).buf(coef).arg(xs).null().i32(c.d);
      post.run(c.G, B, 1, c.threads);
      post.check(2, "X' in place " + tag, 0);
    }
    {
      Dual post("mhc_post", c.threads, st);
      post.buf(y).i32(c.d + 5).null().buf(coef);
      post.out<float>((size_t)B * c.S * c.d).out<double>((size_t)B * c.G);
      post.i32(c.d);
      post.run(c.G, B, 1, c.threads);
      post.check(4, "X' without streams " + tag, 0);
      post.checkD(5, "ss partials without streams " + tag, 0);
    }
  }
}

TEST_F(FlashDecodeGpu, KdaDecodeMatchesTwinOverTokens) {
  struct Case {
    int H, h0, n, dk, dv, K, threads, rows, wdt;
    float lower;
  };
  for (const Case c : {Case{8, 2, 4, 128, 128, 4, 256, 64, 2, -5.0f},
                       Case{4, 0, 4, 128, 128, 4, 512, 32, 0, -5.0f},
                       Case{2, 1, 1, 128, 128, 4, 128, 128, 1, -5.0f},
                       Case{3, 0, 3, 16, 20, 4, 128, 4, 1, -5.0f},
                       Case{3, 1, 2, 20, 16, 3, 128, 8, 0, 0.0f}}) {
    const int B = 3, slots = 4, T = 4, K1 = c.K - 1;
    const int n = c.n, dk = c.dk, dv = c.dv;
    const std::vector<int> seq = {3, 0, 1};
    std::mt19937 rng(dk * 10 + c.threads);
    const std::string tag = "dk" + std::to_string(dk) + " dv" +
                            std::to_string(dv) + " t" +
                            std::to_string(c.threads) + " r" +
                            std::to_string(c.rows) + " " + dtName(c.wdt) +
                            (c.lower == 0.0f ? " softplus" : "");
    auto w = [&](size_t count, float sd, float mean) {
      std::vector<float> v = randn(rng, count, sd);
      for (float &x : v)
        x += mean;
      return storeAs(c.wdt, v);
    };
    const auto convQ = w((size_t)c.H * dk * c.K, 0.5f, 0.0f),
               convK = w((size_t)c.H * dk * c.K, 0.5f, 0.0f),
               convV = w((size_t)c.H * dv * c.K, 0.5f, 0.0f),
               aLog = w(c.H, 0.7f, 1.0f),
               dtBias = w((size_t)c.H * dk, 0.5f, 0.0f),
               oNorm = w(dv, 0.2f, 1.0f);
    const int ins = 3 * n * dk + 2 * n * dv + 7, bs = n + 2;
    std::vector<float> convState((size_t)slots * n * (2 * dk + dv) * K1,
                                 NAN),
        state((size_t)slots * n * dk * dv, NAN);
    for (int t = 0; t < T; ++t) {
      Dual k("kda_decode", c.threads, {{"rows", std::to_string(c.rows)}});
      const int in = k.hold(randn(rng, (size_t)B * ins));
      k.arg(in, 0)
          .arg(in, 4 * n * dk)
          .arg(in, 4 * 2 * n * dk)
          .arg(in, 4 * (2 * n * dk + n * dv))
          .arg(in, 4 * (3 * n * dk + n * dv))
          .i32(ins)
          .buf(randn(rng, (size_t)B * bs))
          .i32(bs)
          .buf(convQ)
          .buf(convK)
          .buf(convV)
          .buf(aLog)
          .buf(dtBias)
          .buf(oNorm)
          .i32(c.wdt)
          .buf(convState)
          .buf(state)
          .buf(seq)
          .buf(std::vector<int>(B, t))
          .out<float>((size_t)B * n * dv)
          .i32(c.h0)
          .i32(dk)
          .i32(dv)
          .i32(c.K)
          .f32(c.lower)
          .f32(1e-5f);
      k.run(n, B, 1, c.threads);
      const double tol = c.lower == 0.0f ? 1e-6 : 0.0;
      const std::string tt = tag + " token " + std::to_string(t);
      k.check(19, "out " + tt, tol, tol ? "softplus: fp64 libm" : "");
      k.check(16, "state " + tt, tol);
      k.check(15, "conv state " + tt, 0);
      convState = k.host<float>(15);
      state = k.host<float>(16);
    }
  }
}

TEST_F(FlashDecodeGpu, KpoolStoreScoresAndSelectMatchTwins) {
  for (int hd : {128, 16}) {
    const int P = 4, maxCtx = 64, B = 2, slots = 3, nh = 8, gs = hd + 3;
    const int threads = hd == 128 ? 128 : 64;
    const std::vector<int> seq = {2, 0};
    std::mt19937 rng(hd + 1);
    const std::vector<float> lnW = randn(rng, hd, 0.3f),
                             lnB = randn(rng, hd, 0.1f);
    const std::vector<uint8_t> ape = storeAs(2, randn(rng, (size_t)P * hd));
    std::vector<float> ring((size_t)slots * 2 * P * hd, NAN),
        pools((size_t)slots * (maxCtx / P) * hd, NAN);
    for (int t = 0; t < 23; ++t) {
      const std::string tag =
          "hd" + std::to_string(hd) + " token " + std::to_string(t);
      const std::vector<int> pos(B, t);
      Dual s("kpool_store", threads);
      s.buf(randn(rng, (size_t)B * hd))
          .buf(lnW)
          .buf(lnB)
          .buf(randn(rng, (size_t)B * gs))
          .i32(gs)
          .buf(ape)
          .i32(2)
          .buf(ring)
          .buf(pools)
          .buf(seq)
          .buf(pos)
          .i32(hd)
          .i32(P)
          .i32(maxCtx);
      s.run(1, B, 1, threads);
      s.check(7, "ring " + tag, 0);
      s.check(8, "pools " + tag, 0);
      ring = s.host<float>(7);
      pools = s.host<float>(8);
      Dual sc("indexer_scores_ctx", 256, {{"pool", "4"}});
      sc.buf(randn(rng, (size_t)B * nh * hd))
          .buf(pools)
          .buf(randn(rng, (size_t)B * nh))
          .out<double>((size_t)B * (maxCtx / P))
          .buf(seq)
          .buf(pos)
          .i32(nh)
          .i32(hd)
          .i32(maxCtx)
          .f64(1.0 / std::sqrt((double)nh))
          .f64(1.0 / std::sqrt((double)hd))
          .unpaged();
      sc.run(2, B, 1, 256);
      sc.checkD(3, "pool scores " + tag, 0);
      Dual sel("dsa_select", 256, {{"pool", "4"}});
      sel.buf(sc.host<double>(3))
          .buf(pos)
          .i32(2)
          .out<int>((size_t)B * (maxCtx / P))
          .out<int>((size_t)B * maxCtx)
          .out<int>(B)
          .i32(maxCtx);
      sel.run(1, B, 1, 256);
      sel.checkInts(4, "pool selection " + tag);
      sel.checkInts(5, "pool selection count " + tag);
    }
  }
}

/// The pooled keys stored as bf16 and E4M3 (--kv-dtype bf16 | fp8,
/// kv_cache.cuh): kpool_store rounds the same fp32 K_p (IEEE-exact
/// pooling), so the same bytes; the pooled scores over them the same bits.
TEST_F(FlashDecodeGpu, KpoolStoreAndScoresMatchTwinsAtBf16AndE4m3) {
  for (const std::string kv : {"bf16", "e4m3"})
    for (int hd : {128, 16}) {
      const int P = 4, maxCtx = 64, B = 2, slots = 3, nh = 8, gs = hd + 3;
      const int threads = hd == 128 ? 128 : 64;
      const int form = kv == "bf16" ? glm::kv::kBf16 : glm::kv::kE4m3;
      const std::vector<int> seq = {2, 0};
      std::mt19937 rng(hd + 7);
      const std::vector<float> lnW = randn(rng, hd, 0.3f),
                               lnB = randn(rng, hd, 0.1f);
      const std::vector<uint8_t> ape = storeAs(2, randn(rng, (size_t)P * hd));
      std::vector<float> ring((size_t)slots * 2 * P * hd, NAN);
      std::vector<uint8_t> pools(
          (size_t)slots * (maxCtx / P) * glm::kv::rowBytes(form, hd), 0xFF);
      for (int t = 0; t < 12; ++t) {
        const std::string tag =
            kv + " hd" + std::to_string(hd) + " token " + std::to_string(t);
        const std::vector<int> pos(B, t);
        Dual s("kpool_store", threads, {{"kv", kv}});
        s.buf(randn(rng, (size_t)B * hd))
            .buf(lnW)
            .buf(lnB)
            .buf(randn(rng, (size_t)B * gs))
            .i32(gs)
            .buf(ape)
            .i32(2)
            .buf(ring)
            .buf(pools)
            .buf(seq)
            .buf(pos)
            .i32(hd)
            .i32(P)
            .i32(maxCtx);
        s.run(1, B, 1, threads);
        s.check(7, "ring " + tag, 0);
        s.checkInts(8, "pools " + tag + " (bytes)");
        ring = s.host<float>(7);
        pools = s.host<uint8_t>(8);
        Dual sc("indexer_scores_ctx", 256, {{"pool", "4"}, {"kv", kv}});
        sc.buf(randn(rng, (size_t)B * nh * hd))
            .buf(pools)
            .buf(randn(rng, (size_t)B * nh))
            .out<double>((size_t)B * (maxCtx / P))
            .buf(seq)
            .buf(pos)
            .i32(nh)
            .i32(hd)
            .i32(maxCtx)
            .f64(1.0 / std::sqrt((double)nh))
            .f64(1.0 / std::sqrt((double)hd))
            .unpaged();
        sc.run(2, B, 1, 256);
        sc.checkD(3, "pool scores " + tag, 0);
      }
    }
}

} // namespace
} // namespace glm::gputest
