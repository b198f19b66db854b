// hadamard128.cuh - block-diagonal Hadamard-128 rotation with side vectors.
//
// y[r][128q + i] = post[128q + i] * (1/sqrt(128)) *
//                  sum_j H[i][j] * pre[128q + j] * x[r][128q + j]
// (exl3-format.md §3: natural-order Sylvester H, symmetric, self-inverse).
// pre/post are optional (null = 1): suh/signs.in before, svh/signs.out after.
// pre_stride/post_stride (elements) step the vectors per row for per-slot
// (per-expert) rotations; 0 = one vector for all rows. One warp per 128-block.
#pragma once

#include "glm_common.cuh"

#define GLM_HADAMARD128_PARAMS                                                 \
  const float *__restrict__ x, const void *__restrict__ pre,                   \
      const void *__restrict__ post, float *__restrict__ y, int rows, int n,   \
      int pre_stride, int post_stride
#define GLM_HADAMARD128_ARGS x, pre, post, y, rows, n, pre_stride, post_stride

namespace glm {

/// Grid ceil(rows * n/128 / (THREADS/32)). x may alias y.
template <int VT, int THREADS>
__device__ __forceinline__ void hadamard128(GLM_HADAMARD128_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  typedef typename StorageOf<VT>::type V;
  const int lane = threadIdx.x & 31;
  const long long blk = (long long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  const int perRow = n / 128;
  if (blk >= (long long)rows * perRow)
    return;
  const int r = int(blk / perRow), q = int(blk % perRow);
  const V *pv = static_cast<const V *>(pre);
  const V *qv = static_cast<const V *>(post);
  const long long base = (long long)r * n + 128 * q + 4 * lane;
  const long long col = 128 * q + 4 * lane;
  float v[4];
#pragma unroll
  for (int t = 0; t < 4; ++t)
    v[t] = x[base + t] * optAt(pv, (long long)r * pre_stride + col + t);
  hadamard128Warp(v, lane);
#pragma unroll
  for (int t = 0; t < 4; ++t)
    y[base + t] = v[t] * kInvSqrt128 * optAt(qv, (long long)r * post_stride + col + t);
}

} // namespace glm
