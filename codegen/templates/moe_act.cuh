// moe_act.cuh - MoE prefill, step 3: the SwiGLU activation of every sorted
// entry and half, between the gate/up and the down GEMMs (moe_group.cuh
// gives the whole chain).
//
// Per position i (q = order[i] >= 0, expert e) and half h, one warp, the
// formula and operation order of moe_trellis's stage-0 tail:
//   v_p = H128(Zgu[i][p*inter + 128h ..]) (hadamard128Warp),
//   gu_p[j] = v_p[j] * kInvSqrt128 * gu_svh[(p*Etot + e)*inter + 128h + j]
//   clampSwiglu(g, u, swiglu_limit)
//   a[j] = g / (1 + exp(-g)) * u * down_suh[e*inter + 128h + j]
//   act[i][128h + j] = fp16(H128(a)[j] * kInvSqrt128)
// exp is flash_math.cuh's expF (IEEE-exact operations, within 2 ulp of
// e^x) instead of moe_trellis's expf, so that the CPU twin (built from the
// same operations, --fmad=false here) gives the same bits. A half whose
// gate tile is null (another rank's) gets act = 0. The entry's zd row
// (f32 [hidden]) is zeroed by the entry's threads: the down GEMMs then
// accumulate into it. Positions with order[i] < 0 are not written.
//
// ---------------------------------------------------------------- ABI ----
// Template: moeAct<THREADS>. Grid (N, ceil(H*32 / THREADS)), H = inter/128
// (<= 16): warp w of block (i, y) takes half y*THREADS/32 + w.
// Parameters (GLM_MOE_ACT_PARAMS, in order):
//   Zgu         f32 [N][2*inter] (gate/up GEMM output: gate halves, then up)
//   expert_ids  int [T][topk]
//   order       int [N] (moe_group)
//   tiles       [(e*3 + p)*16 + h] expert tile table (only tested for null)
//   gu_svh      f32 [(p*Etot + e)*inter + 128h + j]; null = 1
//   down_suh    f32 [e*inter + 128h + j]; null = 1
//   act         f16 [N][inter] out
//   zd          f32 [N][hidden] out (zeros)
//   N, topk, E, S, inter, hidden   inter % 128 == 0, hidden % 4 == 0
//   swiglu_limit  GLM-5.3-Flash's clamp (0 = none)
// -------------------------------------------------------------------------
#pragma once

#include "flash_math.cuh"
#include "glm_common.cuh"
#include "moe_entries.cuh"

#define GLM_MOE_ACT_PARAMS                                                     \
  const float *__restrict__ Zgu, const int *__restrict__ expert_ids,           \
      const int *__restrict__ order,                                           \
      const unsigned char *const *__restrict__ tiles,                          \
      const float *__restrict__ gu_svh, const float *__restrict__ down_suh,    \
      __half *__restrict__ act, float *__restrict__ zd, int N, int topk,       \
      int E, int S, int inter, int hidden, float swiglu_limit
#define GLM_MOE_ACT_ARGS                                                       \
  Zgu, expert_ids, order, tiles, gu_svh, down_suh, act, zd, N, topk, E, S,     \
      inter, hidden, swiglu_limit

namespace glm {

template <int THREADS>
__device__ __forceinline__ void moeAct(GLM_MOE_ACT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x;
  if (i >= N)
    return;
  const int q = order[i];
  if (q < 0 || q >= N)
    return;
  const int U = topk + S, eTot = E + S;
  const int e = moeEntryExpert(expert_ids, q, U, topk, E);
  if (e < 0)
    return;
  // zd row i = 0, by all of the entry's threads.
  {
    float4 *z = reinterpret_cast<float4 *>(zd + (long long)i * hidden);
    const int nt = gridDim.y * THREADS;
    for (int c = blockIdx.y * THREADS + threadIdx.x; c < hidden / 4; c += nt)
      z[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const int lane = threadIdx.x & 31;
  const int h = blockIdx.y * (THREADS / 32) + (threadIdx.x >> 5);
  if (h >= inter / 128 || h >= 16)
    return; // warp-uniform
  const long long col = 128 * h + 4 * lane;
  __half2 *dst = reinterpret_cast<__half2 *>(act + (long long)i * inter + col);
  if (!tiles[(e * 3 + 0) * 16 + h]) { // not on this rank
    dst[0] = dst[1] = __float2half2_rn(0.0f);
    return;
  }
  float gu[2][4];
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const float4 z4 = *reinterpret_cast<const float4 *>(
        Zgu + (long long)i * (2 * inter) + p * inter + col);
    float v[4] = {z4.x, z4.y, z4.z, z4.w};
    hadamard128Warp(v, lane);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      gu[p][t] =
          v[t] * kInvSqrt128 *
          (gu_svh ? gu_svh[(long long)(p * eTot + e) * inter + col + t] : 1.0f);
  }
  float a[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    float gg = gu[0][t], uu = gu[1][t];
    clampSwiglu(gg, uu, swiglu_limit);
    a[t] = gg / (1.0f + fm::expF(-gg)) * uu *
           (down_suh ? down_suh[(long long)e * inter + col + t] : 1.0f);
  }
  hadamard128Warp(a, lane);
  dst[0] = __floats2half2_rn(a[0] * kInvSqrt128, a[1] * kInvSqrt128);
  dst[1] = __floats2half2_rn(a[2] * kInvSqrt128, a[3] * kInvSqrt128);
}

} // namespace glm
