// mla_softmax.cuh - split decode attention, launch 2 of 3 (mla_split_layout.cuh):
// a block per (head heads[blockIdx.x], row b = blockIdx.y) turns the row's
// n scores p[0, n) into fp64-exp weights over their maximum, written over
// the scores as fp32, and writes inv[b][h] = float(1 / sum) with the sum
// taken per thread over j = t, t + THREADS, .. then by blockSumFixedD:
// mla_core's softmax, its bits at the same thread count.
#pragma once

#include "helper_common.cuh"

#define GLM_MLA_SOFTMAX_PARAMS                                                 \
  float *pAll, const int *nselp, int maxCtx, const int *heads, int H,         \
      float *inv
#define GLM_MLA_SOFTMAX_ARGS pAll, nselp, maxCtx, heads, H, inv

namespace glm {

/// The fp64 softmax of the decode attention over a row's n scores p, by a
/// block of THREADS (mla_core's and mla_softmax's): p[j] := float(exp(p[j]
/// - max)) (also into tile[j] for j < tileN when TILE), each
/// thread summing its j = t, t + THREADS, .. in fp64, then
/// hx::blockSumFixedD; returns float(1 / sum). Syncs: p and tile are seen.
template <int THREADS, bool TILE>
__device__ __forceinline__ float mlaSoftmaxWeights(float *p, int n,
                                                   float *tile, int tileN) {
  __shared__ double red[32];
  const int t = threadIdx.x, lane = t & 31, w = t >> 5, nw = THREADS >> 5;
  double mx = -1e300;
  for (int j = t; j < n; j += THREADS)
    mx = fmax(mx, (double)p[j]);
  for (int o = 16; o > 0; o >>= 1)
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0)
    red[w] = mx;
  __syncthreads();
  mx = lane < nw ? red[lane] : -1e300;
  for (int o = 16; o > 0; o >>= 1)
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  double s = 0.0;
  for (int j = t; j < n; j += THREADS) {
    const double e = exp((double)p[j] - mx);
    p[j] = (float)e;
    if (TILE && j < tileN)
      tile[j] = (float)e;
    s += e;
  }
  return (float)(1.0 / hx::blockSumFixedD(s));
}

/// pAll float [B, H, maxCtx], inv float [B, H]. Grid (nHeads, B).
template <int THREADS>
__device__ __forceinline__ void mlaSoftmax(GLM_MLA_SOFTMAX_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024,
                "THREADS: warps");
  const int h = heads[blockIdx.x], b = blockIdx.y;
  float *p = pAll + ((long long)b * H + h) * maxCtx;
  const float v = mlaSoftmaxWeights<THREADS, false>(p, nselp[b], nullptr, 0);
  if (threadIdx.x == 0)
    inv[(long long)b * H + h] = v;
}

} // namespace glm
