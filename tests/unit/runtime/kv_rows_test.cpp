//===- kv_rows_test.cpp - the KV cache's bf16 and fp8 storage forms -------===//
//
// glmc compile --kv-dtype bf16 | fp8 (templates/kv_cache.cuh): the cache
// writers (kv_store, index_key_store, kpool_store) store the row their f32
// form computes, rounded; the readers (mla_core, mla_attn,
// indexer_scores_ctx) run their f32 arithmetic on the values read. Held
// here, on the twins:
//  - the encoders kv_cache.cuh gives the kernels equal runtime/base/
//    numeric.h's (which the twins use) on every rounding boundary;
//  - a writer's bf16 row is the f32 row rounded to nearest even, checked
//    against a rounding written independently (the nearer of the two bf16
//    neighbours, ties to the even one); its E4M3 row has scale amax / 448
//    and every value within half an E4M3 step (at its binade) of the f32
//    row's;
//  - a reader over a bf16/E4M3 cache gives the same bits as the f32 form
//    over that cache decoded independently (std::ldexp of the fields).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/templates/kv_cache.cuh"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/twins/twin.h"
#include "twin_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

namespace {

using glm::rt::twins::Arg;
using glm::rt::twins::Launch;

/// One twin launch: family, template args, grid (gx, gy), block, arguments
/// in ABI order.
/// A twin launch of a cache family at storage form `kv` ("f32" leaves the
/// template argument out, as the compiler does).
glm::twintest::Call Launch1(const char *family, const std::string &kv,
                            uint32_t gx, uint32_t gy, uint32_t block,
                            std::map<std::string, std::string> more = {}) {
  glm::twintest::Call c(family, gx, gy, 1, block);
  if (kv != "f32")
    c.targ("kv", kv);
  for (auto &[key, v] : more)
    c.targ(key, v);
  return c;
}
using glm::twintest::randn;


bool sameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return glm::rt::floatToBits(a) == glm::rt::floatToBits(b);
}

// ---- independent references of the two roundings and decodings.

/// The bf16 value nearest finite x (ties: the one whose last mantissa bit
/// is 0), found by comparing distances in fp64 to the two bf16 neighbours;
/// past the largest bf16 the upper neighbour is infinity, at 2^128 (IEEE
/// overflow).
float bf16Nearest(float x) {
  const uint32_t u = glm::rt::floatToBits(x);
  const float lo = glm::rt::bitsToFloat(u & 0xffff0000u);
  const float hi = glm::rt::bitsToFloat((u & 0xffff0000u) + 0x10000u);
  const double hv =
      std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), x) : (double)hi;
  const double dl = std::fabs((double)x - lo), dh = std::fabs(hv - x);
  if (dl != dh)
    return dl < dh ? lo : hi;
  return ((u >> 16) & 1u) ? hi : lo;
}
/// An E4M3 byte's value from its fields: (-1)^s 2^(e-7) (1 + m/8), or
/// 2^-6 m/8 for e = 0.
double e4m3Fields(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v =
      e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
/// Half the E4M3 step at |x| (|x| <= 448): 2^(floor(log2|x|) - 4), and
/// 2^-10 on the subnormal grid below 2^-6.
double e4m3HalfStep(double x) {
  const double a = std::fabs(x);
  if (a < std::ldexp(1.0, -6))
    return std::ldexp(1.0, -10);
  return std::ldexp(1.0, std::ilogb(a) - 4);
}

/// Row r (n values) of a stored cache, decoded from the bytes by the
/// references above.
std::vector<float> decodeRow(const std::vector<uint8_t> &cache,
                             const std::string &kv, int64_t r, int n) {
  std::vector<float> v(n);
  if (kv == "bf16") {
    const uint8_t *p = cache.data() + r * 2 * n;
    for (int i = 0; i < n; ++i)
      v[i] = glm::rt::bitsToFloat(uint32_t(p[2 * i] | p[2 * i + 1] << 8) << 16);
  } else {
    const uint8_t *p = cache.data() + r * (n + 4);
    float s;
    std::memcpy(&s, p + n, 4);
    for (int i = 0; i < n; ++i)
      v[i] = float(e4m3Fields(p[i])) * s;
  }
  return v;
}

/// A stored row against the f32 row it rounds: bf16 the nearest value,
/// E4M3 scale amax / 448 and each value within half an E4M3 step.
void expectRounded(const std::vector<uint8_t> &cache, const std::string &kv,
                   int64_t r, const float *want, int n,
                   const std::string &what) {
  if (kv == "bf16") {
    const std::vector<float> got = decodeRow(cache, kv, r, n);
    size_t bad = 0;
    for (int i = 0; i < n; ++i)
      bad += !sameBits(got[i], bf16Nearest(want[i]));
    EXPECT_EQ(bad, 0u) << what << ": values not the nearest bf16";
    return;
  }
  const uint8_t *p = cache.data() + r * (n + 4);
  float s, amax = 0.0f;
  std::memcpy(&s, p + n, 4);
  for (int i = 0; i < n; ++i)
    amax = std::max(amax, std::fabs(want[i]));
  EXPECT_EQ(s, amax > 0.0f ? amax / 448.0f : 1.0f) << what << ": scale";
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double x = (double)want[i] / s, q = e4m3Fields(p[i]);
    ASSERT_LE(std::fabs(x), 448.001) << what << " value " << i;
    const double err = std::fabs(q - x) / e4m3HalfStep(x);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1.0) << what << " value " << i << ": " << want[i]
                        << " stored as " << q * s;
  }
  std::printf("[ kv ] %s: worst error %.3f of half an E4M3 step\n",
              what.c_str(), worst);
}

} // namespace

TEST(KvRows, KernelEncodersEqualTheTwinsOnEveryRoundingBoundary) {
  // bf16: every bf16 value with the low halves at and around the tie.
  size_t bad = 0;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float x = glm::rt::bitsToFloat(hi << 16 | lo);
      bad += glm::kv::bf16Of(x) != glm::rt::floatToBf16(x);
      if (std::isfinite(x))
        bad += glm::kv::bf16Of(x) != glm::rt::floatToBf16(bf16Nearest(x));
    }
  EXPECT_EQ(bad, 0u) << "bf16";
  // E4M3: every E4M3 value and the midpoints and their fp32 neighbours
  // between it and the next, both signs, up to past the saturation.
  bad = 0;
  for (int b = 0; b < 127; ++b) {
    const double v = e4m3Fields(uint8_t(b)), next = e4m3Fields(uint8_t(b + 1));
    const float mid = float((v + (b == 126 ? 480.0 : next)) / 2);
    for (float x : {float(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e9f), std::nextafter(float(v), 1e9f)})
      for (float y : {x, -x})
        bad += glm::kv::e4m3Of(y) != glm::rt::floatToE4m3(y);
  }
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    const float x = glm::rt::bitsToFloat(any(rng));
    bad += glm::kv::e4m3Of(x) != glm::rt::floatToE4m3(x);
    bad += glm::kv::bf16Of(x) != glm::rt::floatToBf16(x);
  }
  EXPECT_EQ(bad, 0u) << "e4m3 / random";
  // Decoders: exact, as the fields say.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(glm::kv::e4m3Value(uint8_t(b))));
      continue;
    }
    EXPECT_EQ(glm::kv::e4m3Value(uint8_t(b)), e4m3Fields(uint8_t(b))) << b;
    EXPECT_EQ(glm::rt::e4m3ToFloat(uint8_t(b)), e4m3Fields(uint8_t(b))) << b;
  }
  // Row sizes: 4n, 2n, n + 4 (the E4M3 values and the row's fp32 scale).
  EXPECT_EQ(glm::kv::rowBytes(glm::kv::kF32, 576), 2304);
  EXPECT_EQ(glm::kv::rowBytes(glm::kv::kBf16, 576), 1152);
  EXPECT_EQ(glm::kv::rowBytes(glm::kv::kE4m3, 576), 580);
  EXPECT_EQ(glm::kv::rowBytes(glm::kv::kE4m3, 128), 132);
  // A row of zeros keeps scale 1 (its values are zeros).
  EXPECT_EQ(glm::kv::e4m3Scale(0.0f), 1.0f);
  EXPECT_EQ(glm::kv::e4m3Scale(448.0f), 1.0f);
}

TEST(KvRows, KernelNamesShowTheFormOnlyWhenItIsNotF32) {
  namespace cg = glm::codegen;
  cg::KernelSpec s{"kv_store", {{"threads", "256"}}, {"sm_121"}};
  EXPECT_EQ(cg::kernelName(s), "glm_kv_store_t256");
  s.args["kv"] = "f32";
  EXPECT_EQ(cg::kernelName(s), "glm_kv_store_t256");
  s.args["kv"] = "bf16";
  EXPECT_EQ(cg::kernelName(s), "glm_kv_store_kvbf16_t256");
  s = {"indexer_scores_ctx",
       {{"pool", "4"}, {"kv", "e4m3"}, {"threads", "256"}},
       {"sm_121"}};
  EXPECT_EQ(cg::kernelName(s), "glm_indexer_scores_ctx_p4_kve4m3_t256");
  EXPECT_NE(cg::generateSource(s).find("glm::indexerScoresCtx<4, 2, 256>"),
            std::string::npos);
  s.args["kv"] = "fp8"; // the CLI's name, not the template's
  EXPECT_THROW(cg::kernelName(s), glm::rt::Error);
}

/// The writers: the f32 launch, then the same launch at bf16 and e4m3 into
/// caches of their row size; each stored row against the f32 row.
TEST(KvRows, WritersStoreTheF32RowRounded) {
  std::mt19937 rng(21);
  const int B = 3, maxCtx = 6, slots = 3;
  const std::vector<int> seq = {2, 0, 1}, pos = {0, 5, 3};
  // kv_store: latent 512 + 64 (GLM-5.3) and 96 + 0 (Flash's NoPE form).
  for (auto [kvr, dr] : {std::pair{512, 64}, std::pair{96, 0}}) {
    const int lat = kvr + dr;
    const std::vector<float> kva = randn(rng, (size_t)B * lat, 2.0f),
                             w = randn(rng, kvr);
    std::vector<float> f32((size_t)slots * maxCtx * lat, 0.0f);
    Launch1("kv_store", "f32", 1, B, 256)
        .p(kva.data())
        .p(w.data())
        .p(f32.data())
        .p(seq.data())
        .p(pos.data())
        .i(kvr)
        .i(dr)
        .i(maxCtx)
        .f(1e-6)
        .f(8e6)
        .unpaged()
        .run();
    for (const std::string kv : {"bf16", "e4m3"}) {
      std::vector<uint8_t> c(
          (size_t)slots * maxCtx *
          glm::kv::rowBytes(kv == "bf16" ? glm::kv::kBf16 : glm::kv::kE4m3,
                            lat));
      Launch1("kv_store", kv, 1, B, 256)
          .p(kva.data())
          .p(w.data())
          .p(c.data())
          .p(seq.data())
          .p(pos.data())
          .i(kvr)
          .i(dr)
          .i(maxCtx)
          .f(1e-6)
          .f(8e6)
          .unpaged()
          .run();
      for (int b = 0; b < B; ++b) {
        const int64_t r = (int64_t)seq[b] * maxCtx + pos[b];
        expectRounded(c, kv, r, f32.data() + r * lat, lat,
                      "kv_store " + kv + " lat " + std::to_string(lat) +
                          " row " + std::to_string(b));
      }
    }
  }
  // index_key_store: hd 128, RoPE on 64.
  {
    const int hd = 128, dr = 64;
    const std::vector<float> k = randn(rng, (size_t)B * hd, 3.0f),
                             w = randn(rng, hd), bias = randn(rng, hd);
    std::vector<float> f32((size_t)slots * maxCtx * hd, 0.0f);
    Launch1("index_key_store", "f32", 1, B, 256)
        .p(k.data())
        .p(w.data())
        .p(bias.data())
        .p(f32.data())
        .p(seq.data())
        .p(pos.data())
        .i(hd)
        .i(dr)
        .i(maxCtx)
        .f(8e6)
        .unpaged()
        .run();
    for (const std::string kv : {"bf16", "e4m3"}) {
      std::vector<uint8_t> c((size_t)slots * maxCtx *
                             (kv == "bf16" ? 2 * hd : hd + 4));
      Launch1("index_key_store", kv, 1, B, 256)
          .p(k.data())
          .p(w.data())
          .p(bias.data())
          .p(c.data())
          .p(seq.data())
          .p(pos.data())
          .i(hd)
          .i(dr)
          .i(maxCtx)
          .f(8e6)
          .unpaged()
          .run();
      for (int b = 0; b < B; ++b) {
        const int64_t r = (int64_t)seq[b] * maxCtx + pos[b];
        expectRounded(c, kv, r, f32.data() + r * hd, hd,
                      "index_key_store " + kv + " row " + std::to_string(b));
      }
    }
  }
  // kpool_store (Flash): pools of 4 over 8 tokens; the ring stays fp32.
  {
    const int hd = 128, P = 4, ctx = 8, gs = hd;
    const std::vector<float> w = randn(rng, hd), bias = randn(rng, hd),
                             ape = randn(rng, (size_t)P * hd);
    std::vector<float> ringF((size_t)slots * 2 * P * hd),
        f32((size_t)slots * (ctx / P) * hd);
    std::map<std::string, std::vector<float>> ring;
    std::map<std::string, std::vector<uint8_t>> pools;
    for (const std::string kv : {"bf16", "e4m3"}) {
      ring[kv].assign(ringF.size(), 0.0f);
      pools[kv].assign(
          (size_t)slots * (ctx / P) * (kv == "bf16" ? 2 * hd : hd + 4), 0);
    }
    const int s1[1] = {1};
    for (int t = 0; t < ctx; ++t) {
      const std::vector<float> k = randn(rng, hd), g = randn(rng, gs);
      const int p1[1] = {t};
      Launch1("kpool_store", "f32", 1, 1, 128)
          .p(k.data())
          .p(w.data())
          .p(bias.data())
          .p(g.data())
          .i(gs)
          .p(ape.data())
          .i(0)
          .p(ringF.data())
          .p(f32.data())
          .p(s1)
          .p(p1)
          .i(hd)
          .i(P)
          .i(ctx)
          .run();
      for (const std::string kv : {"bf16", "e4m3"})
        Launch1("kpool_store", kv, 1, 1, 128)
            .p(k.data())
            .p(w.data())
            .p(bias.data())
            .p(g.data())
            .i(gs)
            .p(ape.data())
            .i(0)
            .p(ring[kv].data())
            .p(pools[kv].data())
            .p(s1)
            .p(p1)
            .i(hd)
            .i(P)
            .i(ctx)
            .run();
    }
    for (const std::string kv : {"bf16", "e4m3"})
      for (int p = 0; p < ctx / P; ++p) {
        const int64_t r = 1 * (ctx / P) + p;
        expectRounded(pools[kv], kv, r, f32.data() + r * hd, hd,
                      "kpool_store " + kv + " pool " + std::to_string(p));
      }
  }
}

/// The readers over a bf16 / E4M3 cache give the bits of their f32 form
/// over the same cache decoded.
TEST(KvRows, ReadersComputeOnTheValuesRead) {
  std::mt19937 rng(22);
  const int H = 4, dn = 32, dr = 16, dv = 32, kvr = 64, lat = kvr + dr;
  const int B = 2, maxCtx = 40, slots = 2;
  const std::vector<int> heads = {0, 2, 3}, seq = {1, 0}, nsel = {7, 33};
  std::vector<int> sel((size_t)B * maxCtx, 0);
  for (int b = 0; b < B; ++b) {
    std::vector<int> all(maxCtx);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * maxCtx);
  }
  const std::vector<float> q = randn(rng, (size_t)B * H * (dn + dr)),
                           qabs = randn(rng, (size_t)B * H * kvr, 0.2f),
                           rows = randn(rng, (size_t)slots * maxCtx * lat);
  const double scale = 1.0 / std::sqrt(double(dn + dr));
  for (const std::string kv : {"bf16", "e4m3"}) {
    const int form = kv == "bf16" ? glm::kv::kBf16 : glm::kv::kE4m3;
    // The cache as kv_store would leave it: each row rounded (numeric.h).
    std::vector<uint8_t> c((size_t)slots * maxCtx *
                           glm::kv::rowBytes(form, lat));
    std::vector<float> dec((size_t)slots * maxCtx * lat);
    for (int64_t r = 0; r < slots * maxCtx; ++r) {
      const float *x = rows.data() + r * lat;
      uint8_t *p = c.data() + r * glm::kv::rowBytes(form, lat);
      if (form == glm::kv::kBf16) {
        for (int i = 0; i < lat; ++i) {
          const uint16_t h = glm::rt::floatToBf16(x[i]);
          std::memcpy(p + 2 * i, &h, 2);
        }
      } else {
        float amax = 0;
        for (int i = 0; i < lat; ++i)
          amax = std::max(amax, std::fabs(x[i]));
        const float s = amax / 448.0f;
        for (int i = 0; i < lat; ++i)
          p[i] = glm::rt::floatToE4m3(x[i] / s);
        std::memcpy(p + lat, &s, 4);
      }
      const std::vector<float> d = decodeRow(c, kv, r, lat);
      std::copy(d.begin(), d.end(), dec.begin() + r * lat);
    }
    // mla_core and mla_attn.
    std::map<std::string, std::vector<float>> ctx, p;
    std::map<std::string, std::vector<double>> pd;
    std::map<std::string, std::vector<float>> ov;
    const std::vector<float> kvBT =
        randn(rng, (size_t)kvr * H * (dn + dv), 0.1f);
    for (const std::string form2 : {"f32", kv.c_str()}) {
      const void *cache = form2 == "f32" ? (const void *)dec.data() : c.data();
      ctx[form2].assign((size_t)B * H * kvr, 0.0f);
      p[form2].assign((size_t)B * H * maxCtx, 0.0f);
      Launch1("mla_core", form2, (uint32_t)heads.size(), B, 256)
          .p(q.data())
          .p(qabs.data())
          .p(cache)
          .p(seq.data())
          .p(sel.data())
          .p(nsel.data())
          .p(p[form2].data())
          .i(maxCtx)
          .p(ctx[form2].data())
          .p(heads.data())
          .i(H)
          .i(dn)
          .i(dr)
          .i(kvr)
          .f(scale)
          .unpaged()
          .run();
      pd[form2].assign((size_t)B * H * maxCtx, 0.0);
      ov[form2].assign((size_t)B * H * dv, 0.0f);
      Launch1("mla_attn", form2, (uint32_t)heads.size(), B, 256)
          .p(q.data())
          .p(kvBT.data())
          .p(cache)
          .p(seq.data())
          .p(sel.data())
          .p(nsel.data())
          .p(pd[form2].data())
          .i(maxCtx)
          .p(ov[form2].data())
          .p(heads.data())
          .i(H)
          .i(dn)
          .i(dr)
          .i(dv)
          .i(kvr)
          .f(scale)
          .run();
    }
    size_t bad = 0;
    for (size_t i = 0; i < ctx["f32"].size(); ++i)
      bad += !sameBits(ctx["f32"][i], ctx[kv][i]);
    for (size_t i = 0; i < ov["f32"].size(); ++i)
      bad += !sameBits(ov["f32"][i], ov[kv][i]);
    EXPECT_EQ(bad, 0u) << "mla_core / mla_attn over " << kv;
    // indexer_scores_ctx over keys of hd = lat values, pool 1 and 4.
    for (int pool : {1, 4}) {
      const int nh = 3, hd = lat, pc = maxCtx / pool;
      const std::vector<float> qi = randn(rng, (size_t)B * nh * hd),
                               wts = randn(rng, (size_t)B * nh);
      const std::vector<int> pos = {maxCtx - 1, 17};
      std::map<std::string, std::vector<double>> score;
      for (const std::string form2 : {"f32", kv.c_str()}) {
        const void *keys = form2 == "f32" ? (const void *)dec.data() : c.data();
        score[form2].assign((size_t)B * pc, 0.0);
        Launch1("indexer_scores_ctx", form2, 4, B, 128,
                {{"pool", std::to_string(pool)}})
            .p(qi.data())
            .p(keys)
            .p(wts.data())
            .p(score[form2].data())
            .p(seq.data())
            .p(pos.data())
            .i(nh)
            .i(hd)
            .i(maxCtx)
            .f(1 / std::sqrt(3.0))
            .f(1 / std::sqrt(double(hd)))
            .unpaged()
            .run();
      }
      EXPECT_EQ(std::memcmp(score["f32"].data(), score[kv].data(),
                            score[kv].size() * 8),
                0)
          << "indexer_scores_ctx pool " << pool << " over " << kv;
    }
  }
}
