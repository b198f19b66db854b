//===- executor_helpers_gpu_test.cpp - helper families against their twins ===//
//
// Every helper kernel family of the CUDA executor (codegen/templates/
// embed_tokens.cuh .. fill_f32.cuh, built as a plan builds them, with
// --fmad=false) launched with the executor's grids and blocks, against its
// C++ twin (runtime/twins/) run on the same inputs with the same launch.
// Tolerances per case: exact where the kernel's arithmetic is the twin's
// (decoders, norms, fp64 dots, fp32 MLA sums in their fixed orders, data
// movement); a stated relative tolerance where the kernel calls an fp64
// libm function (exp, pow, sin, cos), whose CUDA and host versions may
// differ in the last bit of a double, or exp2f (MXFP8 scales). Beside the
// twins: rms_norm_rows on G blocks gives the bits of one block, and
// mla_core run twice gives the same bits.
//
//===----------------------------------------------------------------------===//
#include "gpu_dual.h"
#include "gpu_test_util.h"

#include "runtime/twins/twin.h"

#include "codegen/dense_trellis_abi.h"
#include "codegen/templates/fixed_point.cuh"
#include "codegen/templates/kv_cache.cuh"
#include "codegen/templates/mla_split_layout.cuh"

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace glm::gputest {
namespace {

namespace twins = glm::rt::twins;

class ExecutorHelpersGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};


unsigned blocksFor(int64_t n, int64_t per = 256) {
  return (unsigned)std::max<int64_t>(1, (n + per - 1) / per);
}

TEST_F(ExecutorHelpersGpu, EmbedTokensDecodesEveryValueBitForBit) {
  std::vector<uint8_t> e8(256);
  std::iota(e8.begin(), e8.end(), 0);
  std::vector<uint16_t> f16(65536);
  std::iota(f16.begin(), f16.end(), 0);
  for (int dt : {3, 1}) {
    const int d = dt == 3 ? 256 : 65536;
    Dual r("embed_tokens", 256);
    if (dt == 3)
      r.buf(e8);
    else
      r.buf(f16);
    r.i32(dt).null().buf(std::vector<int>{0}).out<float>(d).i32(d);
    r.run(blocksFor(d), 1, 1, 256);
    r.check(4, std::string("every ") + (dt == 3 ? "e4m3" : "f16") + " value",
            0);
  }
  // bf16 rows with per-row scales (as an fp8-row table reads), B = 3.
  std::mt19937 rng(1);
  const int d = 1000, V = 7, B = 3;
  std::vector<float> rs(V);
  for (auto &s : rs)
    s = std::ldexp(1.0f, (int)(rng() % 5) - 2);
  Dual r("embed_tokens", 256);
  r.buf(storeAs(2, randn(rng, (size_t)V * d, 1.0f, 2)))
      .i32(2)
      .buf(rs)
      .buf(std::vector<int>{4, 0, 6})
      .out<float>((size_t)B * d)
      .i32(d);
  r.run(blocksFor(d), B, 1, 256);
  r.check(4, "bf16 rows, row scales", 0);
}

TEST_F(ExecutorHelpersGpu, RmsNormRowsEqualsTwinOnGBlocks) {
  std::mt19937 rng(11);
  for (int n : {6144, 2048, 100, 12000}) {
    const int B = 3, xs = n + 8, ys = n;
    const std::vector<float> x = randn(rng, (size_t)B * xs, 2.0f);
    const std::vector<float> w = randn(rng, n, 1.0f);
    const int K = (n + 1023) / 1024;
    const unsigned G = K > 8 ? 1u : (unsigned)K; // as the executor
    const std::string tag = "n=" + std::to_string(n);
    Dual many("rms_norm_rows", 1024), one("rms_norm_rows", 1024);
    for (Dual *r : {&many, &one})
      r->buf(x)
          .buf(w)
          .out<float>((size_t)B * ys)
          .i32(n)
          .f64(1e-5)
          .i32(xs)
          .i32(ys);
    many.run(G, B, 1, 1024);
    one.run(1, B, 1, 1024);
    many.check(2, tag + " " + std::to_string(G) + " blocks vs twin", 0);
    const std::vector<float> a = many.gpu<float>(2), b = one.gpu<float>(2);
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i)
      differ += !sameBits(a[i], b[i]);
    reportExact("rms_norm_rows " + tag + " G blocks == 1 block", differ,
                a.size());
    // In place (the executor's G = 1 when y aliases x, ys = xs).
    Dual in("rms_norm_rows", 1024);
    const int xb = in.hold(x);
    in.arg(xb).buf(w).arg(xb).i32(n).f64(1e-5).i32(xs).i32(xs);
    in.run(1, B, 1, 1024);
    in.check(0, tag + " in place vs twin", 0);
  }
}

TEST_F(ExecutorHelpersGpu, AddRmsNormEqualsTwin) {
  std::mt19937 rng(12);
  for (int n : {6144, 2048, 100, 12000}) {
    const int B = 3;
    const unsigned G = (unsigned)((n + 1023) / 1024); // as the executor
    Dual r("add_rms_norm", 1024);
    r.buf(randn(rng, (size_t)B * n, 2.0f))
        .buf(randn(rng, (size_t)B * n, 0.5f))
        .out<float>((size_t)B * n)
        .buf(randn(rng, n))
        .out<float>((size_t)B * n)
        .i32(n)
        .f64(1e-5);
    r.run(G, B, 1, 1024);
    const std::string tag =
        "n=" + std::to_string(n) + " (" + std::to_string(G) + " blocks)";
    r.check(2, tag + " xout", 0);
    r.check(4, tag + " y", 0);
  }
}

TEST_F(ExecutorHelpersGpu, RopeAndStoresMatchTwins) {
  std::mt19937 rng(13);
  const int H = 4, dn = 128, dr = 64, B = 3, row = H * (dn + dr);
  const std::vector<int> pos = {0, 17, 8191}, seq = {2, 0, 1};
  const unsigned rb = std::max(32, dr / 2);
  {
    // The executor's q rope: x = q + dn, vectors of stride dn + dr; the
    // q_nope parts between them must stay as they are.
    Dual r("rope_rows", (rb + 31) / 32 * 32);
    const int qb = r.hold(randn(rng, (size_t)B * row));
    r.arg(qb, (size_t)dn * 4)
        .i32(dr)
        .i32(dn + dr)
        .i32(row)
        .buf(pos)
        .f64(10000.0);
    r.run(H, B, 1, rb);
    r.check(0, "q rope", 1e-6, "fp64 pow/sin/cos");
  }
  const int kvr = 512, lat = kvr + dr, maxCtx = 8200;
  {
    Dual r("kv_store", 256);
    r.buf(randn(rng, (size_t)B * lat))
        .buf(randn(rng, kvr))
        .out<float>((size_t)3 * maxCtx * lat)
        .buf(seq)
        .buf(pos)
        .i32(kvr)
        .i32(dr)
        .i32(maxCtx)
        .f64(1e-6)
        .f64(10000.0)
        .unpaged();
    r.run(1, B, 1, 256);
    r.check(2, "latent rows", 1e-6, "fp64 pow/sin/cos of the rope part");
  }
  {
    const int hd = 128;
    Dual r("index_key_store", 256);
    r.buf(randn(rng, (size_t)B * hd, 3.0f))
        .buf(randn(rng, hd))
        .buf(randn(rng, hd))
        .out<float>((size_t)3 * maxCtx * hd)
        .buf(seq)
        .buf(pos)
        .i32(hd)
        .i32(dr)
        .i32(maxCtx)
        .f64(10000.0)
        .unpaged();
    r.run(1, B, 1, 256);
    r.check(3, "index keys", 1e-6, "fp64 pow/sin/cos of the rope part");
  }
}

TEST_F(ExecutorHelpersGpu, DsaFamiliesMatchTwinsExactly) {
  std::mt19937 rng(14);
  const int nh = 32, hd = 128, maxCtx = 3000, B = 2, topk = 2048;
  const std::vector<int> seq = {1, 0}, pos = {2999, 700};
  Dual s("indexer_scores_ctx", 256);
  s.buf(randn(rng, (size_t)B * nh * hd))
      .buf(randn(rng, (size_t)B * maxCtx * hd))
      .buf(randn(rng, (size_t)B * nh))
      .out<double>((size_t)B * maxCtx)
      .buf(seq)
      .buf(pos)
      .i32(nh)
      .i32(hd)
      .i32(maxCtx)
      .f64(1.0 / std::sqrt((double)nh))
      .f64(1.0 / std::sqrt((double)hd))
      .unpaged();
  s.run(64, B, 1, 256);
  s.checkD(3, "scores", 0);
  // Selection on the twin's scores with ties (rounded values).
  std::vector<double> score = s.host<double>(3);
  for (size_t i = 0; i < score.size(); i += 2)
    if (!std::isnan(score[i]))
      score[i] = std::round(score[i] * 4.0) / 4.0;
  for (double &v : score)
    if (std::isnan(v))
      v = 0.0;
  Dual sel("dsa_select", 1024);
  sel.buf(score)
      .buf(pos)
      .i32(topk)
      .out<int>((size_t)B * maxCtx)
      .out<int>((size_t)B * maxCtx)
      .out<int>(B)
      .i32(maxCtx);
  sel.run(1, B, 1, 1024);
  sel.checkInts(4, "selected positions (3000 and 701 keys, top 2048)");
  sel.checkInts(5, "counts");
  Dual io("dsa_iota", 256);
  io.out<int>((size_t)B * maxCtx).out<int>(B).buf(pos).i32(maxCtx);
  io.run(4, B, 1, 256);
  io.checkInts(0, "positions");
  io.checkInts(1, "counts");
}

/// dsa_select's radix select at long contexts: 20000 and 12345 candidates
/// of few distinct values (runs of ties, -0 and +0), 700 tokens, pools of 4
/// with a tail, and k 0; positions and counts the twin's exactly.
TEST_F(ExecutorHelpersGpu, DsaSelectAtLongContextsMatchesTwin) {
  std::mt19937 rng(21);
  const int maxCtx = 20480, B = 4, topk = 2048;
  const std::vector<int> pos = {19999, 12344, 699, 20479};
  std::uniform_int_distribution<int> v(-40, 40);
  std::vector<double> score((size_t)B * maxCtx);
  for (double &x : score) {
    const int q = v(rng);
    x = q == 0 ? (rng() & 1 ? -0.0 : 0.0) : q * 0.125;
  }
  for (int pool : {1, 4})
    for (int k : {topk, 0}) {
      if (pool == 4 && k == 0)
        continue;
      Dual sel("dsa_select", 1024, {{"pool", std::to_string(pool)}});
      sel.buf(score)
          .buf(pos)
          .i32(k / pool)
          .out<int>((size_t)B * maxCtx)
          .out<int>((size_t)B * maxCtx)
          .out<int>(B)
          .i32(maxCtx);
      sel.run(1, B, 1, 1024);
      const std::string what = "pool " + std::to_string(pool) + " k " +
                               std::to_string(k);
      sel.checkInts(4, what + ": selected positions");
      sel.checkInts(5, what + ": counts");
    }
}

/// kv_b [R, kvr] stored as dt (0 f32, 1 f16, 2 bf16, 3 e4m3) with scales sk
/// (1 block-128 f32, 2 row f32, 3 MXFP8 e8m0 bytes).
struct KvB {
  std::vector<uint8_t> bytes, scale;
};
KvB makeKvB(std::mt19937 &rng, int R, int kvr, int dt, int sk) {
  KvB k;
  const std::vector<float> v = randn(rng, (size_t)R * kvr, 0.05f);
  if (dt != 3) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      r[i] = roundTo(dt, v[i]);
    k.bytes = storeAs(dt, r);
    return k;
  }
  k.bytes.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    k.bytes[i] = glm::rt::floatToE4m3(v[i] * 64.0f);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  if (sk == 3) {
    k.scale.resize((size_t)R * (kvr / 32));
    for (auto &e : k.scale)
      e = (uint8_t)(119 + rng() % 4);
    return k;
  }
  const size_t n =
      sk == 1 ? (size_t)((R + 127) / 128) * ((kvr + 127) / 128) : (size_t)R;
  std::vector<float> s(n);
  for (auto &x : s)
    x = u(rng) / 64.0f;
  k.scale.resize(n * 4);
  std::memcpy(k.scale.data(), s.data(), n * 4);
  return k;
}

TEST_F(ExecutorHelpersGpu, AbsorbedMlaMatchesTwins) {
  const int H = 4, dn = 192, dr = 64, dv = 256, B = 2, maxCtx = 1600;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  std::mt19937 rng(5);
  const std::vector<int> heads = {0, 1, 3}; // a rank's heads
  const int nh = (int)heads.size();
  const std::vector<int> seq = {1, 0}, nsel = {65, 1500};
  // kvr 512: the chunked paths; 484 (not whole 32-column groups, a
  // multiple of 4 as mla_core needs): the scalar paths.
  for (int kvr : {512, 484}) {
    const int lat = kvr + dr, R = H * (dn + dv);
    const std::vector<float> q = randn(rng, (size_t)B * H * (dn + dr));
    const std::vector<float> cache = randn(rng, (size_t)B * maxCtx * lat);
    std::vector<int> sel((size_t)B * maxCtx, 0);
    for (int b = 0; b < B; ++b) {
      std::vector<int> all(maxCtx);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + nsel[b]);
      std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * maxCtx);
    }
    const int forms[][2] = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {3, 2}, {3, 3}};
    for (auto &f : forms) {
      const int dt = f[0], sk = f[1];
      if (sk == 3 && kvr % 32)
        continue;
      const std::string tag = "kvr" + std::to_string(kvr) + " dt" +
                              std::to_string(dt) + " sk" + std::to_string(sk);
      // exp2f of an integer (MXFP8 scales) is exact on the device; stated
      // as a tolerance in case a math library is not.
      const double tol = sk == 3 ? 1e-6 : 0;
      const KvB kv = makeKvB(rng, R, kvr, dt, sk);
      for (unsigned threads : {64u, 256u}) { // GLM_MLA_QABS_THREADS range
        Dual r("mla_qabs", threads);
        r.buf(q).buf(kv.bytes).i32(dt);
        if (kv.scale.empty())
          r.null();
        else
          r.buf(kv.scale);
        r.i32(sk)
            .buf(heads)
            .out<float>((size_t)B * H * kvr)
            .i32(H)
            .i32(dn)
            .i32(dr)
            .i32(dv)
            .i32(kvr);
        r.run(nh * ((kvr + 31) / 32), B, 1, threads);
        r.check(6, tag + " t" + std::to_string(threads), tol, "exp2f");
      }
      if (dt == 0) { // core does not read kv_b: once per kvr
        const std::vector<float> qabs = randn(rng, (size_t)B * H * kvr, 0.1f);
        const unsigned smem = (unsigned)(kvr + dr + 2 * 1024 + 4 * 1024) * 4;
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
          Dual r("mla_core", 1024);
          r.buf(q)
              .buf(qabs)
              .buf(cache)
              .buf(seq)
              .buf(sel)
              .buf(nsel)
              .out<float>((size_t)B * H * maxCtx)
              .i32(maxCtx)
              .out<float>((size_t)B * H * kvr)
              .buf(heads)
              .i32(H)
              .i32(dn)
              .i32(dr)
              .i32(kvr)
              .f64(scale)
              .unpaged();
          r.run(nh, B, 1, 1024, smem);
          if (run == 0) {
            r.check(8, "kvr" + std::to_string(kvr) + " ctx (65, 1500 rows)",
                    1e-6, "fp64 exp");
            first = r.gpu<float>(8);
          } else {
            const std::vector<float> again = r.gpu<float>(8);
            size_t differ = 0;
            for (size_t i = 0; i < again.size(); ++i)
              differ += !sameBits(again[i], first[i]);
            reportExact("mla_core run twice: same bits", differ, again.size());
          }
        }
        // The one-launch fp64 kernel (kv_b transposed, fp32).
        std::vector<float> w(kv.bytes.size() / 4), wt(w.size());
        std::memcpy(w.data(), kv.bytes.data(), kv.bytes.size());
        for (int o = 0; o < R; ++o)
          for (int c = 0; c < kvr; ++c)
            wt[(size_t)c * R + o] = w[(size_t)o * kvr + c];
        Dual a("mla_attn", 256);
        a.buf(q)
            .buf(wt)
            .buf(cache)
            .buf(seq)
            .buf(sel)
            .buf(nsel)
            .out<double>((size_t)B * H * maxCtx)
            .i32(maxCtx)
            .buf(std::vector<float>((size_t)B * H * dv, 0.0f))
            .buf(heads)
            .i32(H)
            .i32(dn)
            .i32(dr)
            .i32(dv)
            .i32(kvr)
            .f64(scale);
        a.run(nh, B, 1, 256, (unsigned)(2 * kvr * sizeof(double)));
        a.check(8, "kvr" + std::to_string(kvr) + " ov", 1e-6, "fp64 exp");
      }
      Dual o("mla_out", 256);
      o.buf(kv.bytes).i32(dt);
      if (kv.scale.empty())
        o.null();
      else
        o.buf(kv.scale);
      o.i32(sk)
          .buf(randn(rng, (size_t)B * H * kvr))
          .buf(heads)
          .buf(std::vector<float>((size_t)B * H * dv, 0.0f))
          .i32(H)
          .i32(dn)
          .i32(dv)
          .i32(kvr);
      o.run(nh * ((dv + 31) / 32), B, 1, 256); // 8 warps x 4 rows
      o.check(6, tag, tol, "exp2f");
    }
  }
}

/// The KV cache's storage forms (--kv-dtype bf16 | fp8, kv_cache.cuh).
int kvFormOf(const std::string &kv) {
  return kv == "bf16" ? glm::kv::kBf16 : glm::kv::kE4m3;
}
/// Rows of n values stored in form kv as the writers store them (numeric.h,
/// the twins' conversions): bf16 rounded to nearest even, or E4M3 with the
/// row's scale amax / 448 after its values.
std::vector<uint8_t> encodeRows(const std::string &kv,
                                const std::vector<float> &v, int n) {
  const int form = kvFormOf(kv);
  const size_t rows = v.size() / n, rb = glm::kv::rowBytes(form, n);
  std::vector<uint8_t> out(rows * rb);
  for (size_t r = 0; r < rows; ++r) {
    const float *x = v.data() + r * n;
    uint8_t *p = out.data() + r * rb;
    if (form == glm::kv::kBf16) {
      for (int i = 0; i < n; ++i) {
        const uint16_t h = glm::rt::floatToBf16(x[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      continue;
    }
    float amax = 0.0f;
    for (int i = 0; i < n; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    const float sc = glm::kv::e4m3Scale(amax);
    for (int i = 0; i < n; ++i)
      p[i] = glm::rt::floatToE4m3(x[i] / sc);
    std::memcpy(p + n, &sc, 4);
  }
  return out;
}
/// Row r of a stored cache, widened as the readers widen it.
std::vector<float> decodeRow(const std::string &kv,
                             const std::vector<uint8_t> &c, size_t r, int n) {
  const int form = kvFormOf(kv);
  const uint8_t *p = c.data() + r * glm::kv::rowBytes(form, n);
  std::vector<float> v(n);
  float sc = 1.0f;
  if (form == glm::kv::kE4m3)
    std::memcpy(&sc, p + n, 4);
  for (int i = 0; i < n; ++i) {
    if (form == glm::kv::kBf16) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[i] = glm::rt::bf16ToFloat(h);
    } else {
      v[i] = glm::rt::e4m3ToFloat(p[i]) * sc;
    }
  }
  return v;
}

/// The split decode attention (mla_split_layout.cuh) at GLM-5.3's shape
/// (kvr 512, rope 64) over the three cache forms: mla_scores' scores and
/// mla_values' ctx the twins' bits, mla_softmax's weights and inverses
/// within 1e-6 (fp64 exp). Each launch takes the twin's output of the one
/// before, so each kernel is checked alone. Heads: all 64, a rank's 8 and
/// 20 (a partial block of 16 and of 8); rows selecting 1, 65 and 2048
/// keys (a partial block of 16 rows; two weight tiles). Then the three on
/// the GPU against mla_core on the GPU: the same bits up to fp64 exp's last
/// bit (the twins' test holds the orders equal).
TEST_F(ExecutorHelpersGpu, SplitMlaDecodeMatchesTwinsAndMlaCore) {
  namespace ms = glm::mla_split;
  std::mt19937 rng(27);
  const int H = 64, dn = 192, dr = 64, kvr = 512, lat = kvr + dr, ctx = 2100;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  const std::vector<int> nsel = {1, 65, 2048}, seq = {2, 0, 1};
  const int B = (int)nsel.size(), maxSel = 2048;
  std::vector<int> sel((size_t)B * ctx, 0);
  for (int b = 0; b < B; ++b) {
    std::vector<int> all(ctx);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * ctx);
  }
  const std::vector<float> q = randn(rng, (size_t)B * H * (dn + dr)),
                           qabs = randn(rng, (size_t)B * H * kvr, 0.1f),
                           rows = randn(rng, (size_t)3 * ctx * lat);
  std::vector<int> all64(64), rank8(8), twenty(20);
  std::iota(all64.begin(), all64.end(), 0);
  std::iota(rank8.begin(), rank8.end(), 8);
  std::iota(twenty.begin(), twenty.end(), 40);
  for (const std::string kv : {"f32", "bf16", "e4m3"}) {
    const std::vector<uint8_t> cache =
        kv == "f32" ? std::vector<uint8_t>((const uint8_t *)rows.data(),
                                           (const uint8_t *)rows.data() +
                                               rows.size() * 4)
                    : encodeRows(kv, rows, lat);
    for (const std::vector<int> *hp : {&all64, &rank8, &twenty}) {
      const std::vector<int> &heads = *hp;
      const int nh = (int)heads.size();
      const std::string tag = kv + " " + std::to_string(nh) + " heads";
      std::map<std::string, std::string> ta;
      if (kv != "f32")
        ta["kv"] = kv;
      Dual sc("mla_scores", 256, ta);
      sc.buf(q)
          .buf(qabs)
          .buf(cache)
          .buf(seq)
          .buf(sel)
          .buf(nsel)
          .buf(std::vector<float>((size_t)B * H * ctx, 0.0f))
          .i32(ctx)
          .buf(heads)
          .i32(nh)
          .i32(H)
          .i32(dn)
          .i32(dr)
          .i32(kvr)
          .f64(scale)
          .unpaged();
      sc.run((unsigned)ms::scoreGridX(nh, maxSel), B, 1, 256,
             (unsigned)ms::scoreSmem(kvr, dr));
      sc.check(6, tag + " mla_scores", 0);
      Dual sm("mla_softmax", 1024);
      sm.buf(sc.host<float>(6))
          .buf(nsel)
          .i32(ctx)
          .buf(heads)
          .i32(H)
          .out<float>((size_t)B * H);
      sm.run(nh, B, 1, 1024);
      sm.check(0, tag + " mla_softmax weights", 1e-6, "fp64 exp");
      sm.check(5, tag + " mla_softmax inverses", 1e-6, "fp64 exp");
      // mla_values over these weights and inverses: its ctx on the GPU,
      // checked against the twin's bits.
      auto values = [&](const std::vector<float> &w,
                        const std::vector<float> &iv) {
        Dual va("mla_values", 256, ta);
        va.buf(cache)
            .buf(seq)
            .buf(sel)
            .buf(nsel)
            .buf(w)
            .buf(iv)
            .i32(ctx)
            .out<float>((size_t)B * H * kvr)
            .buf(heads)
            .i32(nh)
            .i32(H)
            .i32(dr)
            .i32(kvr)
            .unpaged();
        va.run((unsigned)ms::valueGridX(nh, kvr), B, 1, 256);
        va.check(7, tag + " mla_values ctx", 0);
        return va.gpu<float>(7);
      };
      values(sm.host<float>(0), sm.host<float>(5));
      if (nh != 64)
        continue;
      // mla_core on the GPU over the same rows, against the split's GPU
      // weights' ctx (mla_values over mla_softmax's GPU weights).
      Dual core("mla_core", 1024, ta);
      core.buf(q)
          .buf(qabs)
          .buf(cache)
          .buf(seq)
          .buf(sel)
          .buf(nsel)
          .out<float>((size_t)B * H * ctx)
          .i32(ctx)
          .out<float>((size_t)B * H * kvr)
          .buf(heads)
          .i32(H)
          .i32(dn)
          .i32(dr)
          .i32(kvr)
          .f64(scale)
          .unpaged();
      core.run(nh, B, 1, 1024, (unsigned)(kvr + dr + 2 * 1024 + 4 * 1024) * 4);
      const std::vector<float> a = values(sm.gpu<float>(0), sm.gpu<float>(5)),
                               c = core.gpu<float>(8);
      Err e;
      size_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        e.add(a[i], c[i]);
        differ += !sameBits(a[i], c[i]);
      }
      std::printf("[gpu-case] %s: split ctx vs mla_core ctx on the GPU: %zu "
                  "of %zu values differ\n",
                  tag.c_str(), differ, a.size());
      report(tag + " split vs mla_core (GPU)", e, 1e-6, "fp64 exp");
    }
  }
}

/// The cache writers at bf16 and e4m3: the same bytes as the twins where the
/// fp32 row is the same bits (no RoPE part: Flash's NoPE latent, or dr = 0
/// keys); with a RoPE part (fp64 pow/sin/cos, last bit of the fp32 row) a
/// value may round to the neighbouring stored value: within one step of the
/// form at the row's largest magnitude (bf16 2^-7, E4M3 2^-3 relative), and
/// the rows at position 0 (angle 0: exact) the same bytes. The readers over
/// a stored cache: mla_core / mla_attn (fp64 exp, 1e-6) and
/// indexer_scores_ctx (exact) as at f32.
TEST_F(ExecutorHelpersGpu, KvCacheFormsMatchTwins) {
  std::mt19937 rng(16);
  const int B = 3, maxCtx = 520;
  const std::vector<int> pos = {0, 17, 511}, seq = {2, 0, 1};
  for (const std::string kv : {"bf16", "e4m3"}) {
    const int form = kvFormOf(kv);
    const double step = kv == "bf16" ? 1.0 / 128 : 1.0 / 8;
    // Compares the written rows: bytes exact (want0 or the rows at
    // position 0), else values within one step.
    auto checkRows = [&](Dual &r, size_t k, int n, bool exact,
                         const std::string &what) {
      if (exact) {
        r.checkInts(k, what + " (bytes)");
        return;
      }
      const std::vector<uint8_t> g = r.gpu<uint8_t>(k), h = r.host<uint8_t>(k);
      const size_t rb = glm::kv::rowBytes(form, n);
      Err e;
      size_t differ = 0;
      for (int b = 0; b < B; ++b) {
        const size_t row = (size_t)seq[b] * maxCtx + pos[b];
        const std::vector<float> gv = decodeRow(kv, g, row, n),
                                 hv = decodeRow(kv, h, row, n);
        for (int i = 0; i < n; ++i) {
          e.add(gv[i], hv[i]);
          differ += !sameBits(gv[i], hv[i]);
        }
        if (pos[b] == 0)
          reportExact(
              kv + " " + what + " row at position 0",
              std::memcmp(g.data() + row * rb, h.data() + row * rb, rb) != 0,
              1);
      }
      std::printf("[gpu-case] %s %s: %zu of %zu values on the other side of a "
                  "rounding boundary\n",
                  kv.c_str(), what.c_str(), differ, (size_t)B * n);
      report(kv + " " + what, e, step, "one stored step: fp64 sin/cos");
    };
    for (int dr : {64, 0}) {
      const int kvr = 512, lat = kvr + dr;
      Dual r("kv_store", 256, {{"kv", kv}});
      r.buf(randn(rng, (size_t)B * lat))
          .buf(randn(rng, kvr))
          .out<uint8_t>((size_t)3 * maxCtx * glm::kv::rowBytes(form, lat))
          .buf(seq)
          .buf(pos)
          .i32(kvr)
          .i32(dr)
          .i32(maxCtx)
          .f64(1e-6)
          .f64(10000.0)
          .unpaged();
      r.run(1, B, 1, 256);
      checkRows(r, 2, lat, dr == 0, "kv_store dr" + std::to_string(dr));
    }
    for (int dr : {64, 0}) {
      const int hd = 128;
      Dual r("index_key_store", 256, {{"kv", kv}});
      r.buf(randn(rng, (size_t)B * hd, 3.0f))
          .buf(randn(rng, hd))
          .buf(randn(rng, hd))
          .out<uint8_t>((size_t)3 * maxCtx * glm::kv::rowBytes(form, hd))
          .buf(seq)
          .buf(pos)
          .i32(hd)
          .i32(dr)
          .i32(maxCtx)
          .f64(10000.0)
          .unpaged();
      r.run(1, B, 1, 256);
      checkRows(r, 3, hd, dr == 0, "index_key_store dr" + std::to_string(dr));
    }
    // Readers over stored rows.
    {
      const int nh = 32, hd = 128, T = 3000;
      const std::vector<int> s2 = {1, 0}, p2 = {2999, 700};
      Dual sc("indexer_scores_ctx", 256, {{"kv", kv}});
      sc.buf(randn(rng, (size_t)2 * nh * hd))
          .buf(encodeRows(kv, randn(rng, (size_t)2 * T * hd), hd))
          .buf(randn(rng, (size_t)2 * nh))
          .out<double>((size_t)2 * T)
          .buf(s2)
          .buf(p2)
          .i32(nh)
          .i32(hd)
          .i32(T)
          .f64(1.0 / std::sqrt((double)nh))
          .f64(1.0 / std::sqrt((double)hd))
          .unpaged();
      sc.run(64, 2, 1, 256);
      sc.checkD(3, kv + " index-key scores", 0);
    }
    {
      const int H = 4, dn = 192, dr = 64, dv = 256, kvr = 512, lat = kvr + dr;
      const int Bm = 2, ctx = 1600, R = H * (dn + dv);
      const double scale = 1.0 / std::sqrt((double)(dn + dr));
      const std::vector<int> heads = {0, 1, 3}, s2 = {1, 0}, nsel = {65, 1500};
      std::vector<int> sel((size_t)Bm * ctx, 0);
      for (int b = 0; b < Bm; ++b) {
        std::vector<int> all(ctx);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy(all.begin(), all.begin() + nsel[b], sel.begin() + b * ctx);
      }
      const std::vector<float> q = randn(rng, (size_t)Bm * H * (dn + dr));
      const std::vector<uint8_t> cache =
          encodeRows(kv, randn(rng, (size_t)Bm * ctx * lat), lat);
      Dual c("mla_core", 1024, {{"kv", kv}});
      c.buf(q)
          .buf(randn(rng, (size_t)Bm * H * kvr, 0.1f))
          .buf(cache)
          .buf(s2)
          .buf(sel)
          .buf(nsel)
          .out<float>((size_t)Bm * H * ctx)
          .i32(ctx)
          .out<float>((size_t)Bm * H * kvr)
          .buf(heads)
          .i32(H)
          .i32(dn)
          .i32(dr)
          .i32(kvr)
          .f64(scale)
          .unpaged();
      c.run((unsigned)heads.size(), Bm, 1, 1024,
            (unsigned)(kvr + dr + 2 * 1024 + 4 * 1024) * 4);
      c.check(8, kv + " mla_core ctx (65, 1500 rows)", 1e-6, "fp64 exp");
      Dual a("mla_attn", 256, {{"kv", kv}});
      a.buf(q)
          .buf(randn(rng, (size_t)kvr * R, 0.05f))
          .buf(cache)
          .buf(s2)
          .buf(sel)
          .buf(nsel)
          .out<double>((size_t)Bm * H * ctx)
          .i32(ctx)
          .buf(std::vector<float>((size_t)Bm * H * dv, 0.0f))
          .buf(heads)
          .i32(H)
          .i32(dn)
          .i32(dr)
          .i32(dv)
          .i32(kvr)
          .f64(scale);
      a.run((unsigned)heads.size(), Bm, 1, 256,
            (unsigned)(2 * kvr * sizeof(double)));
      a.check(8, kv + " mla_attn ov", 1e-6, "fp64 exp");
    }
  }
}

TEST_F(ExecutorHelpersGpu, GemvAnyMatchesTwin) {
  std::mt19937 rng(15);
  const int in = 2112, out = 300, B = 3, xs = 2200, ys = 320;
  const int forms[][2] = {{0, 0}, {1, 0}, {2, 0}, {3, 1}, {3, 2}, {3, 3}};
  for (auto &f : forms) {
    const KvB w = makeKvB(rng, out, in, f[0], f[1]);
    Dual r("gemv_any", 256);
    r.buf(randn(rng, (size_t)B * xs)).i32(xs).buf(w.bytes).i32(f[0]);
    if (w.scale.empty())
      r.null();
    else
      r.buf(w.scale);
    r.i32(f[1]).out<float>((size_t)B * ys).i32(ys).i32(in).i32(out);
    r.run(blocksFor(out, 8), B, 1, 256);
    r.check(6, "dt" + std::to_string(f[0]) + " sk" + std::to_string(f[1]),
            f[1] == 3 ? 1e-6 : 0, "exp2f");
  }
}

TEST_F(ExecutorHelpersGpu, RouteAndSwigluMatchTwins) {
  struct Case {
    int E, k, B;
    bool normalize, ties;
  };
  for (const Case c : {Case{256, 8, 3, true, false}, Case{256, 8, 2, true, true},
                       Case{160, 6, 2, false, true}, Case{33, 4, 1, true, false},
                       Case{1024, 64, 1, true, true}}) {
    std::mt19937 rng(40 + c.E + c.k);
    std::vector<float> logits = randn(rng, (size_t)c.B * c.E), bias(c.E);
    for (auto &v : bias)
      v = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    if (c.ties) { // a few distinct values: many exact ties to break by id
      for (auto &v : logits)
        v = float(int(v * 2.0f)) / 2.0f;
      std::fill(bias.begin(), bias.end(), 0.0f);
    }
    const unsigned threads = (unsigned)(c.E + 31) / 32 * 32;
    Dual r("route", threads);
    r.buf(logits)
        .buf(bias)
        .i32(c.E)
        .i32(c.k)
        .i32(c.normalize)
        .f64(2.5)
        .out<int>((size_t)c.B * c.k)
        .out<float>((size_t)c.B * c.k);
    r.run(1, c.B, 1, threads);
    const std::string name = "E" + std::to_string(c.E) + " k" +
                             std::to_string(c.k) + (c.ties ? " ties" : "");
    r.checkInts(6, name + " ids");
    r.check(7, name + " weights", 1e-6, "fp64 exp (sigmoid)");
  }
  std::mt19937 rng(16);
  const int n = 12288, B = 3, gs = 12288;
  std::vector<uint8_t> own(n / 128);
  for (size_t i = 0; i < own.size(); ++i)
    own[i] = i % 3 != 1;
  Dual s("swiglu", 256);
  s.buf(randn(rng, (size_t)B * gs))
      .buf(randn(rng, (size_t)B * gs))
      .i32(gs)
      .out<float>((size_t)B * n)
      .i32(n)
      .buf(own)
      .f64(1.5); // GLM-5.3-Flash's clamp
  s.run(blocksFor(n), B, 1, 256);
  s.check(3, "owned chunks", 1e-6, "fp64 exp");
}

TEST_F(ExecutorHelpersGpu, HfExpertsMatchTwins) {
  std::mt19937 rng(17);
  const int d = 256, I = 320, E = 4, K = 2, B = 2, halves = 3;
  const int chunks = (I + 127) / 128, slots = K * chunks + chunks;
  const long long stride = (long long)I * d;
  for (int dt : {2, 1}) {
    const auto gate = storeAs(dt, randn(rng, (size_t)E * I * d, 0.05f, dt));
    const auto up = storeAs(dt, randn(rng, (size_t)E * I * d, 0.05f, dt));
    const auto down = storeAs(dt, randn(rng, (size_t)E * d * I, 0.05f, dt));
    const std::vector<float> x = randn(rng, (size_t)B * d);
    const std::vector<int> ids = {3, 0, 1, -1};
    const std::vector<float> wts = {0.6f, 0.4f, 1.0f, 0.0f};
    std::vector<uint8_t> own((size_t)E * halves, 1);
    own[1] = 0; // expert 0, channels 128..255: another rank's
    Dual a("hf_expert_act", 256);
    a.buf(gate)
        .buf(up)
        .i32(dt)
        .buf(x)
        .buf(ids)
        .i64(stride)
        .i32(I)
        .i32(d)
        .buf(own)
        .i32(halves)
        .i32(0)
        .out<double>((size_t)B * K * I)
        .f64(0.0); // no clamp
    a.run(blocksFor(I), K, B, 256);
    a.checkD(11, std::string(dtName(dt)) + " act", 1e-12, "fp64 exp (SiLU)");
    // The down half from the twin's act (exact in itself).
    Dual dn("hf_expert_down", 256);
    dn.buf(down)
        .i32(dt)
        .buf(a.host<double>(11))
        .buf(ids)
        .buf(wts)
        .i64(stride)
        .i32(I)
        .i32(d)
        .i32(K)
        .out<double>((size_t)B * slots * d)
        .i32(slots)
        .i32(0);
    dn.run(blocksFor(d), K * chunks, B, 256);
    dn.checkD(9, std::string(dtName(dt)) + " routed units", 0);
    Dual ru("reduce_units", 256);
    std::vector<double> part = dn.host<double>(9);
    for (double &v : part)
      if (std::isnan(v))
        v = 0.0; // the shared expert's units (not launched here)
    ru.buf(part).i32(slots).i32(d).out<float>((size_t)B * d);
    ru.run(blocksFor(d), B, 1, 256);
    ru.check(3, std::string(dtName(dt)) + " unit sum", 0);
  }
}

TEST_F(ExecutorHelpersGpu, GlueFamiliesMatchTwinsExactly) {
  std::mt19937 rng(18);
  const int d = 6144, B = 3, K = 8, E = 256, nShared = 1;
  std::vector<int> ids((size_t)B * K);
  for (auto &e : ids)
    e = (int)(rng() % E);
  ids[5] = -1;
  {
    Dual r("exl3_expert_in", 256);
    r.buf(randn(rng, (size_t)B * d))
        .buf(randn(rng, (size_t)2 * E * d))
        .buf(ids)
        .out<float>((size_t)2 * B * K * d)
        .i32(d)
        .i32(E)
        .i32(B);
    r.run(blocksFor(d), K, 2 * B, 256);
    r.check(3, "xh", 0);
  }
  {
    const int slots = K + nShared;
    Dual r("moe_exl3_in", 256);
    r.buf(randn(rng, (size_t)B * d))
        .buf(randn(rng, (size_t)2 * (E + nShared) * d))
        .buf(ids)
        .out<float>((size_t)B * slots * 2 * d)
        .i32(d)
        .i32(E + nShared)
        .i32(E)
        .i32(K)
        .i32(B);
    r.run(blocksFor(d), slots, 2 * B, 256);
    r.check(3, "xh", 0);
  }
  {
    const int n = 6144, np = 16;
    Dual r("sum_parts", 256);
    r.buf(randn(rng, (size_t)np * n)).i32(np).i32(n).out<float>(n);
    r.run(blocksFor(n), 1, 1, 256);
    r.check(3, "16 slices", 0);
  }
  {
    const int kvr = 512;
    Dual r("onehot", 256);
    r.out<float>(kvr).i32(1).i32(kvr).i32(77);
    r.run(blocksFor(kvr), 1, 1, 256);
    r.check(0, "row", 0);
  }
  {
    const long long R = 1536;
    const int kvr = 512;
    Dual r("transpose", 256);
    r.buf(randn(rng, (size_t)R * kvr))
        .out<float>((size_t)R * kvr)
        .i64(R)
        .i32(kvr);
    r.run(blocksFor(R * kvr), 1, 1, 256);
    r.check(1, "kv_b", 0);
  }
  {
    const int N = 3, maxCount = 51712, V = 154880;
    const std::vector<long long> vb = {0, 51712, 103296, 154880};
    Dual r("vocab_gather", 256);
    r.buf(randn(rng, (size_t)N * B * maxCount))
        .buf(vb)
        .i32(B)
        .i32(maxCount)
        .out<float>((size_t)B * V)
        .i32(V);
    r.run(blocksFor(maxCount), N, B, 256);
    r.check(4, "3 ranks", 0);
  }
  {
    const long long n = 1000003;
    Dual r("fill_random", 256);
    r.out<uint32_t>(n).i64(n).u64(0x9E3779B97F4A7C15ull * 3).u32(0xBBFFBBFFu);
    r.run(1024, 1, 1, 256); // the uploader's grid
    const auto g = r.gpu<uint32_t>(0), h = r.host<uint32_t>(0);
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
      bad += g[i] != h[i];
    reportExact("fill_random words", bad, g.size());
  }
  {
    const long long n = 500001;
    Dual r("fill_f32", 256);
    r.out<float>(n).i64(n).f32(1.0f);
    r.run(1024, 1, 1, 256);
    r.check(0, "ones", 0);
  }
}

/// Fixed-point sums (codegen/templates/fixed_point.cuh): CUDA against the
/// twins, and the property they exist for, on the device: the units of an
/// input split over "ranks" (the other ranks' units zeroed, as the plan
/// runs them), each rank's int64 rows (sum = fixed_out) added, give exactly
/// the one-rank int64 rows, whose fromFixed is exactly the sum = fixed
/// output.
TEST_F(ExecutorHelpersGpu, FixedPointSumsAreTheSameBitsForEverySplit) {
  std::mt19937 rng(53);
  const int B = 2, in = 384, out = 200;
  const std::vector<float> x = randn(rng, (size_t)B * in);
  const std::vector<float> w = randn(rng, (size_t)out * in, 0.05f);
  // Rank r of 3 owns the 64-input units u with u % 3 == r.
  auto masked = [&](int r) {
    std::vector<float> m = x;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < in; ++i)
        if ((i / 64) % 3 != r)
          m[(size_t)b * in + i] = 0.0f;
    return m;
  };
  auto gemv = [&](const std::vector<float> &xs, const char *sum, bool longs) {
    Dual g("gemv_any", 256, {{"sum", sum}});
    g.buf(xs).i32(in).buf(w).i32(0).null().i32(0);
    if (longs)
      g.out<long long>((size_t)B * out);
    else
      g.out<float>((size_t)B * out);
    g.i32(out).i32(in).i32(out);
    g.run((out + 7) / 8, B, 1, 256);
    return g;
  };
  Dual one = gemv(x, "fixed", false);
  one.check(6, "sum=fixed", 0); // products rounded alike: same bits
  Dual whole = gemv(x, "fixed_out", true);
  std::vector<long long> total((size_t)B * out, 0);
  for (int r = 0; r < 3; ++r) {
    Dual part = gemv(masked(r), "fixed_out", true);
    const std::vector<long long> g = part.gpu<long long>(6),
                                 h = part.host<long long>(6);
    EXPECT_EQ(g, h) << "gemv_any fixed_out rank " << r;
    for (size_t i = 0; i < total.size(); ++i)
      total[i] += g[i];
  }
  const std::vector<long long> wholeG = whole.gpu<long long>(6);
  size_t bad = 0;
  for (size_t i = 0; i < total.size(); ++i)
    bad += total[i] != wholeG[i];
  reportExact("gemv_any 3-rank int64 sum = 1-rank", bad, total.size());
  const std::vector<float> oneG = one.gpu<float>(6);
  bad = 0;
  for (size_t i = 0; i < oneG.size(); ++i)
    bad += !sameBits(oneG[i], glm::fromFixed(wholeG[i]));
  reportExact("gemv_any fixed = fromFixed(fixed_out)", bad, oneG.size());

  // fixed_to_f32 after the all-reduce: plain and with the output rotation.
  const int n = 256;
  std::vector<long long> sums((size_t)B * n);
  for (auto &v : sums)
    v = (long long)(rng() % 2000001) - 1000000;
  std::vector<float> post = randn(rng, n);
  for (int withPost = 0; withPost < 2; ++withPost) {
    Dual c("fixed_to_f32", 256);
    c.buf(sums);
    if (withPost)
      c.buf(post);
    else
      c.null();
    c.out<float>((size_t)B * n).i32(B).i32(n);
    c.run((B * (n / 128) + 7) / 8, 1, 1, 256);
    c.check(2, withPost ? "H * post" : "plain", 0);
  }

  // reduce_units: fp64 unit partials to fixed point, summed exactly.
  const int units = 6, d = 300;
  std::vector<double> part((size_t)B * units * d);
  for (auto &v : part)
    v = std::normal_distribution<double>(0.0, 0.3)(rng);
  for (const char *sum : {"fixed", "fixed_out"}) {
    Dual ru("reduce_units", 256, {{"sum", sum}});
    ru.buf(part).i32(units).i32(d);
    if (sum[5] == '_')
      ru.out<long long>((size_t)B * d);
    else
      ru.out<float>((size_t)B * d);
    ru.run(blocksFor(d), B, 1, 256);
    if (sum[5] == '_') {
      const bool same = ru.gpu<long long>(3) == ru.host<long long>(3);
      reportExact("reduce_units sum=fixed_out", same ? 0 : 1, 1);
    } else {
      ru.check(3, "sum=fixed", 0);
    }
  }
}

/// The same property for the two GEMV families of the decode step: 3
/// "ranks" owning 128-input units round-robin, their int64 rows summed,
/// equal the one-rank rows bit for bit; sum = fixed is fromFixed of them
/// (dense_trellis: then H * svh, as fixed_to_f32 applies it after an
/// all-reduce). CUDA against the twins within the families' tolerances.
TEST_F(ExecutorHelpersGpu, FixedPointGemvsAreTheSameBitsForEverySplit) {
  std::mt19937 rng(54);
  const int B = 2, in = 512, out = 256;
  auto masked = [&](const std::vector<float> &x, int r) {
    std::vector<float> m = x;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < in; ++i)
        if (r >= 0 && (i / 128) % 3 != r)
          m[(size_t)b * in + i] = 0.0f;
    return m;
  };
  auto sumRanks = [&](auto &&run, const std::string &name) {
    const std::vector<long long> whole = run(-1);
    std::vector<long long> total(whole.size(), 0);
    for (int r = 0; r < 3; ++r) {
      const std::vector<long long> p = run(r);
      for (size_t i = 0; i < total.size(); ++i)
        total[i] += p[i];
    }
    size_t bad = 0;
    for (size_t i = 0; i < total.size(); ++i)
      bad += total[i] != whole[i];
    reportExact(name + " 3-rank int64 sum = 1-rank", bad, total.size());
    return whole;
  };

  // dense_gemv, BF16, 4 slices per row (grid out/2: R = 2 rows per block).
  const std::vector<float> x = randn(rng, (size_t)B * in);
  const std::vector<uint8_t> wb = storeAs(2, randn(rng, (size_t)out * in, 0.05f));
  // rowsPerWarp 4: the kernel with 4 rows a warp on a grid of out / 32.
  auto gemv = [&](const std::vector<float> &xs, const char *sum,
                  int rowsPerWarp = 1) {
    std::map<std::string, std::string> args = {
        {"format", "bf16"}, {"scale", "none"}, {"batch", "2"}, {"sum", sum}};
    if (rowsPerWarp > 1)
      args["rows"] = std::to_string(rowsPerWarp), args["loads"] = "stream";
    Dual g("dense_gemv", 256, args);
    g.buf(xs).buf(wb).null();
    if (std::string(sum) == "fixed_out")
      g.out<long long>((size_t)B * out);
    else
      g.out<float>((size_t)B * out);
    g.i32(B).i32(in).i32(out).i32(out).i32(0);
    g.run(rowsPerWarp > 1 ? out / (8 * rowsPerWarp) : out / 2, 1, 1, 256);
    return g;
  };
  Dual one = gemv(x, "fixed");
  one.check(3, "bf16 sum=fixed", 1e-5, "per-load fp32 dots vs fp64");
  const std::vector<long long> whole = sumRanks(
      [&](int r) { return gemv(masked(x, r), "fixed_out").gpu<long long>(3); },
      "dense_gemv");
  const std::vector<float> oneG = one.gpu<float>(3);
  size_t bad = 0;
  for (size_t i = 0; i < oneG.size(); ++i)
    bad += !sameBits(oneG[i], glm::fromFixed(whole[i]));
  reportExact("dense_gemv fixed = fromFixed(fixed_out)", bad, oneG.size());
  // 4 rows a warp: the same unit dots, so the same int64 rows.
  {
    const std::vector<long long> rows4 =
        gemv(x, "fixed_out", 4).gpu<long long>(3);
    size_t diff = 0;
    for (size_t i = 0; i < rows4.size(); ++i)
      diff += rows4[i] != whole[i];
    reportExact("dense_gemv 4 rows a warp fixed_out = 1 row a warp", diff,
                rows4.size());
  }

  // dense_trellis, K4 mcg E4M3, EXL3 row-major tiles, split 8 over 4 warps
  // (chunks of 4 tile rows inside the 8-row units).
  const int K = 4, split = 8;
  std::vector<uint8_t> tiles((size_t)(in / 16) * (out / 16) * 32 * K);
  for (auto &t : tiles)
    t = uint8_t(rng());
  const std::vector<float> xh = randn(rng, (size_t)B * in);
  std::vector<float> svh = randn(rng, out);
  glm::codegen::DenseTrellisDims dd;
  dd.batch = B, dd.in = in, dd.out = out, dd.split = split, dd.threads = 128;
  dd.sum = 1;
  ASSERT_TRUE(dd.valid());
  auto trellis = [&](const std::vector<float> &xs, const char *sum) {
    const bool longs = std::string(sum) == "fixed_out";
    Dual t("dense_trellis", 128,
           {{"K", "4"}, {"codebook", "mcg"}, {"e4m3", "1"}, {"batch", "2"},
            {"pipe", "2"}, {"minblocks", "0"}, {"sum", sum}});
    t.buf(xs).buf(tiles);
    if (longs)
      t.null();
    else
      t.buf(svh);
    t.out<float>(dd.scratchFloats())
        .buf(std::vector<int>(dd.counterInts(), 0));
    if (longs)
      t.out<long long>((size_t)B * out);
    else
      t.out<float>((size_t)B * out);
    t.i32(B).i32(in).i32(out).i32(out).i32(out).i32(out / 16).i32(out / 2)
        .i32(8).i32(split);
    t.run(dd.grid(), 1, 1, 128);
    return t;
  };
  Dual tOne = trellis(xh, "fixed");
  tOne.check(5, "sum=fixed (H * svh)", 2e-5,
             "fp32 mma chunk sums vs the twin's fp64");
  const std::vector<long long> tWhole = sumRanks(
      [&](int r) {
        return trellis(masked(xh, r), "fixed_out").gpu<long long>(5);
      },
      "dense_trellis");
  Dual conv("fixed_to_f32", 256);
  conv.buf(tWhole).buf(svh).out<float>((size_t)B * out).i32(B).i32(out);
  conv.run((B * (out / 128) + 7) / 8, 1, 1, 256);
  const std::vector<float> a = tOne.gpu<float>(5), c = conv.gpu<float>(2);
  bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    bad += !sameBits(a[i], c[i]);
  reportExact("dense_trellis fixed = fixed_to_f32(fixed_out, svh)", bad,
              a.size());
}

} // namespace
} // namespace glm::gputest
