// rms_norm.cuh - y = w * x / sqrt(mean(x^2) + eps), one block per row.
//
// x, y fp32 [rows, n] (y may alias x); w of storage type WT (norm weights
// are stored BF16/F16/F32). `add` (optional, fp32 [rows, n]) is added to x
// first and the sum written back to it: the fused residual update.
#pragma once

#include "glm_common.cuh"

#define GLM_RMS_NORM_PARAMS                                                    \
  float *__restrict__ x, float *add, const void *__restrict__ w, float *y,     \
      int rows, int n, int x_stride, float eps
#define GLM_RMS_NORM_ARGS x, add, w, y, rows, n, x_stride, eps

namespace glm {

template <int WT, int THREADS>
__device__ __forceinline__ void rmsNorm(GLM_RMS_NORM_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  typedef typename StorageOf<WT>::type W;
  __shared__ float red[32];
  const int r = blockIdx.x;
  if (r >= rows)
    return;
  float *xr = x + (long long)r * x_stride;
  const float *ar = add ? add + (long long)r * n : nullptr;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    float v = xr[i];
    if (ar) {
      v += ar[i];
      xr[i] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(blockSum<THREADS>(ss, red) / float(n) + eps);
  const W *wp = static_cast<const W *>(w);
  float *yr = y + (long long)r * n;
  for (int i = threadIdx.x; i < n; i += THREADS)
    yr[i] = xr[i] * inv * toFloat<W>(wp[i]);
}

} // namespace glm
