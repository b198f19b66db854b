// route.cuh - the sigmoid router of row b: top k of sigmoid(l) + bias (ties:
// lower id), sorted by expert id, weights renormalised (fp64, ascending id)
// and scaled.
//
// Expert t is picked when fewer than k experts come before it in (score
// descending, id ascending) order: the set k rounds of "take the best
// untaken" would pick, found in one parallel pass instead of k serial warp
// argmaxes; its place among the picks is the count of picks with lower id.
#pragma once

#define GLM_ROUTE_PARAMS                                                       \
  const float *logitsAll, const float *bias, int E, int k, int normalize,      \
      double scale, int *expertsAll, float *weightsAll
#define GLM_ROUTE_ARGS                                                         \
  logitsAll, bias, E, k, normalize, scale, expertsAll, weightsAll

namespace glm {

/// Grid (1, B), a thread per expert: blockDim.x = E rounded up to 32 (<=
/// THREADS); k <= 64. Slots k >= E get id -1 and weight 0.
template <int THREADS> __device__ __forceinline__ void route(GLM_ROUTE_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  __shared__ double s[THREADS], ch[THREADS]; // (E) sigmoid, choice score
  __shared__ int pickS[64], warpPicks[32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int b = blockIdx.y;
  const float *logits = logitsAll + (long long)b * E;
  if (t < E) {
    s[t] = 1.0 / (1.0 + exp(-(double)logits[t]));
    ch[t] = s[t] + (bias ? (double)bias[t] : 0.0);
    // A NaN score (a NaN logit or bias) ranks last: unordered, it would
    // count no expert before it and be picked past k (pickS holds 64).
    if (ch[t] != ch[t])
      ch[t] = -1e300;
  }
  __syncthreads();
  const int kk0 = k;
  if (k > E)
    k = E;
  bool picked = false;
  if (t < E) {
    const double v = ch[t];
    int before = 0;
    for (int e = 0; e < E; ++e) {
      const double o = ch[e];
      before += o > v || (o == v && e < t);
    }
    picked = before < k;
  }
  const unsigned m = __ballot_sync(0xffffffffu, picked);
  if (lane == 0)
    warpPicks[warp] = __popc(m);
  __syncthreads();
  if (picked) {
    int pos = __popc(m & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w)
      pos += warpPicks[w];
    pickS[pos] = t;
  }
  __syncthreads();
  if (t != 0)
    return;
  double sum = 0; // ascending expert id, as the serial reference adds
  for (int kk = 0; kk < k; ++kk)
    sum += s[pickS[kk]];
  for (int kk = 0; kk < kk0; ++kk) {
    const bool ok = kk < k;
    const int e = ok ? pickS[kk] : 0;
    expertsAll[b * kk0 + kk] = ok ? e : -1;
    weightsAll[b * kk0 + kk] =
        ok ? (float)((normalize ? s[e] / (sum + 1e-20) : s[e]) * scale) : 0.0f;
  }
}

} // namespace glm
