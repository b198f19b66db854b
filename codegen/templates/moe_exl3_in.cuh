// moe_exl3_in.cuh - moe_trellis EXL3 inputs: xh[b][k][p][i] = x[b][i] *
// suh[p][e][i] with e = ids[b*topk + k] for the routed slots k < topk and
// nRouted + k - topk for the shared ones (the Hadamard follows).
#pragma once

#define GLM_MOE_EXL3_IN_PARAMS                                                 \
  const float *x, const float *suh, const int *ids, float *xh, int d,          \
      int eTot, int nRouted, int topk, int B
#define GLM_MOE_EXL3_IN_ARGS x, suh, ids, xh, d, eTot, nRouted, topk, B

namespace glm {

/// Grid (ceil(d/THREADS), slots, 2B).
template <int THREADS>
__device__ __forceinline__ void moeExl3In(GLM_MOE_EXL3_IN_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x * THREADS + threadIdx.x, k = blockIdx.y,
            slots = gridDim.y;
  const int b = blockIdx.z % B, p = blockIdx.z / B;
  if (i >= d)
    return;
  const int e = k < topk ? ids[b * topk + k] : nRouted + (k - topk);
  const float s = e >= 0 ? suh[((long long)p * eTot + e) * d + i] : 0.0f;
  xh[(((long long)b * slots + k) * 2 + p) * d + i] =
      x[(long long)b * d + i] * s;
}

} // namespace glm
