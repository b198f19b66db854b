// dsa_iota.cuh - dense attention's selection: sel[b] = 0..T-1 with
// T = pos[b] + 1, nsel[b] = T.
#pragma once

#define GLM_DSA_IOTA_PARAMS int *sel, int *nsel, const int *pos, int maxCtx
#define GLM_DSA_IOTA_ARGS sel, nsel, pos, maxCtx

namespace glm {

/// Grid (n, B): blocks stride over t.
template <int THREADS>
__device__ __forceinline__ void dsaIota(GLM_DSA_IOTA_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int b = blockIdx.y, T = pos[b] + 1;
  for (int t = blockIdx.x * THREADS + threadIdx.x; t < T;
       t += gridDim.x * THREADS)
    sel[(long long)b * maxCtx + t] = t;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    nsel[b] = T;
}

} // namespace glm
