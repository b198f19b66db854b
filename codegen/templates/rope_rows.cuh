// rope_rows.cuh - interleaved RoPE in fp64 on vector v = blockIdx.x of row
// b = blockIdx.y: x + b*rowStride + v*stride, first `dim` values, at
// position pos[b] (read on the device, so a captured graph replays).
#pragma once

#include "helper_common.cuh"

#define GLM_ROPE_ROWS_PARAMS                                                   \
  float *x, int dim, int stride, int rowStride, const int *pos, double theta
#define GLM_ROPE_ROWS_ARGS x, dim, stride, rowStride, pos, theta

namespace glm {

/// Thread i rotates pair i (blockDim.x >= dim/2; THREADS bounds the block,
/// the launch may use fewer threads).
template <int THREADS>
__device__ __forceinline__ void ropeRows(GLM_ROPE_ROWS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = threadIdx.x;
  if (i >= dim / 2)
    return;
  float *p = x + (long long)blockIdx.y * rowStride +
             (long long)blockIdx.x * stride; // (dim) one vector
  hx::ropePair(p, i, dim, pos[blockIdx.y], theta);
}

} // namespace glm
