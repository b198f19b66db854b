// sum_parts.cuh - out[i] = sum over parts p in order of parts[p*n + i]
// (fp32; the split-K slices of one batch-1 GEMV).
#pragma once

#define GLM_SUM_PARTS_PARAMS const float *parts, int np, int n, float *out
#define GLM_SUM_PARTS_ARGS parts, np, n, out

namespace glm {

/// Grid (ceil(n/THREADS)).
template <int THREADS>
__device__ __forceinline__ void sumParts(GLM_SUM_PARTS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x * THREADS + threadIdx.x;
  if (i >= n)
    return;
  float s = 0.0f;
  for (int p = 0; p < np; ++p)
    s += parts[(long long)p * n + i];
  out[i] = s;
}

} // namespace glm
