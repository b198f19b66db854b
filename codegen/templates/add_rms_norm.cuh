// add_rms_norm.cuh - the residual add and the next norm in one launch:
// xout = x + delta and y = rms_norm(xout) * w per row (rows of n, stride n),
// bit for bit what x += delta followed by rms_norm_rows gives. Grid (G, B)
// as rms_norm_rows; xout must not alias x.
#pragma once

#include "rms_norm_rows.cuh"

#define GLM_ADD_RMS_NORM_PARAMS                                                \
  const float *x, const float *delta, float *xout, const float *w, float *y,   \
      int n, double eps
#define GLM_ADD_RMS_NORM_ARGS x, delta, xout, w, y, n, eps

namespace glm {

template <int THREADS>
__device__ __forceinline__ void addRmsNorm(GLM_ADD_RMS_NORM_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const long long o = (long long)blockIdx.y * n; // (n) row b
  hx::rmsNormRow(x + o, delta + o, xout + o, w, y + o, n, eps);
}

} // namespace glm
