// reduce_units.cuh - out[b, i] = (float)(sum over units u in order of
// part[(b*units + u)*n + i]) in fp64: the fixed-order sum of the HF
// experts' fp64 unit partials.
#pragma once

#define GLM_REDUCE_UNITS_PARAMS const double *part, int units, int n, float *out
#define GLM_REDUCE_UNITS_ARGS part, units, n, out

namespace glm {

/// Grid (ceil(n/THREADS), B).
template <int THREADS>
__device__ __forceinline__ void reduceUnits(GLM_REDUCE_UNITS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.y;
  if (i >= n)
    return;
  double s = 0;
  for (int u = 0; u < units; ++u)
    s += part[((long long)b * units + u) * n + i];
  out[(long long)b * n + i] = (float)s;
}

} // namespace glm
