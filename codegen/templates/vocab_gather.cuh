// vocab_gather.cuh - the logits of every rank, all-gathered as
// [N][B][maxCount], to [B][V]: rank r's rows are vocabulary ids
// vb[r] .. vb[r+1]-1.
#pragma once

#define GLM_VOCAB_GATHER_PARAMS                                                \
  const float *g, const long long *vb, int B, int maxCount, float *out, int V
#define GLM_VOCAB_GATHER_ARGS g, vb, B, maxCount, out, V

namespace glm {

/// Grid (ceil(maxCount/THREADS), N, B).
template <int THREADS>
__device__ __forceinline__ void vocabGather(GLM_VOCAB_GATHER_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int i = blockIdx.x * THREADS + threadIdx.x, r = blockIdx.y,
            b = blockIdx.z;
  const long long beg = vb[r], cnt = vb[r + 1] - vb[r];
  if (i >= cnt)
    return;
  out[(long long)b * V + beg + i] = g[((long long)r * B + b) * maxCount + i];
}

} // namespace glm
