//===- trellis_encoder_test.cpp - Viterbi tiles and matrix quantization ---===//
//
// Encoder quality on Gaussian tiles per width, decode(encode(x)) consistency,
// whole-matrix round trips per codebook and width (with and without E4M3),
// and the encoder's speed (printed, not asserted).
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace glm::rt;
using namespace glm::rt::trellis;

namespace {

std::vector<float> gaussianTiles(int n, double sd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, (float)sd);
  std::vector<float> v(256 * n);
  for (auto &x : v)
    x = nd(rng);
  return v;
}

/// Mean squared error over the tiles relative to the target variance.
double relativeMse(double k, Codebook cb, bool e4m3, int n) {
  Width w = Width::fromDouble(k);
  double sd = codebookStd(cb);
  std::vector<float> x = gaussianTiles(n, sd, 11);
  double err = 0;
  uint16_t st[256];
  for (int i = 0; i < n; ++i)
    err += viterbiTile(x.data() + 256 * i, w, cb, e4m3, st);
  return err / (256.0 * n) / (sd * sd);
}

struct Bound {
  double k, maxRel, maxRelE4m3;
};
// Measured relative MSE (24 Gaussian tiles, all three codebooks):
// K1 .275-.278, K1.5 .138, K2 .068-.069, K2.5 .034, K3 .017-.018, K3.5 .0089,
// K4 .0045-.0046, K5 .0012 (E4M3 .0014), K6 .0003 (E4M3 .0007),
// K8 .00003-.00004 (E4M3 .0007: the E4M3 grid dominates). Bounds add ~10 % margin.
// The lower bound is the Gaussian rate-distortion limit 2^-2K (minus sampling
// slack): an encoder that reports less error than that is miscounting.
const Bound kBounds[] = {
    {1, 0.30, 0.30},      {1.5, 0.152, 0.152},  {2, 0.076, 0.076},
    {2.5, 0.038, 0.038},  {3, 0.0198, 0.0198},  {3.5, 0.0099, 0.0099},
    {4, 0.0051, 0.0051},  {5, 0.00135, 0.0015}, {6, 0.00036, 0.00082},
    {8, 0.00005, 0.00080},
};

TEST(TrellisEncoder, GaussianErrorWithinBounds) {
  for (const Bound &b : kBounds)
    for (int c = 0; c < 3; ++c) {
      Codebook cb = (Codebook)c;
      if (b.k != std::floor(b.k) && cb != Codebook::Mul1)
        continue;
      for (bool e4 : {false, true}) {
        if (b.k >= 5 && c != 1) // the wide widths once, for MCG
          continue;
        double rel = relativeMse(b.k, cb, e4, 12);
        std::printf("%s K=%.1f e4m3=%d: relative MSE %.5f\n",
                    codebookName(cb), b.k, (int)e4, rel);
        EXPECT_LT(rel, e4 ? b.maxRelE4m3 : b.maxRel)
            << codebookName(cb) << " K=" << b.k << " e4m3=" << e4;
        EXPECT_GT(rel, 0.85 * std::pow(2.0, -2 * b.k))
            << codebookName(cb) << " K=" << b.k << " e4m3=" << e4;
      }
    }
}

/// The states Viterbi returns form a circular path: packing and unpacking
/// gives them back, and decodeTile reproduces exactly the reported error.
void checkConsistent(double k, Codebook cb, bool e4m3, uint32_t seed) {
  Width w = Width::fromDouble(k);
  std::vector<float> x = gaussianTiles(1, codebookStd(cb), seed);
  uint16_t st[256], back[256];
  double err = viterbiTile(x.data(), w, cb, e4m3, st);
  std::vector<uint16_t> words(w.wordsPerTile());
  packTile(st, w, words.data());
  unpackTileStates(words.data(), w, back);
  for (int t = 0; t < 256; ++t)
    ASSERT_EQ(back[t], st[t]) << "K=" << k << " t=" << t;
  float tile[256];
  decodeTile(words.data(), w, cb, e4m3, tile);
  double again = 0;
  for (int t = 0; t < 256; ++t) {
    double d = (double)tile[permRow(t) * 16 + permCol(t)] - x[t];
    again += d * d;
  }
  EXPECT_EQ(again, err) << codebookName(cb) << " K=" << k;
}

TEST(TrellisEncoder, DecodeOfEncodeIsConsistent) {
  uint32_t seed = 100;
  for (double k : {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0})
    for (int c = 0; c < 3; ++c)
      checkConsistent(k, (Codebook)c, c == 1, seed++);
  for (double k : {1.5, 2.5, 3.5})
    for (bool e4 : {false, true})
      checkConsistent(k, Codebook::Mul1, e4, seed++);
}

TEST(TrellisEncoder, EveryKernelGivesCircularPathsOfEqualQuality) {
  std::vector<float> x = gaussianTiles(4, 1.24, 21);
  for (double k : {1.5, 2.0, 3.0, 4.0, 6.0}) {
    Codebook cb = k == 1.5 ? Codebook::Mul1 : Codebook::Mcg;
    double ref = -1;
    for (const char *kern : {"portable", "avx2", "avx512"}) {
      if (!setViterbiKernel(kern))
        continue;
      double err = 0;
      for (int i = 0; i < 4; ++i) {
        uint16_t st[256], back[256];
        err += viterbiTile(x.data() + 256 * i, Width::fromDouble(k), cb, false,
                           st);
        std::vector<uint16_t> words(Width::fromDouble(k).wordsPerTile());
        packTile(st, Width::fromDouble(k), words.data());
        unpackTileStates(words.data(), Width::fromDouble(k), back);
        ASSERT_TRUE(std::equal(st, st + 256, back)) << kern << " K=" << k;
      }
      if (ref < 0)
        ref = err;
      // Kernels may break near-ties differently (FMA rounding, int16
      // costs), never by more than a fraction of a percent of the error.
      EXPECT_NEAR(err, ref, 0.01 * ref) << kern << " K=" << k;
    }
    setViterbiKernel("auto");
  }
}

TEST(TrellisEncoder, HalfWidthsRejectedOutsideMul1) {
  std::vector<float> x = gaussianTiles(1, 1.0, 5);
  uint16_t st[256];
  EXPECT_THROW(viterbiTile(x.data(), Width::fromDouble(2.5), Codebook::Mcg,
                           false, st),
               Error);
  EncodeOptions opt;
  opt.width = Width::fromDouble(3.5);
  opt.codebook = Codebook::ThreeInst;
  std::vector<float> m(128 * 128, 1.0f);
  EXPECT_THROW(quantizeMatrix(m.data(), 128, 128, opt), Error);
  x[7] = NAN;
  EXPECT_THROW(
      viterbiTile(x.data(), Width::bits(2), Codebook::Mcg, false, st), Error);
}

/// A matrix with uneven row and column scales, as real weights have.
std::vector<float> testMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.5f, 2.0f);
  std::vector<float> rs(rows), cs(cols), m(rows * cols);
  for (auto &x : rs)
    x = ud(rng);
  for (auto &x : cs)
    x = ud(rng);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      m[i * cols + j] = 0.02f * rs[i] * cs[j] * nd(rng);
  return m;
}

std::vector<float> dequant(const Quantized &qz, int64_t rows, int64_t cols,
                           const EncodeOptions &opt) {
  std::vector<float> q(rows * cols);
  decodeMatrix(qz.tileWords.data(), rows, cols, opt.width, opt.codebook,
               opt.e4m3, opt.order, q.data());
  reconstructInPlace(q.data(), rows, cols, qz.suh.data(), qz.svh.data());
  return q;
}

double relSqErr(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return num / den;
}

TEST(TrellisEncoder, QuantizeMatrixRoundTrip) {
  const int64_t rows = 128, cols = 256;
  std::vector<float> w = testMatrix(rows, cols, 31);
  for (double k : {2.0, 2.5, 3.0, 4.0})
    for (int c = 0; c < 3; ++c)
      for (bool e4 : {false, true}) {
        if (k == 2.5 && c != 2)
          continue;
        EncodeOptions opt;
        opt.width = Width::fromDouble(k);
        opt.codebook = (Codebook)c;
        opt.e4m3 = e4;
        opt.seed = 9;
        Quantized qz = quantizeMatrix(w.data(), rows, cols, opt);
        ASSERT_EQ((int64_t)qz.tileWords.size(),
                  rows / 16 * cols / 16 * opt.width.wordsPerTile());
        ASSERT_EQ((int64_t)qz.suh.size(), rows);
        ASSERT_EQ((int64_t)qz.svh.size(), cols);
        for (float s : qz.suh)
          ASSERT_EQ(s, roundToHalf(s));
        for (float s : qz.svh)
          ASSERT_EQ(s, roundToHalf(s));
        double rel = relSqErr(dequant(qz, rows, cols, opt), w);
        double bound = 0;
        for (const Bound &b : kBounds)
          if (b.k == k)
            bound = 1.15 * b.maxRel; // the Hadamard makes Q near-Gaussian
        EXPECT_LT(rel, bound) << codebookName(opt.codebook) << " K=" << k
                              << " e4m3=" << e4;
        EXPECT_GT(rel, 0.8 * std::pow(2.0, -2 * k));
      }
}

TEST(TrellisEncoder, TileOrdersAndThreadsGiveTheSameMatrix) {
  const int64_t rows = 128, cols = 256;
  std::vector<float> w = testMatrix(rows, cols, 32);
  EncodeOptions opt;
  opt.width = Width::bits(3);
  opt.seed = 4;
  opt.threads = 1;
  Quantized a = quantizeMatrix(w.data(), rows, cols, opt);
  opt.threads = 2;
  Quantized b = quantizeMatrix(w.data(), rows, cols, opt);
  EXPECT_EQ(a.tileWords, b.tileWords);
  opt.order = TileOrder::InMajor128;
  Quantized c = quantizeMatrix(w.data(), rows, cols, opt);
  EXPECT_EQ(a.suh, c.suh);
  EXPECT_EQ(a.svh, c.svh);
  EXPECT_NE(a.tileWords, c.tileWords); // the tiles moved...
  EncodeOptions optA = opt;
  optA.order = TileOrder::RowMajor;
  EXPECT_EQ(dequant(a, rows, cols, optA), dequant(c, rows, cols, opt));
}

TEST(TrellisEncoder, GivenSignsAreUsed) {
  const int64_t rows = 128, cols = 128;
  std::vector<float> w = testMatrix(rows, cols, 33);
  EncodeOptions opt;
  opt.width = Width::bits(4);
  std::mt19937 rng(3);
  for (int i = 0; i < rows; ++i)
    opt.inSigns.push_back(rng() & 1 ? 1.0f : -1.0f);
  for (int i = 0; i < cols; ++i)
    opt.outSigns.push_back(rng() & 1 ? 1.0f : -1.0f);
  Quantized qz = quantizeMatrix(w.data(), rows, cols, opt);
  float scale = std::fabs(qz.suh[0]);
  EXPECT_GT(scale, 0.0f);
  for (int i = 0; i < rows; ++i)
    EXPECT_EQ(qz.suh[i], opt.inSigns[i] * scale);
  for (int i = 0; i < cols; ++i)
    EXPECT_EQ(qz.svh[i], opt.outSigns[i]);
  EXPECT_LT(relSqErr(dequant(qz, rows, cols, opt), w), 0.006);
  opt.inSigns.pop_back();
  EXPECT_THROW(quantizeMatrix(w.data(), rows, cols, opt), Error);
}

TEST(TrellisEncoder, BadMatricesAreRejectedAndZeroStaysZero) {
  EncodeOptions opt;
  opt.width = Width::bits(2);
  std::vector<float> w(128 * 256, 0.0f);
  Quantized qz = quantizeMatrix(w.data(), 128, 256, opt);
  for (float x : dequant(qz, 128, 256, opt))
    ASSERT_EQ(x, 0.0f);
  EXPECT_THROW(quantizeMatrix(w.data(), 128, 200, opt), Error);
  EXPECT_THROW(quantizeMatrix(w.data(), 64, 256, opt), Error);
  w[5] = INFINITY;
  EXPECT_THROW(quantizeMatrix(w.data(), 128, 256, opt), Error);
}

double threadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

TEST(TrellisEncoder, MeasureSpeed) {
  std::vector<float> x = gaussianTiles(128, 1.24, 12);
  uint16_t st[256];
  for (const char *kern : {"portable", "avx2", "avx512"}) {
    if (!setViterbiKernel(kern))
      continue;
    for (int k : {2, 3, 4}) {
      int n = std::string(kern) == "portable" ? 4 : 64;
      // Warm up: tables and per-thread buffers are built on first use.
      viterbiTile(x.data(), Width::bits(k), Codebook::Mcg, false, st);
      // Thread CPU time: the test machine is often shared.
      double t0 = threadSeconds();
      for (int i = 0; i < n; ++i)
        viterbiTile(x.data() + 256 * i, Width::bits(k), Codebook::Mcg, false,
                    st);
      double s = threadSeconds() - t0;
      std::printf("kernel=%s K=%d: %.0f tiles per CPU second\n", kern, k,
                  n / s);
    }
  }
  setViterbiKernel("auto");
}

} // namespace
