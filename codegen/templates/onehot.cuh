// onehot.cuh - load time: X[b, c] = (c == c0 + b) for b < nb, c < n
// (one-hot rows, to expand a weight through its own GEMV).
#pragma once

#define GLM_ONEHOT_PARAMS float *X, int nb, int n, int c0
#define GLM_ONEHOT_ARGS X, nb, n, c0

namespace glm {

/// Grid (ceil(n/THREADS), nb).
template <int THREADS>
__device__ __forceinline__ void onehot(GLM_ONEHOT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int c = blockIdx.x * THREADS + threadIdx.x, b = blockIdx.y;
  if (c >= n || b >= nb)
    return;
  X[(long long)b * n + c] = c == c0 + b ? 1.0f : 0.0f;
}

} // namespace glm
