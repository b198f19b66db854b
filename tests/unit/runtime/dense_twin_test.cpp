//===- dense_twin_test.cpp - twins of the dense GEMV / GEMM families ------===//
//
// dense_trellis, dense_gemv_trellis, gemm_trellis(_grouped), hadamard128,
// dense_gemv and dense_gemv_f32 against float64 references: trellis
// matrices decoded by the codec (EXL3 row-major and exlr8 in-major-128
// tiles), dense weights decoded from their formats by hand here.
//
//===----------------------------------------------------------------------===//
#include "codegen/dense_trellis_abi.h"
#include "twin_test_util.h"

#include <limits>

using namespace glm::twintest;
namespace trellis = glm::rt::trellis;

namespace {

/// A random trellis matrix (in x out) and its decoded values.
struct TrellisMatrix {
  int in, out, k;
  trellis::Codebook cb;
  bool e4m3, exlr8; // exlr8: in-major-128 tile order
  std::vector<uint8_t> blob;
  std::vector<float> q;
  int sI, sI8, sJ8;

  TrellisMatrix(std::mt19937 &rng, int in_, int out_, int k_,
                trellis::Codebook cb_, bool e4m3_, bool exlr8_)
      : in(in_), out(out_), k(k_), cb(cb_), e4m3(e4m3_), exlr8(exlr8_) {
    addWords(blob, rng, size_t(in / 16) * (out / 16) * 16 * k);
    q = decoded(blob.data(), in, out, k, cb, e4m3,
                exlr8 ? trellis::TileOrder::InMajor128
                      : trellis::TileOrder::RowMajor);
    if (exlr8) // [out/128][in/16][8]
      sI = 8, sI8 = 64, sJ8 = in / 2;
    else
      sI = out / 16, sI8 = out / 2, sJ8 = 8;
  }
  /// float64 x . Q for rows of x (stride in).
  std::vector<double> apply(const std::vector<float> &x, int rows) const {
    std::vector<double> y(size_t(rows) * out, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < in; ++i) {
        const double xi = x[size_t(r) * in + i];
        for (int o = 0; o < out; ++o)
          y[size_t(r) * out + o] += xi * q[size_t(i) * out + o];
      }
    return y;
  }
};

const char *cbName(trellis::Codebook cb) { return trellis::codebookName(cb); }

TEST(DenseTrellisTwin, SplitKAndOutputRotationMatchFloat64) {
  std::mt19937 rng(11);
  for (bool exlr8 : {false, true})
    for (int split : {4, 8, 16}) {
      const int in = 512, out = 384, B = 3, K = exlr8 ? 3 : 4;
      const auto cb = exlr8 ? trellis::Codebook::Mcg : trellis::Codebook::Mul1;
      TrellisMatrix m(rng, in, out, K, cb, exlr8, exlr8);
      const std::vector<float> x = randn(rng, size_t(B) * in);
      std::vector<double> ref = m.apply(x, B);
      std::vector<float> svh(out);
      for (float &v : svh)
        v = (rng() & 1) ? 0.75f : -1.25f;
      for (bool rot : {false, true}) {
        std::vector<double> r = ref;
        if (rot)
          for (int b = 0; b < B; ++b) {
            hadamardRef(&r[size_t(b) * out], out);
            for (int o = 0; o < out; ++o)
              r[size_t(b) * out + o] *= svh[o];
          }
        glm::codegen::DenseTrellisDims d;
        d.batch = B, d.in = in, d.out = out, d.split = split, d.threads = 128;
        ASSERT_TRUE(d.valid());
        const int outValid = out - 40, yStride = out + 8;
        std::vector<float> scratch(d.scratchFloats() + 1, NAN);
        std::vector<int> counters(d.counterInts(), 0);
        std::vector<float> y(size_t(B) * yStride, -3.0f);
        const glm::plan::KeyValues targs = {{"K", std::to_string(K)},
                                            {"codebook", cbName(cb)},
                                            {"e4m3", exlr8 ? "1" : "0"},
                                            {"batch", "8"},
                                            {"pipe", "2"},
                                            {"minblocks", "0"},
                                            {"threads", "128"}};
        runTwin(launch("dense_trellis", targs, d.grid(), 1, 128,
                       {P(x.data()), P(m.blob.data()),
                        P(rot ? svh.data() : nullptr), P(scratch.data()),
                        P(counters.data()), P(y.data()), I(B), I(in), I(out),
                        I(yStride), I(outValid), I(m.sI), I(m.sI8), I(m.sJ8),
                        I(split)}));
        std::vector<float> got;
        std::vector<double> want;
        for (int b = 0; b < B; ++b)
          for (int o = 0; o < yStride; ++o) {
            const float v = y[size_t(b) * yStride + o];
            if (o >= outValid) { // the padded tail is not written
              ASSERT_EQ(v, -3.0f) << o;
              continue;
            }
            got.push_back(v);
            want.push_back(r[size_t(b) * out + o]);
          }
        expectRel("dense_trellis exlr8 " + std::to_string(exlr8) + " split " +
                      std::to_string(split) + " rot " + std::to_string(rot),
                  got.data(), want.data(), got.size(), 2e-6);
      }
    }
}

TEST(DenseGemvTrellisTwin, MatchesFloat64) {
  std::mt19937 rng(12);
  for (int K : {1, 2, 5, 8}) {
    const int in = 256, out = 256, B = 2;
    TrellisMatrix m(rng, in, out, K, trellis::Codebook::ThreeInst, K == 5,
                    K == 2);
    const std::vector<float> x = randn(rng, size_t(B) * in);
    const std::vector<double> ref = m.apply(x, B);
    std::vector<float> z(size_t(B) * out, NAN);
    const glm::plan::KeyValues targs = {{"K", std::to_string(K)},
                                        {"codebook", "3inst"},
                                        {"e4m3", K == 5 ? "1" : "0"},
                                        {"batch", "4"},
                                        {"threads", "128"}};
    runTwin(launch("dense_gemv_trellis", targs, out / 16 / 4, 1, 128,
                   {P(x.data()), P(m.blob.data()), P(z.data()), I(B), I(in),
                    I(out), I(m.sI), I(m.sI8), I(m.sJ8)}));
    expectRel("dense_gemv_trellis k" + std::to_string(K), z.data(), ref.data(),
              z.size(), 1e-6);
  }
}

TEST(GemmTrellisTwin, Fp16InputsMatchFloat64) {
  std::mt19937 rng(13);
  const int in = 256, out = 384, M = 70; // two BM = 64 row blocks
  TrellisMatrix m(rng, in, out, 3, trellis::Codebook::Mcg, true, false);
  std::vector<float> x = randn(rng, size_t(M) * in);
  std::vector<uint16_t> x16(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x16[i] = glm::rt::floatToHalf(x[i]);
    x[i] = glm::rt::halfToFloat(x16[i]); // the kernel's fp16 staging
  }
  const std::vector<double> ref = m.apply(x, M);
  for (const char *xt : {"f32", "f16"})
    for (int acc : {0, 1}) {
      std::vector<float> z(size_t(M) * out, acc ? 0.5f : NAN);
      const glm::plan::KeyValues targs = {{"K", "3"},    {"codebook", "mcg"},
                                          {"e4m3", "1"}, {"xt", xt},
                                          {"bm", "64"},  {"threads", "128"}};
      const void *xp = std::string(xt) == "f16"
                           ? static_cast<const void *>(x16.data())
                           : x.data();
      runTwin(launch("gemm_trellis", targs, (out + 127) / 128, (M + 63) / 64,
                     128,
                     {P(xp), P(m.blob.data()), P(z.data()), I(M), I(in), I(out),
                      I(in), I(out), I(acc), I(m.sI), I(m.sI8), I(m.sJ8)}));
      std::vector<double> want = ref;
      if (acc)
        for (double &v : want)
          v += 0.5;
      expectRel(std::string("gemm_trellis x") + xt + " acc" +
                    std::to_string(acc),
                z.data(), want.data(), z.size(), 1e-6);
    }
}

TEST(GemmTrellisGroupedTwin, ItemsGatherRowsAndRefuseWidths) {
  std::mt19937 rng(14);
  const int in = 128, out = 256, T = 9; // 9 token rows of xh
  TrellisMatrix a(rng, in, out, 2, trellis::Codebook::Mcg, false, false);
  TrellisMatrix b(rng, in, out, 4, trellis::Codebook::Mcg, false, false);
  TrellisMatrix c(rng, in, out, 3, trellis::Codebook::Mcg, false, false);
  const int xStride = in + 32, xCol = 16;
  const std::vector<float> x = randn(rng, size_t(T) * xStride);
  const std::vector<int> rowIds = {7, 2, 5, 0, 8};
  struct Item {
    const unsigned char *tiles;
    long long zOff;
    int rowStart, rows, xCol, k;
  };
  const int zStride = out;
  std::vector<Item> items = {
      {a.blob.data(), 0, 0, 3, xCol, 2},             // rows 7, 2, 5
      {b.blob.data(), 3LL * zStride, 3, 2, xCol, 4}, // rows 0, 8
      {nullptr, 5LL * zStride, 0, 2, xCol, 2},       // skipped
      {c.blob.data(), 7LL * zStride, 0, 1, xCol, 3}, // K 3: not built
  };
  std::vector<float> z(size_t(8) * zStride, -1.0f);
  const glm::plan::KeyValues targs = {{"widths", "24"}, {"codebook", "mcg"},
                                      {"e4m3", "0"},    {"xt", "f32"},
                                      {"bm", "64"},     {"threads", "128"}};
  runTwin(launch("gemm_trellis_grouped", targs, unsigned(items.size()),
                 out / 128, 128,
                 {P(x.data()), P(rowIds.data()), P(items.data()), P(z.data()),
                  I(int64_t(items.size())), I(in), I(out), I(xStride),
                  I(zStride), I(0), I(a.sI), I(a.sI8), I(a.sJ8)}));
  auto check = [&](const TrellisMatrix &m, int zRow, int row) {
    std::vector<float> xr(in);
    for (int i = 0; i < in; ++i)
      xr[i] = glm::rt::roundToHalf(x[size_t(row) * xStride + xCol + i]);
    const std::vector<double> ref = m.apply(xr, 1);
    EXPECT_LE(relErr(&z[size_t(zRow) * zStride], ref.data(), out), 1e-6)
        << zRow;
  };
  check(a, 0, 7), check(a, 1, 2), check(a, 2, 5);
  check(b, 3, 0), check(b, 4, 8);
  for (int o = 0; o < out; ++o) {
    EXPECT_EQ(z[size_t(5) * zStride + o], -1.0f); // null tiles: untouched
    EXPECT_TRUE(std::isnan(z[size_t(7) * zStride + o])); // width not built
  }
}

TEST(Hadamard128Twin, SideVectorsAndStrides) {
  std::mt19937 rng(15);
  const int rows = 3, n = 384;
  const std::vector<float> x = randn(rng, size_t(rows) * n);
  for (int vt : {0, 1, 2}) {
    std::vector<float> pre(size_t(rows) * n), post(n);
    for (float &v : pre)
      v = roundTo(vt, 0.5f + float(rng() % 100) / 64.0f);
    for (float &v : post)
      v = roundTo(vt, (rng() & 1) ? 1.0f : -0.875f);
    const std::vector<uint8_t> preB = storeAs(vt, pre),
                               postB = storeAs(vt, post);
    std::vector<double> ref(size_t(rows) * n);
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] = double(x[i]) * pre[i];
    hadamardRef(ref.data(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      ref[i] *= post[i % n];
    std::vector<float> y = x; // in place: x may alias y
    const glm::plan::KeyValues targs = {{"vt", dtName(vt)}, {"threads", "128"}};
    runTwin(launch("hadamard128", targs, (rows * n / 128 + 3) / 4, 1, 128,
                   {P(y.data()), P(preB.data()), P(postB.data()), P(y.data()),
                    I(rows), I(n), I(n), I(0)}));
    EXPECT_LE(relErr(y.data(), ref.data(), y.size()), 1e-6) << vt;
  }
}

TEST(DenseGemvTwin, EveryFormatMatchesFloat64) {
  std::mt19937 rng(16);
  const int in = 256, out = 200, B = 2;
  const std::vector<float> x = randn(rng, size_t(B) * in);
  for (const char *format : {"bf16", "fp8_block", "fp8_row", "mxfp8"}) {
    const std::string f = format;
    std::vector<uint8_t> w, scale;
    std::vector<double> wf(size_t(out) * in); // decoded weights
    std::string scaleName = "none";
    if (f == "bf16") {
      w.resize(size_t(out) * in * 2);
      for (size_t i = 0; i < wf.size(); ++i) {
        const uint16_t b =
            glm::rt::floatToBf16(std::normal_distribution<float>(0, 1)(rng));
        std::memcpy(&w[2 * i], &b, 2);
        wf[i] = glm::rt::bf16ToFloat(b);
      }
    } else {
      w.resize(size_t(out) * in);
      for (auto &v : w) {
        v = uint8_t(rng());
        if ((v & 0x7F) == 0x7F) // no NaN weights
          v &= 0xF7;
      }
      std::vector<float> sc;
      if (f == "fp8_block") {
        scaleName = "f32";
        sc.resize(size_t((out + 127) / 128) * (in / 128));
      } else if (f == "fp8_row") {
        scaleName = "bf16";
        sc.resize(out);
      }
      for (float &v : sc)
        v = roundTo(scaleName == "bf16" ? 2 : 0,
                    0.01f + float(rng() % 97) / 997.0f);
      if (f == "mxfp8") {
        scale.resize(size_t(out) * (in / 32));
        for (auto &v : scale)
          v = uint8_t(120 + rng() % 12);
      } else {
        scale = storeAs(scaleName == "bf16" ? 2 : 0, sc);
      }
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) {
          float s = 1.0f;
          if (f == "fp8_block")
            s = sc[size_t(o / 128) * (in / 128) + i / 128];
          else if (f == "fp8_row")
            s = sc[o];
          else
            s = std::ldexp(1.0f,
                           int(scale[size_t(o) * (in / 32) + i / 32]) - 127);
          wf[size_t(o) * in + i] =
              double(glm::rt::e4m3ToFloat(w[size_t(o) * in + i]) * s);
        }
    }
    for (int acc : {0, 1}) {
      const int outStride = out + 3;
      std::vector<float> y(size_t(B) * outStride, acc ? 2.0f : NAN);
      const glm::plan::KeyValues targs = {{"format", format},
                                          {"scale", scaleName},
                                          {"batch", "8"},
                                          {"threads", "256"}};
      // A short grid: rows spread over slices of several warps.
      runTwin(launch("dense_gemv", targs, 30, 1, 256,
                     {P(x.data()), P(w.data()),
                      P(scale.empty() ? nullptr : scale.data()), P(y.data()),
                      I(B), I(in), I(out), I(outStride), I(acc)}));
      std::vector<float> got;
      std::vector<double> want;
      for (int b = 0; b < B; ++b)
        for (int o = 0; o < out; ++o) {
          double r = acc ? 2.0 : 0.0;
          for (int i = 0; i < in; ++i)
            r += wf[size_t(o) * in + i] * x[size_t(b) * in + i];
          got.push_back(y[size_t(b) * outStride + o]);
          want.push_back(r);
        }
      EXPECT_LE(relErr(got.data(), want.data(), got.size()), 1e-6)
          << format << " acc " << acc;
    }
  }
}

/// gemm_dense's twin against y = x . W^T * scale in float64 from unsplit x
/// (the weights decoded here by hand): hi + lo keeps ~22 bits of x, so
/// 1e-6 of max|y|. Shapes: m not a multiple of bm, several column blocks
/// with a ragged last one (out 200 over BN 64 / 128), every format and
/// scale storage, accumulate 0 / 1, grids that cover part of the problem.
TEST(GemmDenseTwin, EveryFormatMatchesFloat64) {
  std::mt19937 rng(18);
  const int in = 384, out = 200;
  for (const char *format : {"fp8_block", "fp8_row", "mxfp8"})
    for (int sct : {0, 1, 2}) {
      const std::string f = format;
      if (f == "mxfp8" && sct != 0)
        continue;
      std::vector<uint8_t> w(size_t(out) * in), scale;
      for (auto &v : w) {
        v = uint8_t(rng());
        if ((v & 0x7F) == 0x7F) // no NaN weights
          v &= 0xF7;
      }
      std::vector<float> sc;
      if (f == "fp8_block")
        sc.resize(size_t((out + 127) / 128) * (in / 128));
      else if (f == "fp8_row")
        sc.resize(out);
      for (float &v : sc)
        v = roundTo(sct, 0.01f + float(rng() % 97) / 997.0f);
      if (f == "mxfp8") {
        scale.resize(size_t(out) * (in / 32));
        for (auto &v : scale)
          v = uint8_t(118 + rng() % 16);
      } else {
        scale = storeAs(sct, sc);
      }
      std::vector<double> wf(size_t(out) * in);
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) {
          double s = 1.0;
          if (f == "fp8_block")
            s = sc[size_t(o / 128) * (in / 128) + i / 128];
          else if (f == "fp8_row")
            s = sc[o];
          else
            s = std::ldexp(1.0,
                           int(scale[size_t(o) * (in / 32) + i / 32]) - 127);
          wf[size_t(o) * in + i] =
              double(glm::rt::e4m3ToFloat(w[size_t(o) * in + i])) * s;
        }
      const std::string scaleName = f == "mxfp8" ? "none" : dtName(sct);
      for (int bm : {64, 128})
        for (int threads : {128, 256})
          for (int acc : {0, 1}) {
            const int m = bm == 64 ? 70 : 133, outStride = out + 5;
            const std::vector<float> x = randn(rng, size_t(m) * in);
            const int bn = 64 * threads / bm;
            std::vector<float> y(size_t(m) * outStride, acc ? 2.0f : NAN);
            const glm::plan::KeyValues targs = {{"format", format},
                                                {"scale", scaleName},
                                                {"bm", std::to_string(bm)},
                                                {"threads",
                                                 std::to_string(threads)}};
            runTwin(launch("gemm_dense", targs, (out + bn - 1) / bn,
                           (m + bm - 1) / bm, threads,
                           {P(x.data()), P(w.data()),
                            P(scale.empty() ? nullptr : scale.data()),
                            P(y.data()), I(m), I(in), I(out), I(outStride),
                            I(acc), P(nullptr)}));
            std::vector<float> got;
            std::vector<double> want;
            for (int r = 0; r < m; ++r)
              for (int o = 0; o < out; ++o) {
                double ref = acc ? 2.0 : 0.0;
                for (int i = 0; i < in; ++i)
                  ref += wf[size_t(o) * in + i] * x[size_t(r) * in + i];
                got.push_back(y[size_t(r) * outStride + o]);
                want.push_back(ref);
              }
            expectRel("gemm_dense " + f + " s" + scaleName + " m" +
                          std::to_string(bm) + " t" +
                          std::to_string(threads) + " acc" +
                          std::to_string(acc),
                      got.data(), want.data(), got.size(), 1e-6);
          }
    }
}

/// BF16 weights: x's bf16 hi + mid + lo planes hold it exactly, so the twin
/// is the float64 y = x . W^T from unsplit x up to its fp32 roundings (each
/// 128-input partial, their sum, y + v): 2e-7 of max|y| (one rounding is
/// 2^-24 = 6e-8). x spans 2^-40 .. 2^40; a missing plane (16 bits of x)
/// would be ~2^-17 = 8e-6 off a product. dense_gemv's bf16 twin (fp64 sums
/// of the same exact products) agrees to the same tolerance: prefill
/// follows the token-by-token router logits.
TEST(GemmDenseTwin, Bf16PlanesMatchFloat64AndDenseGemv) {
  std::mt19937 rng(20);
  const int in = 384, out = 200;
  std::vector<uint16_t> w(size_t(out) * in);
  std::vector<double> wf(w.size());
  {
    const std::vector<float> v = randn(rng, w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = glm::rt::floatToBf16(v[i]);
      wf[i] = glm::rt::bf16ToFloat(w[i]);
    }
  }
  for (int bm : {64, 128})
    for (int threads : {128, 256})
      for (int acc : {0, 1}) {
        const int m = bm == 64 ? 70 : 133, outStride = out + 5;
        std::vector<float> x = randn(rng, size_t(m) * in);
        for (float &v : x) // the planes' low bits matter
          v = std::ldexp(v, int(rng() % 81) - 40);
        const int bn = 64 * threads / bm;
        std::vector<float> y(size_t(m) * outStride, acc ? 2.0f : NAN);
        const glm::plan::KeyValues targs = {{"format", "bf16"},
                                            {"scale", "none"},
                                            {"bm", std::to_string(bm)},
                                            {"threads",
                                             std::to_string(threads)}};
        runTwin(launch("gemm_dense", targs, (out + bn - 1) / bn,
                       (m + bm - 1) / bm, threads,
                       {P(x.data()), P(w.data()), P(nullptr), P(y.data()),
                        I(m), I(in), I(out), I(outStride), I(acc),
                        P(nullptr)}));
        std::vector<float> got;
        std::vector<double> want;
        for (int r = 0; r < m; ++r)
          for (int o = 0; o < out; ++o) {
            double ref = acc ? 2.0 : 0.0;
            for (int i = 0; i < in; ++i)
              ref += wf[size_t(o) * in + i] * x[size_t(r) * in + i];
            got.push_back(y[size_t(r) * outStride + o]);
            want.push_back(ref);
          }
        const std::string what = "gemm_dense bf16 m" + std::to_string(bm) +
                                 " t" + std::to_string(threads) + " acc" +
                                 std::to_string(acc);
        expectRel(what, got.data(), want.data(), got.size(), 2e-7);
        // The first 8 rows through dense_gemv's twin (batch 8).
        std::vector<float> g(size_t(8) * outStride, acc ? 2.0f : NAN);
        const glm::plan::KeyValues gargs = {{"format", "bf16"},
                                            {"scale", "none"},
                                            {"batch", "8"},
                                            {"threads", "256"}};
        runTwin(launch("dense_gemv", gargs, (out + 7) / 8, 1, 256,
                       {P(x.data()), P(w.data()), P(nullptr), P(g.data()),
                        I(8), I(in), I(out), I(outStride), I(acc)}));
        std::vector<double> gd;
        got.clear();
        for (int r = 0; r < 8; ++r)
          for (int o = 0; o < out; ++o) {
            got.push_back(y[size_t(r) * outStride + o]);
            gd.push_back(g[size_t(r) * outStride + o]);
          }
        expectRel(what + " vs dense_gemv", got.data(), gd.data(), got.size(),
                  2e-7);
      }
}

/// A grid covering part of the problem computes exactly its blocks; the
/// rest of y stays as it was (as the kernel's early return leaves it).
TEST(GemmDenseTwin, ComputesOnlyTheBlocksOfItsGrid) {
  std::mt19937 rng(19);
  const int in = 128, out = 300, m = 150;
  std::vector<uint8_t> w(size_t(out) * in), scale(size_t(out) * in / 32, 127);
  for (auto &v : w)
    v = uint8_t(rng() & 0x77);
  const std::vector<float> x = randn(rng, size_t(m) * in);
  std::vector<float> y(size_t(m) * out, -7.0f);
  const glm::plan::KeyValues targs = {
      {"format", "mxfp8"}, {"scale", "none"}, {"bm", "64"}, {"threads", "128"}};
  // Grid (2, 2): rows < 128, columns < 256.
  runTwin(launch("gemm_dense", targs, 2, 2, 128,
                 {P(x.data()), P(w.data()), P(scale.data()), P(y.data()), I(m),
                  I(in), I(out), I(out), I(0), P(nullptr)}));
  for (int r = 0; r < m; ++r)
    for (int o = 0; o < out; ++o) {
      const bool hit = r < 128 && o < 256;
      EXPECT_EQ(y[size_t(r) * out + o] == -7.0f, !hit) << r << " " << o;
    }
}

// The row window (a prefill LM head's io.logit_rows): row blocks it does
// not meet keep y; the ones it meets equal the launch without a window.
TEST(GemmDenseTwin, RowWindowComputesTheBlocksItMeets) {
  std::mt19937 rng(29);
  const int in = 128, out = 40, m = 150, bm = 64;
  std::vector<uint8_t> w(size_t(out) * in), scale(size_t(out) * in / 32, 127);
  for (auto &v : w)
    v = uint8_t(rng() & 0x77);
  const std::vector<float> x = randn(rng, size_t(m) * in);
  const glm::plan::KeyValues targs = {
      {"format", "mxfp8"}, {"scale", "none"}, {"bm", "64"}, {"threads", "128"}};
  auto run = [&](const int32_t *window) {
    std::vector<float> y(size_t(m) * out, -7.0f);
    runTwin(launch("gemm_dense", targs, 1, 3, 128,
                   {P(x.data()), P(w.data()), P(scale.data()), P(y.data()),
                    I(m), I(in), I(out), I(out), I(0), P(window)}));
    return y;
  };
  const std::vector<float> all = run(nullptr);
  const int32_t last[2] = {149, 149}, edge[2] = {63, 64}, none[2] = {1, 0};
  for (const int32_t *win : {last, edge, none}) {
    const std::vector<float> y = run(win);
    for (int r = 0; r < m; ++r) {
      const int b0 = r / bm * bm;
      const bool in = win[0] <= win[1] && b0 <= win[1] && b0 + bm > win[0];
      for (int o = 0; o < out; ++o)
        ASSERT_EQ(y[size_t(r) * out + o],
                  in ? all[size_t(r) * out + o] : -7.0f)
            << "window {" << win[0] << ", " << win[1] << "} row " << r;
    }
  }
  EXPECT_NE(all[0], -7.0f);
}

TEST(DenseGemvF32Twin, Float64SumsBothOutputs) {
  std::mt19937 rng(17);
  const int in = 1000, out = 37;
  const std::vector<float> x = randn(rng, in), w = randn(rng, size_t(out) * in);
  std::vector<double> ref(out, 0.0);
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i)
      ref[o] += double(w[size_t(o) * in + i]) * x[i];
  std::vector<float> y(out, NAN);
  std::vector<double> y64(out, NAN);
  const glm::plan::KeyValues t32 = {{"out", "f32"}, {"threads", "128"}};
  const glm::plan::KeyValues t64 = {{"out", "f64"}, {"threads", "128"}};
  runTwin(launch("dense_gemv_f32", t32, (out + 3) / 4, 1, 128,
                 {P(x.data()), P(w.data()), P(y.data()), I(in), I(out)}));
  runTwin(launch("dense_gemv_f32", t64, (out + 3) / 4, 1, 128,
                 {P(x.data()), P(w.data()), P(y64.data()), I(in), I(out)}));
  for (int o = 0; o < out; ++o) {
    EXPECT_EQ(y[o], float(y64[o]));
    EXPECT_NEAR(y64[o], ref[o], 1e-12 * (1 + std::fabs(ref[o])));
  }
}

} // namespace
