//===- ops.h - scalar building blocks of the reference CPU forward --------===//
//
// The reference executor's math, one function per step of the GLM-5.3
// forward (shared/specs/glm53-architecture.md section 2). Inputs and stored
// activations are fp32; every dot product, norm and softmax accumulates in
// fp64 so that the executor is a trustworthy reference for faster backends.
// Everything here is deterministic: ties in top-k and argmax resolve to the
// lower index.
//
// Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/sampler.h"
#include <cstdint>
#include <vector>

namespace glm::rt::cpu {

/// A row-major fp32 matrix [rows, cols] (HF orientation [out, in]).
struct Matrix {
  std::vector<float> data;
  int64_t rows = 0, cols = 0;
  const float *row(int64_t r) const { return data.data() + r * cols; }
  bool empty() const { return data.empty(); }
};

/// sum_i a[i]*b[i] accumulated in double.
double dot(const float *a, const float *b, int64_t n);
double dot(const float *a, const double *b, int64_t n);

/// y[r] = W[r,:]·x for rows [rowBegin, rowBegin+count), fp64 accumulation,
/// results rounded to fp32.
void gemv(const Matrix &w, const float *x, float *y, int64_t rowBegin = 0,
          int64_t count = -1);
/// Same, results kept in fp64.
void gemvD(const Matrix &w, const float *x, double *y, int64_t rowBegin = 0,
           int64_t count = -1);

/// RMSNorm: w ⊙ x / sqrt(mean(x²) + eps) (sum in double).
void rmsNorm(const float *x, const float *w, float *y, int64_t n, double eps);
/// LayerNorm with affine weight and bias (mean/variance in double).
void layerNorm(const float *x, const float *w, const float *b, float *y,
               int64_t n, double eps);

/// Interleaved (GPT-J) RoPE on x[0..dim): pair i = (x[2i], x[2i+1]) is
/// rotated by angle pos·theta^(−2i/dim). Angles and the rotation in double.
void ropeInterleave(float *x, int64_t dim, int64_t pos, double theta);

// softmax and argmax are the sampler's (runtime/gen/sampler.h).
using glm::rt::argmax;
using glm::rt::softmax;

/// Indices of the k largest values, ordered by decreasing value; equal
/// values keep the lower index first (deterministic tie break).
std::vector<int64_t> topkIndices(const std::vector<double> &v, int64_t k);

double silu(double x);
double sigmoid(double x);

/// Router of a MoE layer: s = sigmoid(logits), choose the top k of
/// s + bias (bias for selection only), weights = s_sel (renormalised when
/// `normalize`: / (Σ s_sel + 1e-20)) · scale. Returned sorted by expert index.
struct RouterChoice {
  std::vector<int64_t> experts;
  std::vector<double> weights;
};
RouterChoice routeExperts(const std::vector<double> &logits,
                          const float *bias, int64_t k, bool normalize,
                          double scale);

} // namespace glm::rt::cpu
