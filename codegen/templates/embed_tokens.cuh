// embed_tokens.cuh - x[b, :] = row tok[b] of the embedding table in any
// stored dtype (times the row scale for fp8 rows).
#pragma once

#include "helper_common.cuh"

#define GLM_EMBED_TOKENS_PARAMS                                                \
  const void *table, int dt, const float *rowScale, const int *tok, float *x,  \
      int d
#define GLM_EMBED_TOKENS_ARGS table, dt, rowScale, tok, x, d

namespace glm {

/// dt as hx::ldAny; rowScale null for unscaled tables. Grid
/// (ceil(d/THREADS), B).
template <int THREADS>
__device__ __forceinline__ void embedTokens(GLM_EMBED_TOKENS_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int b = blockIdx.y, i = blockIdx.x * THREADS + threadIdx.x;
  if (i >= d)
    return;
  const long long t = tok[b];
  float v = hx::ldAny(table, t * d + i, dt); // (d) one row
  if (rowScale)
    v *= rowScale[t];
  x[(long long)b * d + i] = v;
}

} // namespace glm
