//===- trellis_hadamard_test.cpp - block Hadamard and reconstruction ------===//
//
// hadamardRows/Cols and reconstructInPlace against explicit float64 matrices:
// H[i][j] = (−1)^popcount(i AND j) / sqrt(128), block-diagonal.
//
//===----------------------------------------------------------------------===//
#include "runtime/codec/trellis.h"

#include "runtime/base/error.h"

#include <gtest/gtest.h>

#include <bitset>
#include <cmath>
#include <random>
#include <vector>

using namespace glm::rt;
using namespace glm::rt::trellis;

namespace {
double hEntry(int64_t i, int64_t j) {
  if (i / 128 != j / 128)
    return 0; // block-diagonal
  int p = (int)std::bitset<8>((unsigned)((i % 128) & (j % 128))).count();
  return (p & 1 ? -1.0 : 1.0) / std::sqrt(128.0);
}

/// Dense float64 product a (n x k) · b (k x m).
std::vector<double> matmul(const std::vector<double> &a,
                           const std::vector<double> &b, int64_t n, int64_t k,
                           int64_t m) {
  std::vector<double> c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double x = a[i * k + p];
      if (x == 0)
        continue;
      for (int64_t j = 0; j < m; ++j)
        c[i * m + j] += x * b[p * m + j];
    }
  return c;
}

std::vector<double> hMatrix(int64_t n) {
  std::vector<double> h(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      h[i * n + j] = hEntry(i, j);
  return h;
}

double relErr(const std::vector<float> &got, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(TrellisHadamard, RowsAndColsMatchExplicitMatrix) {
  const int64_t rows = 256, cols = 384;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> m(rows * cols);
  for (auto &x : m)
    x = nd(rng);
  std::vector<double> md(m.begin(), m.end());

  std::vector<float> r = m;
  hadamardRows(r.data(), rows, cols);
  EXPECT_LT(relErr(r, matmul(hMatrix(rows), md, rows, rows, cols)), 1e-6);

  std::vector<float> c = m;
  hadamardCols(c.data(), rows, cols);
  EXPECT_LT(relErr(c, matmul(md, hMatrix(cols), rows, cols, cols)), 1e-6);

  // Self-inverse.
  hadamardCols(c.data(), rows, cols);
  EXPECT_LT(relErr(c, md), 1e-6);
}

TEST(TrellisHadamard, ReconstructMatchesFloat64Formula) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{128, 256},
                           std::pair<int64_t, int64_t>{384, 640}}) {
    std::mt19937 rng(8);
    std::normal_distribution<float> nd;
    std::vector<float> q(rows * cols), suh(rows), svh(cols);
    for (auto &x : q)
      x = nd(rng);
    for (auto &x : suh)
      x = nd(rng);
    for (auto &x : svh)
      x = nd(rng);
    // W = diag(suh) · H · Q · H · diag(svh), all in float64.
    std::vector<double> qd(q.begin(), q.end());
    std::vector<double> hq = matmul(hMatrix(rows), qd, rows, rows, cols);
    std::vector<double> w = matmul(hq, hMatrix(cols), rows, cols, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        w[i * cols + j] *= (double)suh[i] * svh[j];
    reconstructInPlace(q.data(), rows, cols, suh.data(), svh.data());
    EXPECT_LT(relErr(q, w), 1e-6) << rows << "x" << cols;
  }
}

TEST(TrellisHadamard, RejectsShapesNotMultipleOf128) {
  std::vector<float> m(64 * 128), s(128);
  EXPECT_THROW(hadamardRows(m.data(), 64, 128), Error);
  EXPECT_THROW(hadamardCols(m.data(), 128, 64), Error);
  EXPECT_THROW(reconstructInPlace(m.data(), 64, 128, s.data(), s.data()),
               Error);
}
} // namespace
