//===- ops.cpp - scalar building blocks of the reference CPU forward ------===//
#include "runtime/cpu/ops.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace glm::rt::cpu {

double dot(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += (double)a[i] * (double)b[i];
  return s;
}

double dot(const float *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += (double)a[i] * b[i];
  return s;
}

void gemv(const Matrix &w, const float *x, float *y, int64_t rowBegin,
          int64_t count) {
  if (count < 0)
    count = w.rows - rowBegin;
  for (int64_t r = 0; r < count; ++r)
    y[r] = (float)dot(w.row(rowBegin + r), x, w.cols);
}

void gemvD(const Matrix &w, const float *x, double *y, int64_t rowBegin,
           int64_t count) {
  if (count < 0)
    count = w.rows - rowBegin;
  for (int64_t r = 0; r < count; ++r)
    y[r] = dot(w.row(rowBegin + r), x, w.cols);
}

void rmsNorm(const float *x, const float *w, float *y, int64_t n,
             double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    ss += (double)x[i] * (double)x[i];
  double inv = 1.0 / std::sqrt(ss / (double)n + eps);
  for (int64_t i = 0; i < n; ++i)
    y[i] = (float)((double)w[i] * ((double)x[i] * inv));
}

void layerNorm(const float *x, const float *w, const float *b, float *y,
               int64_t n, double eps) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i)
    mean += x[i];
  mean /= (double)n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = (double)x[i] - mean;
    var += d * d;
  }
  var /= (double)n; // biased, as torch.nn.LayerNorm
  double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i)
    y[i] = (float)(((double)x[i] - mean) * inv * (double)w[i] + (double)b[i]);
}

void ropeInterleave(float *x, int64_t dim, int64_t pos, double theta) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    double invFreq = std::pow(theta, -2.0 * (double)i / (double)dim);
    double angle = (double)pos * invFreq;
    double c = std::cos(angle), s = std::sin(angle);
    double a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = (float)(a * c - b * s);
    x[2 * i + 1] = (float)(b * c + a * s);
  }
}

std::vector<int64_t> topkIndices(const std::vector<double> &v, int64_t k) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int64_t>(k, (int64_t)v.size());
  auto before = [&](int64_t a, int64_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  idx.resize(k);
  return idx;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

RouterChoice routeExperts(const std::vector<double> &logits,
                          const float *bias, int64_t k, bool normalize,
                          double scale) {
  std::vector<double> s(logits.size()), choice(logits.size());
  for (size_t e = 0; e < logits.size(); ++e) {
    s[e] = sigmoid(logits[e]);
    choice[e] = s[e] + (bias ? (double)bias[e] : 0.0);
  }
  RouterChoice rc;
  rc.experts = topkIndices(choice, k);
  std::sort(rc.experts.begin(), rc.experts.end());
  double sum = 0;
  for (int64_t e : rc.experts)
    sum += s[e];
  for (int64_t e : rc.experts)
    rc.weights.push_back((normalize ? s[e] / (sum + 1e-20) : s[e]) * scale);
  return rc;
}

} // namespace glm::rt::cpu
