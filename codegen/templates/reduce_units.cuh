// reduce_units.cuh - out[b, i] = (float)(sum over units u in order of
// part[(b*units + u)*n + i]) in fp64: the fixed-order sum of the HF
// experts' fp64 unit partials.
// SUM (fixed_point.cuh): 0 as above; 1 each unit's partial rounded to
// fixed point and summed in int64, out = fromFixed(sum); 2 the int64 sum
// written to out reinterpreted as long long (for an int64 all-reduce).
#pragma once

#include "fixed_point.cuh"

#define GLM_REDUCE_UNITS_PARAMS const double *part, int units, int n, float *out
#define GLM_REDUCE_UNITS_ARGS part, units, n, out

namespace glm {

/// Grid (ceil(n/THREADS), B).
template <int SUM, int THREADS>
__device__ __forceinline__ void reduceUnits(GLM_REDUCE_UNITS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  const int i = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.y;
  if (i >= n)
    return;
  if (SUM) {
    long long s = 0;
    for (int u = 0; u < units; ++u)
      s += toFixed(part[((long long)b * units + u) * n + i]);
    storeFixedSum<SUM>(out, (long long)b * n + i, s, 0);
    return;
  }
  double s = 0;
  for (int u = 0; u < units; ++u)
    s += part[((long long)b * units + u) * n + i];
  out[(long long)b * n + i] = (float)s;
}

} // namespace glm
