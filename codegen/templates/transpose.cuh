// transpose.cuh - load time: dst[r][c] = src[c][r] for a rows x cols
// source ([cols][rows] in dst's terms), fp32.
#pragma once

#define GLM_TRANSPOSE_PARAMS                                                   \
  const float *src, float *dst, long long rows, int cols
#define GLM_TRANSPOSE_ARGS src, dst, rows, cols

namespace glm {

/// Grid (ceil(rows*cols/THREADS)).
template <int THREADS>
__device__ __forceinline__ void transpose(GLM_TRANSPOSE_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (i >= rows * cols)
    return;
  const long long r = i / cols, c = i % cols;
  dst[i] = src[c * rows + r];
}

} // namespace glm
