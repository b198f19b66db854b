// mhc_post.cuh - the post side of one mHC site (GLM-5.3-Flash): the new
// streams X'[i] = post_i·y + Σ_j comb[j·S + i]·X[j] after the sublayer
// output y, and the partial sums of X'² the next site's mhc_mix reads (so
// the next mix needs no pass of its own over the streams).
//
// Launch: grid (G, B), block THREADS (a multiple of 32); template S.
// Block x of row b = blockIdx.y owns columns c in [x·cw, min(d, (x+1)·cw)),
// cw = ceil(d / G); thread t takes c = x·cw + t, + THREADS, ..
//   y       [B, ys] fp32   the sublayer output (row stride ys >= d)
//   X       [B, S, d] fp32 the streams before the site, or null: no
//           mixing term (X' = post_i·y; with post = 1 from a constant coef
//           row this broadcasts the embedding into the S streams)
//   coef    [B, (2+S)·S] fp32  mhc_mix's [pre | post | comb]
//   Xout    [B, S, d] fp32 out; may be X itself (in place: each thread
//           reads the S values of its column before writing them), must
//           not overlap it otherwise
//   ssParts [B, G] fp64 or null: out, block x's Σ X'² (thread t adds
//           (double)(x'·x') over its columns in order, streams in order
//           within a column, then hx::blockSumFixedD); mhc_mix takes them
//           with nParts = G
//   d
// Arithmetic fp32 in the order written above (acc = post_i·y, then + each
// comb·X in j order), no contraction (--fmad=false).
#pragma once

#include "helper_common.cuh"

#define GLM_MHC_POST_PARAMS                                                    \
  const float *y, int ys, const float *X, const float *coef, float *Xout,      \
      double *ssParts, int d
#define GLM_MHC_POST_ARGS y, ys, X, coef, Xout, ssParts, d

namespace glm {

template <int S, int THREADS>
__device__ __forceinline__ void mhcPost(GLM_MHC_POST_PARAMS) {
  static_assert(S >= 1 && S <= 8, "S: 1..8 streams");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int M = (2 + S) * S;
  __shared__ float co[M]; // (M) post at S.., comb at 2S..
  const int b = blockIdx.y, t = threadIdx.x;
  for (int i = t; i < M; i += THREADS)
    co[i] = coef[(long long)b * M + i];
  __syncthreads();
  const long long rowOff = (long long)b * S * d;
  const int cw = (d + gridDim.x - 1) / gridDim.x;
  const int c0 = blockIdx.x * cw, c1 = min(d, c0 + cw);
  double part = 0;
  for (int c = c0 + t; c < c1; c += THREADS) {
    float xv[S]; // (S) column c of every stream
#pragma unroll
    for (int j = 0; j < S; ++j)
      xv[j] = X ? X[rowOff + (long long)j * d + c] : 0.0f;
    const float yc = y[(long long)b * ys + c];
#pragma unroll
    for (int i = 0; i < S; ++i) {
      float acc = co[S + i] * yc;
      if (X) {
#pragma unroll
        for (int j = 0; j < S; ++j)
          acc = acc + co[2 * S + j * S + i] * xv[j];
      }
      Xout[rowOff + (long long)i * d + c] = acc;
      part += (double)(acc * acc);
    }
  }
  if (ssParts) {
    const double ss = hx::blockSumFixedD(part);
    if (t == 0)
      ssParts[(long long)b * gridDim.x + blockIdx.x] = ss;
  }
}

} // namespace glm
