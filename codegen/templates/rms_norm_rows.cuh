// rms_norm_rows.cuh - y = w * x / sqrt(mean(x^2) + eps) per row, fp64 sum in
// a fixed order, G blocks per row; the row body is shared with add_rms_norm.
//
// Grid (G, B), THREADS a multiple of 32: every block sums the whole row
// (thread t: x[t + k*THREADS] for k = 0, 1, .. in order, then
// hx::blockSumFixedD - the same bits in every block, so no second pass) and
// writes the elements t + k*THREADS with k % G == blockIdx.x. A single block
// is latency bound (~10 us per 6144-wide row on the H200); G blocks cut each
// thread's chain to K = ceil(n/THREADS) loads, all issued before any
// arithmetic. y may alias x only with G == 1 (blocks read the whole row).
#pragma once

#include "helper_common.cuh"

#define GLM_RMS_NORM_ROWS_PARAMS                                               \
  const float *x, const float *w, float *y, int n, double eps, int xs, int ys
#define GLM_RMS_NORM_ROWS_ARGS x, w, y, n, eps, xs, ys

namespace glm {
namespace hx {

/// Values per thread kept in registers (rows up to 8 * THREADS).
constexpr int kRmsPer = 8;

/// One row. With `dr`, the row is xr + dr (one float add per element) and
/// each block also writes its elements of that sum to xo; xo must not
/// alias xr then (every block reads the whole row).
__device__ __forceinline__ void rmsNormRow(const float *xr, const float *dr,
                                           float *xo, const float *w, float *yr,
                                           int n, double eps) {
  const int t = threadIdx.x, nt = blockDim.x;
  const int G = gridDim.x, g = blockIdx.x;
  const int K = (n + nt - 1) / nt;
  if (K <= kRmsPer) {
    // Bit k: this block writes element t + k*nt (k % G == g, no division).
    unsigned own = 0;
    for (int k = g; k < K; k += G)
      own |= 1u << k;
    float xv[kRmsPer], wv[kRmsPer]; // (kRmsPer) this thread's elements
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k) {
      const int i = t + k * nt;
      const bool in = k < K && i < n;
      xv[k] = in ? (dr ? xr[i] + dr[i] : xr[i]) : 0.0f;
      wv[k] = in && ((own >> k) & 1u) ? w[i] : 0.0f;
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k)
      ss += (double)xv[k] * (double)xv[k];
    const double inv = 1.0 / sqrt(blockSumFixedD(ss) / (double)n + eps);
#pragma unroll
    for (int k = 0; k < kRmsPer; ++k) {
      const int i = t + k * nt;
      if (i < n && ((own >> k) & 1u)) {
        yr[i] = (float)((double)wv[k] * ((double)xv[k] * inv));
        if (dr)
          xo[i] = xv[k];
      }
    }
    return;
  }
  double ss = 0;
  for (int i = t; i < n; i += nt) {
    const float v = dr ? xr[i] + dr[i] : xr[i];
    ss += (double)v * (double)v;
  }
  const double inv = 1.0 / sqrt(blockSumFixedD(ss) / (double)n + eps);
  for (int i = t + g * nt; i < n; i += G * nt) {
    const float v = dr ? xr[i] + dr[i] : xr[i];
    yr[i] = (float)((double)w[i] * ((double)v * inv));
    if (dr)
      xo[i] = v;
  }
}

} // namespace hx

/// Rows b = blockIdx.y of x (stride xs) to y (stride ys).
template <int THREADS>
__device__ __forceinline__ void rmsNormRows(GLM_RMS_NORM_ROWS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int b = blockIdx.y;
  hx::rmsNormRow(x + (long long)b * xs, nullptr, nullptr, w,
                 y + (long long)b * ys, n, eps);
}

} // namespace glm
