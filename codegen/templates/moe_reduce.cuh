// moe_reduce.cuh - sums the expert partials of one rank in a fixed order.
//
// out[b][o] = sum over slots k (ascending), halves h (ascending) owned by
// this rank of partial[((b*topk + k)*16 + h)*hidden + o], in fp32. A fixed
// order and no atomics make the result bit-reproducible run to run. The
// cross-rank sum (all_reduce, rank order) and exlr8's final H * signs.out
// (hadamard128) follow as separate ops.
#pragma once

#include "glm_common.cuh"

#define GLM_MOE_REDUCE_PARAMS                                                  \
  const float *__restrict__ partial, const int *__restrict__ expert_ids,       \
      const unsigned char *const *__restrict__ tiles,                          \
      float *__restrict__ out, int batch, int topk, int hidden, int accumulate
#define GLM_MOE_REDUCE_ARGS                                                    \
  partial, expert_ids, tiles, out, batch, topk, hidden, accumulate

namespace glm {

/// Grid (ceil(hidden / THREADS), batch); tiles as in expert_gemv_trellis
/// (ownership = non-null gate pointer). accumulate != 0 adds to out.
template <int THREADS>
__device__ __forceinline__ void moeReduce(GLM_MOE_REDUCE_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  const int b = blockIdx.y;
  const int o = blockIdx.x * THREADS + threadIdx.x;
  if (b >= batch || o >= hidden)
    return;
  float s = accumulate ? out[(long long)b * hidden + o] : 0.0f;
  for (int k = 0; k < topk; ++k) {
    const int e = expert_ids[b * topk + k];
    if (e < 0)
      continue;
    for (int h = 0; h < 16; ++h)
      if (tiles[(e * 3 + 0) * 16 + h])
        s += partial[((long long)(b * topk + k) * 16 + h) * hidden + o];
  }
  out[(long long)b * hidden + o] = s;
}

} // namespace glm
