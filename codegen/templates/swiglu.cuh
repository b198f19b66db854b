// swiglu.cuh - act[b, j] = SiLU(g[b, j]) * u[b, j] in fp64, stored fp32;
// channels of 128-chunks this rank does not own (own[j/128] == 0) are zero.
// limit > 0 (GLM-5.3-Flash's swiglu_limit) clamps first: g <= limit, u in
// [-limit, limit] (fp64, as the CPU reference); 0 = no clamp.
#pragma once

#define GLM_SWIGLU_PARAMS                                                      \
  const float *g, const float *u, int gs, float *act, int n,                   \
      const unsigned char *own, double limit
#define GLM_SWIGLU_ARGS g, u, gs, act, n, own, limit

namespace glm {

/// g and u rows have stride gs; own null = every chunk. Grid
/// (ceil(n/THREADS), B).
template <int THREADS>
__device__ __forceinline__ void swiglu(GLM_SWIGLU_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int j = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.y;
  if (j >= n)
    return;
  float v = 0.0f;
  if (!own || own[j >> 7]) {
    double gg = g[(long long)b * gs + j], uu = u[(long long)b * gs + j];
    if (limit > 0) {
      gg = gg < limit ? gg : limit;
      uu = uu < -limit ? -limit : uu > limit ? limit : uu;
    }
    v = (float)(gg / (1.0 + exp(-gg)) * uu);
  }
  act[(long long)b * n + j] = v;
}

} // namespace glm
