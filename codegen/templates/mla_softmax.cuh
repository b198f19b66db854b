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

/// pAll float [B, H, maxCtx], inv float [B, H]. Grid (nHeads, B).
template <int THREADS>
__device__ __forceinline__ void mlaSoftmax(GLM_MLA_SOFTMAX_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024,
                "THREADS: warps");
  __shared__ double red[32];
  const int h = heads[blockIdx.x], b = blockIdx.y;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5, nw = THREADS >> 5;
  const int n = nselp[b];
  float *p = pAll + ((long long)b * H + h) * maxCtx;
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
    s += e;
  }
  const double sum = hx::blockSumFixedD(s);
  if (t == 0)
    inv[(long long)b * H + h] = (float)(1.0 / sum);
}

} // namespace glm
