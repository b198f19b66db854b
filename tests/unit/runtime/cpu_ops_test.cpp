//===- cpu_ops_test.cpp - the cpu executor's pieces ------------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/ops.h"
#include "runtime/gen/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <map>

using namespace glm::rt;
using namespace glm::rt::cpu;

TEST(CpuOps, RopeInterleaveMatchesComplexRotation) {
  const int64_t dim = 8;
  const double theta = 8000000.0;
  float x[dim] = {0.3f, -1.2f, 0.7f, 2.0f, -0.5f, 0.25f, 1.5f, -0.75f};
  for (int64_t pos : {0, 1, 7, 1000}) {
    float y[dim];
    std::copy(x, x + dim, y);
    ropeInterleave(y, dim, pos, theta);
    for (int64_t i = 0; i < dim / 2; ++i) {
      // Pair i as a complex number times e^{i·pos·θ^(−2i/dim)}.
      std::complex<double> z(x[2 * i], x[2 * i + 1]);
      z *= std::polar(1.0, pos * std::pow(theta, -2.0 * i / dim));
      EXPECT_NEAR(y[2 * i], z.real(), 1e-6) << pos << " " << i;
      EXPECT_NEAR(y[2 * i + 1], z.imag(), 1e-6) << pos << " " << i;
    }
  }
}

TEST(CpuOps, RopeDotProductDependsOnlyOnDistance) {
  const int64_t dim = 8;
  float q[dim] = {1, 2, 3, 4, 5, 6, 7, 8}, k[dim] = {-1, 0.5, 2, -3, 1, 1, 0, 2};
  auto rel = [&](int64_t a, int64_t b) {
    float qq[dim], kk[dim];
    std::copy(q, q + dim, qq);
    std::copy(k, k + dim, kk);
    ropeInterleave(qq, dim, a, 10000.0);
    ropeInterleave(kk, dim, b, 10000.0);
    return dot(qq, kk, dim);
  };
  EXPECT_NEAR(rel(10, 7), rel(5, 2), 1e-5);
  EXPECT_NEAR(rel(3, 3), dot(q, k, dim), 1e-5);
}

TEST(CpuOps, RouterSelectsWithBiasButWeighsWithout) {
  // Expert 0 has the largest score; the bias makes 2 and 3 win instead.
  std::vector<double> logits = {2.0, 1.0, 0.0, -0.5};
  float bias[4] = {0.0f, 0.0f, 0.6f, 0.7f};
  RouterChoice rc = routeExperts(logits, bias, 2, true, 2.5);
  ASSERT_EQ(rc.experts, (std::vector<int64_t>{2, 3}));
  double s2 = 1 / (1 + std::exp(-0.0)), s3 = 1 / (1 + std::exp(0.5));
  EXPECT_NEAR(rc.weights[0], s2 / (s2 + s3) * 2.5, 1e-12);
  EXPECT_NEAR(rc.weights[1], s3 / (s2 + s3) * 2.5, 1e-12);
  // Without bias the top two are 0 and 1; without normalisation weights are
  // the scaled sigmoids.
  RouterChoice plain = routeExperts(logits, nullptr, 2, false, 1.0);
  ASSERT_EQ(plain.experts, (std::vector<int64_t>{0, 1}));
  EXPECT_NEAR(plain.weights[0], 1 / (1 + std::exp(-2.0)), 1e-12);
}

TEST(CpuOps, TopkBreaksTiesTowardLowerIndex) {
  std::vector<double> v = {1.0, 3.0, 2.0, 3.0, 2.0, 0.0};
  EXPECT_EQ(topkIndices(v, 3), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(topkIndices(v, 10).size(), 6u);
  std::vector<double> zeros(5, 0.0);
  EXPECT_EQ(topkIndices(zeros, 2), (std::vector<int64_t>{0, 1}));
  float f[4] = {1, 5, 5, 2};
  EXPECT_EQ(argmax(f, 4), 1);
}

TEST(CpuOps, SoftmaxIsStableAndNormalised) {
  std::vector<double> v = {1000.0, 1001.0, 999.0};
  softmax(v);
  EXPECT_NEAR(v[0] + v[1] + v[2], 1.0, 1e-15);
  EXPECT_NEAR(v[1] / v[0], std::exp(1.0), 1e-12);
}

TEST(CpuOps, NormsMatchFormulas) {
  float x[4] = {1, -2, 3, 0.5f}, w[4] = {1, 0.5f, 2, 1}, b[4] = {0, 1, 0, -1};
  float y[4];
  rmsNorm(x, w, y, 4, 1e-5);
  double ms = (1 + 4 + 9 + 0.25) / 4;
  EXPECT_NEAR(y[2], 2 * 3 / std::sqrt(ms + 1e-5), 1e-6);
  layerNorm(x, w, b, y, 4, 1e-6);
  double mean = 2.5 / 4, var = 0;
  for (float v : x)
    var += (v - mean) * (v - mean);
  var /= 4;
  EXPECT_NEAR(y[1], (-2 - mean) / std::sqrt(var + 1e-6) * 0.5 + 1, 1e-6);
}

TEST(CpuSampler, SeededSamplingIsDeterministic) {
  std::vector<float> logits = {0.1f, 1.0f, 0.5f, 2.0f, -1.0f, 0.0f};
  SamplingParams p;
  p.greedy = false;
  p.temperature = 1.0;
  p.topP = 1.0;
  p.seed = 42;
  auto draw = [&](SamplingParams q) {
    Sampler s(q);
    std::vector<int64_t> out;
    for (int i = 0; i < 64; ++i)
      out.push_back(s.sample(logits.data(), logits.size()));
    return out;
  };
  EXPECT_EQ(draw(p), draw(p));
  SamplingParams p2 = p;
  p2.seed = 43;
  EXPECT_NE(draw(p), draw(p2));
  // Known first values pin the PRNG across platforms.
  Xoshiro256 rng(0);
  EXPECT_EQ(rng.next(), 0x99EC5F36CB75F2B4ULL);
}

TEST(CpuSampler, FrequenciesFollowTemperatureAndTopP) {
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(5.0f), -30.0f};
  SamplingParams p;
  p.greedy = false;
  p.seed = 7;
  Sampler s(p);
  std::map<int64_t, int> n;
  for (int i = 0; i < 40000; ++i)
    ++n[s.sample(logits.data(), 4)];
  EXPECT_NEAR(n[2] / 40000.0, 5.0 / 8, 0.01);
  EXPECT_NEAR(n[1] / 40000.0, 2.0 / 8, 0.01);
  // top-p 0.6 keeps only token 2 (mass 0.625).
  p.topP = 0.6;
  Sampler s2(p);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(s2.sample(logits.data(), 4), 2);
  // Greedy and temperature 0 take the argmax.
  SamplingParams g;
  Sampler s3(g);
  EXPECT_EQ(s3.sample(logits.data(), 4), 2);
  p.topP = 1.0;
  p.temperature = 0;
  Sampler s4(p);
  EXPECT_EQ(s4.sample(logits.data(), 4), 2);
  SamplingParams bad;
  bad.greedy = false;
  bad.topP = 1.5;
  EXPECT_THROW(Sampler s5(bad), glm::rt::Error);
}
