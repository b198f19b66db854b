// mhc_mix.cuh - the pre side of one mHC site (GLM-5.3-Flash): from the S
// residual streams X and m = fn·X, the site's mixing coefficients and the
// collapsed sublayer input u = Σ_j pre_j X[j].
//
// The (2+S)·S × (S·d) projection m = fn·X is NOT done here: it is a
// memory-bound GEMV of its own (gemv_any / dense_gemv over the flattened
// streams, row b of X as one S·d input, output row stride (2+S)·S).
//
// Launch: grid (G, B), block THREADS (a multiple of 32); template S
// (streams). Row b = blockIdx.y is one sequence; block x owns the columns
// c of u in [x·cw, min(d, (x+1)·cw)), cw = ceil(d / G).
//   X       [B, S, d] fp32   the streams (row-major, stream j at X + j·d)
//   mRaw    [B, (2+S)·S] fp32  fn·X of the row (unscaled by the RMS)
//   base    [(2+S)·S], scale [3]  the site's weights, stored as wdt
//           (0 f32, 1 f16, 2 bf16, 3 e4m3; hx::ldAny)
//   ssParts [B, nParts] fp64 or null: partial sums of X² that the previous
//           mhc_post launch wrote (its G blocks); ss = their sum in order
//           p = 0, 1, ..; null: every block sums X² over the row itself
//           (thread t: i = t, t+THREADS, .. of the S·d values, (double)
//           (x·x) added in order, then hx::blockSumFixedD): the first site,
//           whose streams come from the embedding.
//   u       [B, d] fp32      out: Σ_j pre_j X[j][c], fp32, j in order
//   coef    [B, (2+S)·S] fp32  out (block 0 of the row): [pre | post |
//           comb], comb[j·S + i] the weight of stream j in new stream i
//   d, rmsEps (the RMS norm's eps), hcEps, iters (hc_sinkhorn_iters)
// inv = 1/sqrt(ss/(S·d) + rmsEps) in fp64; the map itself in fp32 by
// fm::mhcCoefficients (flash_math.cuh), computed by thread 0 of every
// block (the same bits in each). No output aliases an input.
#pragma once

#include "flash_math.cuh"
#include "helper_common.cuh"

#define GLM_MHC_MIX_PARAMS                                                     \
  const float *X, const float *mRaw, const void *base, const void *scale,      \
      int wdt, const double *ssParts, int nParts, float *u, float *coef,       \
      int d, double rmsEps, double hcEps, int iters
#define GLM_MHC_MIX_ARGS                                                       \
  X, mRaw, base, scale, wdt, ssParts, nParts, u, coef, d, rmsEps, hcEps, iters

namespace glm {

template <int S, int THREADS>
__device__ __forceinline__ void mhcMix(GLM_MHC_MIX_PARAMS) {
  static_assert(S >= 1 && S <= 8, "S: 1..8 streams");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int M = (2 + S) * S;
  __shared__ float co[M]; // (M) the row's coefficients
  __shared__ double ssAll;
  const int b = blockIdx.y, t = threadIdx.x;
  const long long n = (long long)S * d;
  const float *xb = X + (long long)b * n; // (S, d)
  if (ssParts) {
    if (t == 0) {
      double ss = 0;
      for (int p = 0; p < nParts; ++p)
        ss += ssParts[(long long)b * nParts + p];
      ssAll = ss;
    }
  } else {
    double part = 0;
    for (long long i = t; i < n; i += THREADS) {
      const float v = xb[i];
      part += (double)(v * v);
    }
    const double ss = hx::blockSumFixedD(part);
    if (t == 0)
      ssAll = ss;
  }
  __syncthreads();
  if (t == 0) {
    float mr[M], bs[M], sc[3];
    for (int i = 0; i < M; ++i) {
      mr[i] = mRaw[(long long)b * M + i];
      bs[i] = hx::ldAny(base, i, wdt);
    }
    for (int i = 0; i < 3; ++i)
      sc[i] = hx::ldAny(scale, i, wdt);
    const double inv = 1.0 / fm::sqrtD(ssAll / (double)n + rmsEps);
    float out[M];
    fm::mhcCoefficients<S>(mr, inv, bs, sc, (float)hcEps, iters, out);
    for (int i = 0; i < M; ++i) {
      co[i] = out[i];
      if (blockIdx.x == 0)
        coef[(long long)b * M + i] = out[i];
    }
  }
  __syncthreads();
  const int cw = (d + gridDim.x - 1) / gridDim.x;
  const int c0 = blockIdx.x * cw, c1 = min(d, c0 + cw);
  for (int c = c0 + t; c < c1; c += THREADS) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < S; ++j)
      acc = acc + co[j] * xb[(long long)j * d + c];
    u[(long long)b * d + c] = acc;
  }
}

} // namespace glm
