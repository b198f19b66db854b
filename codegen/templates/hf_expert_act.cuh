// hf_expert_act.cuh - unquantized (HF) experts, gate/up half:
// act[(b*U + u)*I + j] = SiLU(gate_j . x_b) * (up_j . x_b) in fp64 for unit
// u of row b: expert ids[b*U + u] (or the only matrix, ownE, when ids is
// null). own[e*halves + j/128] == 0: not this rank's channel (0).
// limit > 0 (GLM-5.3-Flash's swiglu_limit) clamps gate . x to <= limit and
// up . x to [-limit, limit] before the SiLU product; 0 = no clamp.
#pragma once

#include "helper_common.cuh"

#define GLM_HF_EXPERT_ACT_PARAMS                                               \
  const void *gate, const void *up, int dt, const float *x, const int *ids,    \
      long long stride, int I, int d, const unsigned char *own, int halves,    \
      int ownE, double *act, double limit
#define GLM_HF_EXPERT_ACT_ARGS                                                 \
  gate, up, dt, x, ids, stride, I, d, own, halves, ownE, act, limit

namespace glm {

/// gate/up [experts][I][d] stored as dt (stride elements per expert); dots
/// serial over i. Grid (ceil(I/THREADS), U, B).
template <int THREADS>
__device__ __forceinline__ void hfExpertAct(GLM_HF_EXPERT_ACT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int j = blockIdx.x * THREADS + threadIdx.x, u = blockIdx.y,
            b = blockIdx.z, U = gridDim.y;
  if (j >= I)
    return;
  const int e = ids ? ids[b * U + u] : ownE;
  double r = 0;
  if (e >= 0 && (!own || own[(long long)e * halves + (j >> 7)])) {
    const long long base = (ids ? (long long)e : 0) * stride + (long long)j * d;
    const float *xb = x + (long long)b * d; // (d)
    double g = 0, v = 0;
    for (int i = 0; i < d; ++i)
      g += (double)hx::ldAny(gate, base + i, dt) * (double)xb[i];
    for (int i = 0; i < d; ++i)
      v += (double)hx::ldAny(up, base + i, dt) * (double)xb[i];
    if (limit > 0) {
      g = g < limit ? g : limit;
      v = v < -limit ? -limit : v > limit ? limit : v;
    }
    r = g / (1.0 + exp(-g)) * v;
  }
  act[((long long)b * U + u) * I + j] = r;
}

} // namespace glm
