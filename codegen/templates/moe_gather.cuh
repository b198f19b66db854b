// moe_gather.cuh - MoE prefill, step 2: the gate/up GEMM input of every
// sorted entry (moe_group.cuh gives the whole chain).
//
// X[i][p][c] = fp16(xh[t][c] * gu_su_block[(p*Etot + e)*(hidden/128) +
// c/128]) for p = 0 (gate), 1 (up), where q = order[i] >= 0 is the entry at
// sorted position i, t = q / U its row and e its expert (moe_entries.cuh).
// One fp32 product, one round to nearest even: the CPU twin gives the same
// bits. Positions with order[i] < 0 are not written.
//
// ---------------------------------------------------------------- ABI ----
// Template: moeGather<THREADS>. Grid (N, ceil(hidden / (2*THREADS))): each
// thread converts 4 consecutive elements of one entry's 2*hidden.
// Parameters (GLM_MOE_GATHER_PARAMS, in order):
//   xh          f32 [T][hidden], the shared rotated input H(x*signs.in)/sqrt128
//   expert_ids  int [T][topk]
//   order       int [N] (moe_group)
//   gu_su_block f32 [(p*Etot + e)*(hidden/128) + blk]; null = 1
//   X           f16 [N][2][hidden] out
//   N, topk, E, S, hidden   N = T*(topk + S) positions, hidden % 128 == 0
// -------------------------------------------------------------------------
#pragma once

#include <cuda_fp16.h>

#include "moe_entries.cuh"

#define GLM_MOE_GATHER_PARAMS                                                  \
  const float *__restrict__ xh, const int *__restrict__ expert_ids,            \
      const int *__restrict__ order, const float *__restrict__ gu_su_block,    \
      __half *__restrict__ X, int N, int topk, int E, int S, int hidden
#define GLM_MOE_GATHER_ARGS                                                    \
  xh, expert_ids, order, gu_su_block, X, N, topk, E, S, hidden

namespace glm {

template <int THREADS>
__device__ __forceinline__ void moeGather(GLM_MOE_GATHER_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x;
  const int j = 4 * (blockIdx.y * THREADS + threadIdx.x); // (2*hidden)
  if (i >= N || j >= 2 * hidden)
    return;
  const int q = order[i];
  if (q < 0 || q >= N)
    return;
  const int U = topk + S;
  const int e = moeEntryExpert(expert_ids, q, U, topk, E);
  if (e < 0)
    return;
  const int t = q / U, p = j >= hidden, c = j - p * hidden;
  const float4 x =
      *reinterpret_cast<const float4 *>(xh + (long long)t * hidden + c);
  const float s =
      gu_su_block
          ? gu_su_block[(long long)(p * (E + S) + e) * (hidden >> 7) + (c >> 7)]
          : 1.0f;
  __half2 *dst =
      reinterpret_cast<__half2 *>(X + (long long)i * (2 * hidden) + j);
  dst[0] = __halves2half2(__float2half_rn(x.x * s), __float2half_rn(x.y * s));
  dst[1] = __halves2half2(__float2half_rn(x.z * s), __float2half_rn(x.w * s));
}

} // namespace glm
