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
// inv = 1/sqrt(ss/(S·d) + rmsEps) in fp64; the map itself in fp32 as
// fm::mhcCoefficients (flash_math.cuh) computes it, spread over warp 0 of
// every block (hx::mhcCoefficientsWarp: the same bits). No output aliases
// an input.
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
namespace hx {

/// fm::mhcCoefficients (flash_math.cuh) on the 32 lanes of one warp, lane
/// l < S·S owning comb entry l (row l / S, column l % S): every value is
/// the same expression, and every sum is still one lane's loop in index
/// order from 0, so the bits equal the serial map the twin runs (a lane
/// recomputes its row's exps and its row/column sums redundantly). The
/// serial map took ~14 us per site on one thread (docs/perf.md, Session 12).
template <int S>
__device__ __forceinline__ void mhcCoefficientsWarp(const float *mRaw,
                                                    double inv,
                                                    const float *base,
                                                    const float *scale,
                                                    float hcEps, int iters,
                                                    float *coef) {
  static_assert(S * S <= 32, "one lane per comb entry");
  constexpr int M = (2 + S) * S, SS = S * S;
  __shared__ float a[M], c[SS];
  const int l = threadIdx.x & 31, i = l / S, j = l % S;
  for (int k = l; k < M; k += 32)
    a[k] = float((double)mRaw[k] * inv) * scale[k < S ? 0 : k < 2 * S ? 1 : 2] +
           base[k];
  __syncwarp();
  if (l < S)
    coef[l] = fm::sigmoidF(a[l]) + hcEps;
  else if (l < 2 * S)
    coef[l] = 2.0f * fm::sigmoidF(a[l]);
  if (l < SS) { // the row softmax, + hcEps
    const float *row = a + 2 * S + i * S;
    float most = row[0];
    for (int k = 1; k < S; ++k)
      most = row[k] > most ? row[k] : most;
    float sum = 0.0f, mine = 0.0f;
    for (int k = 0; k < S; ++k) {
      const float e = fm::expF(row[k] - most);
      sum = sum + e;
      if (k == j)
        mine = e;
    }
    c[l] = mine / sum + hcEps;
  }
  __syncwarp();
  for (int it = 0; it < iters; ++it) {
    float sum = 0.0f;
    if (it > 0) { // rows: every lane reads its row before any lane writes
      if (l < SS)
        for (int k = 0; k < S; ++k)
          sum = sum + c[i * S + k];
      __syncwarp();
      if (l < SS)
        c[l] = c[l] * (1.0f / (sum + hcEps));
      __syncwarp();
      sum = 0.0f;
    }
    if (l < SS) // columns
      for (int k = 0; k < S; ++k)
        sum = sum + c[k * S + j];
    __syncwarp();
    if (l < SS)
      c[l] = c[l] * (1.0f / (sum + hcEps));
    __syncwarp();
  }
  if (l < SS)
    coef[2 * S + l] = c[l];
}

} // namespace hx

template <int S, int THREADS>
__device__ __forceinline__ void mhcMix(GLM_MHC_MIX_PARAMS) {
  static_assert(S >= 1 && S <= 4, "S: 1..4 streams (see codegen.cpp)");
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
  if (t < 32) { // warp 0: the map, one lane per coefficient
    __shared__ float mr[M], bs[M], sc[3];
    for (int i = t; i < M; i += 32) {
      mr[i] = mRaw[(long long)b * M + i];
      bs[i] = hx::ldAny(base, i, wdt);
    }
    if (t < 3)
      sc[t] = hx::ldAny(scale, t, wdt);
    __syncwarp();
    const double inv = 1.0 / fm::sqrtD(ssAll / (double)n + rmsEps);
    hx::mhcCoefficientsWarp<S>(mr, inv, bs, sc, (float)hcEps, iters, co);
    __syncwarp();
    if (blockIdx.x == 0)
      for (int i = t; i < M; i += 32)
        coef[(long long)b * M + i] = co[i];
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
