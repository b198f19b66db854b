// fixed_to_f32.cuh - the end of a fixed-point all-reduce: the int64 sums of
// a GEMV split over ranks (fixed_point.cuh, sum = fixed_out) back to fp32,
// y[r][i] = fromFixed(x[r][i]), and where `post` is given the output
// rotation its kernel would have applied before the all-reduce,
// y = H(fromFixed(x)) * (1/sqrt128 * post) per 128-block (the expression of
// dense_trellis's svh and moe_trellis's signs_out, so a 1-rank plan, which
// applies it in the kernel, gives the same bits).
#pragma once

#include "fixed_point.cuh"
#include "glm_common.cuh"

#define GLM_FIXED_TO_F32_PARAMS                                                \
  const long long *__restrict__ x, const float *__restrict__ post,             \
      float *__restrict__ y, int rows, int n
#define GLM_FIXED_TO_F32_ARGS x, post, y, rows, n

namespace glm {

/// One warp per 128-column block of a row: grid ceil(rows * ceil(n/128) /
/// (THREADS/32)). With post, n % 128 == 0 (else it traps).
template <int THREADS>
__device__ __forceinline__ void fixedToF32(GLM_FIXED_TO_F32_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  if (post && n % 128 != 0)
    __trap();
  const int lane = threadIdx.x & 31;
  const int perRow = (n + 127) / 128;
  const long long blk =
      (long long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  if (blk >= (long long)rows * perRow)
    return;
  const int r = int(blk / perRow), q = int(blk % perRow);
  const long long base = (long long)r * n;
  const int col = 128 * q + 4 * lane;
  float v[4];
#pragma unroll
  for (int t = 0; t < 4; ++t)
    v[t] = col + t < n ? fromFixed(x[base + col + t]) : 0.0f;
  if (post) {
    hadamard128Warp(v, lane);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      v[t] *= kInvSqrt128 * post[col + t];
  }
#pragma unroll
  for (int t = 0; t < 4; ++t)
    if (col + t < n)
      y[base + col + t] = v[t];
}

} // namespace glm
