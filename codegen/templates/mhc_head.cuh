// mhc_head.cuh - the mHC head (GLM-5.3-Flash): the unweighted mean of the S
// residual streams of each row, the final norm's input:
// out[b, c] = (float)((Σ_j (double)X[b, j, c]) / S), j in order (the CPU
// reference's arithmetic).
//
// Launch: grid (ceil(d / THREADS), B), block THREADS; template S.
//   X   [B, S, d] fp32  the streams
//   out [B, d] fp32
//   d
#pragma once

#define GLM_MHC_HEAD_PARAMS const float *X, float *out, int d
#define GLM_MHC_HEAD_ARGS X, out, d

namespace glm {

template <int S, int THREADS>
__device__ __forceinline__ void mhcHead(GLM_MHC_HEAD_PARAMS) {
  static_assert(S >= 1 && S <= 8, "S: 1..8 streams");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int c = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.y;
  if (c >= d)
    return;
  const float *xb = X + (long long)b * S * d;
  double acc = 0;
#pragma unroll
  for (int j = 0; j < S; ++j)
    acc += (double)xb[(long long)j * d + c];
  out[(long long)b * d + c] = (float)(acc / (double)S);
}

} // namespace glm
