// fill_f32.cuh - p[i] = v for i < n (synthetic norm vectors and scales).
#pragma once

#define GLM_FILL_F32_PARAMS float *p, long long n, float v
#define GLM_FILL_F32_ARGS p, n, v

namespace glm {

/// Grid-stride: any grid.
template <int THREADS>
__device__ __forceinline__ void fillF32(GLM_FILL_F32_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n;
       i += (long long)gridDim.x * THREADS)
    p[i] = v;
}

} // namespace glm
