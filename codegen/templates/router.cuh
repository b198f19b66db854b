// router.cuh - MoE routing: sigmoid scores, bias-corrected top-k selection,
// renormalised and scaled weights (glm53-architecture.md §2.6).
//
// s = sigmoid(logits) in fp32; select the TOPK largest s + bias (ties: lower
// expert id); w_k = s_k / (sum_sel s + 1e-20) * scale when renorm, else
// s_k * scale. One block per row; logits come from a dense_gemv.
#pragma once

#include "glm_common.cuh"

#define GLM_ROUTER_PARAMS                                                      \
  const float *__restrict__ logits, const float *__restrict__ bias,            \
      int *__restrict__ ids, float *__restrict__ weights, int batch,           \
      int experts, float scale, int renorm
#define GLM_ROUTER_ARGS logits, bias, ids, weights, batch, experts, scale, renorm

namespace glm {

template <int MAX_EXPERTS, int TOPK, int THREADS>
__device__ __forceinline__ void router(GLM_ROUTER_PARAMS) {
  static_assert(TOPK >= 1 && TOPK <= 32, "TOPK 1..32");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  __shared__ float score[MAX_EXPERTS]; // (MAX_EXPERTS) sigmoid scores
  __shared__ float key[MAX_EXPERTS];   // score + bias, -inf once taken
  __shared__ float redV[32];
  __shared__ int redI[32];
  __shared__ int chosen[TOPK];
  const int b = blockIdx.x;
  if (b >= batch || experts > MAX_EXPERTS)
    return;
  for (int e = threadIdx.x; e < experts; e += THREADS) {
    const float s = 1.0f / (1.0f + expf(-logits[(long long)b * experts + e]));
    score[e] = s;
    key[e] = s + (bias ? bias[e] : 0.0f);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int k = 0; k < TOPK; ++k) {
    float bv = -GLM_INF;
    int bi = 0x7FFFFFFF;
    for (int e = threadIdx.x; e < experts; e += THREADS)
      if (key[e] > bv || (key[e] == bv && e < bi)) {
        bv = key[e];
        bi = e;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      redV[warp] = bv;
      redI[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < THREADS / 32; ++w)
        if (redV[w] > bv || (redV[w] == bv && redI[w] < bi)) {
          bv = redV[w];
          bi = redI[w];
        }
      if (bi >= experts) // fewer experts than TOPK, or all NaN
        bi = 0;
      chosen[k] = bi;
      key[bi] = -GLM_INF;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int k = 0; k < TOPK; ++k)
      sum += score[chosen[k]];
    const float norm = renorm ? scale / (sum + 1e-20f) : scale;
    for (int k = 0; k < TOPK; ++k) {
      ids[b * TOPK + k] = chosen[k];
      weights[b * TOPK + k] = score[chosen[k]] * norm;
    }
  }
}

} // namespace glm
