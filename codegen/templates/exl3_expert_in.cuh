// exl3_expert_in.cuh - EXL3 experts (expert_gemv_trellis path):
// xh[p][b][k][i] = x[b][i] * suh[p][ids[b*K + k]][i] (gate p = 0, up p = 1;
// the Hadamard follows). Unselected slots (id < 0) are zero.
#pragma once

#define GLM_EXL3_EXPERT_IN_PARAMS                                              \
  const float *x, const float *suh, const int *ids, float *xh, int d, int E,   \
      int B
#define GLM_EXL3_EXPERT_IN_ARGS x, suh, ids, xh, d, E, B

namespace glm {

/// Grid (ceil(d/THREADS), K, 2B).
template <int THREADS>
__device__ __forceinline__ void exl3ExpertIn(GLM_EXL3_EXPERT_IN_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x * THREADS + threadIdx.x, k = blockIdx.y,
            K = gridDim.y;
  const int b = blockIdx.z % B, p = blockIdx.z / B;
  if (i >= d)
    return;
  const int e = ids[b * K + k];
  const float s = e >= 0 ? suh[((long long)p * E + e) * d + i] : 0.0f;
  xh[(((long long)p * B + b) * K + k) * d + i] = x[(long long)b * d + i] * s;
}

} // namespace glm
