// rope.cuh - interleaved (GPT-J) rotary embedding, in place.
//
// For row b, head h: pairs i = 0..ROPE_DIM/2-1 of the ROPE_DIM values at
// x[b*row_stride + h*head_stride + offset]:
//   (x_2i, x_2i+1) -> (x_2i cos - x_2i+1 sin, x_2i+1 cos + x_2i sin),
//   angle = pos_b * theta^(-2i/ROPE_DIM)   (glm53-architecture.md §2.4)
// computed in fp32 like the reference (inv_freq, angle, cosf/sinf).
#pragma once

#include "glm_common.cuh"

#define GLM_ROPE_PARAMS                                                        \
  float *__restrict__ x, const int *__restrict__ positions, int batch,        \
      int heads, int row_stride, int head_stride, int offset, float theta
#define GLM_ROPE_ARGS                                                          \
  x, positions, batch, heads, row_stride, head_stride, offset, theta

namespace glm {

/// Grid (heads, batch); block ROPE_DIM/2 threads (one per pair).
template <int ROPE_DIM>
__device__ __forceinline__ void rope(GLM_ROPE_PARAMS) {
  static_assert(ROPE_DIM % 2 == 0 && ROPE_DIM <= 512, "ROPE_DIM: even");
  const int h = blockIdx.x, b = blockIdx.y, i = threadIdx.x;
  if (h >= heads || b >= batch || i >= ROPE_DIM / 2)
    return;
  const float invFreq = 1.0f / powf(theta, float(2 * i) / float(ROPE_DIM));
  const float angle = float(positions[b]) * invFreq;
  const float c = cosf(angle), s = sinf(angle);
  float *p = x + (long long)b * row_stride + (long long)h * head_stride + offset + 2 * i;
  const float a = p[0], d = p[1];
  p[0] = a * c - d * s;
  p[1] = d * c + a * s;
}

} // namespace glm
