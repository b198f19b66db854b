// embed.cuh - embedding gather to fp32: out[b][:] = table[ids[b]][:].
//
// FMT: 0 F32, 1 F16, 2 BF16, 3 FP8 per row (E4M3 * scale[row], scale fp32).
// Rows outside [row_begin, row_begin + rows) give zeros so a vocabulary-
// sharded table can be summed across ranks. Grid (ceil(hidden/THREADS), batch).
#pragma once

#include "glm_common.cuh"

#define GLM_EMBED_PARAMS                                                       \
  const int *__restrict__ ids, const void *__restrict__ table,                 \
      const float *__restrict__ scale, float *__restrict__ out, int batch,     \
      int hidden, int row_begin, int rows
#define GLM_EMBED_ARGS ids, table, scale, out, batch, hidden, row_begin, rows

namespace glm {

template <int FMT, int THREADS>
__device__ __forceinline__ void embed(GLM_EMBED_PARAMS) {
  static_assert(FMT >= 0 && FMT <= 3, "format");
  const int b = blockIdx.y;
  const int i = blockIdx.x * THREADS + threadIdx.x;
  if (b >= batch || i >= hidden)
    return;
  const int r = ids[b] - row_begin;
  float v = 0.0f;
  if (r >= 0 && r < rows) {
    const long long at = (long long)r * hidden + i;
    if (FMT == 0)
      v = static_cast<const float *>(table)[at];
    else if (FMT == 1)
      v = __half2float(static_cast<const __half *>(table)[at]);
    else if (FMT == 2)
      v = __bfloat162float(static_cast<const __nv_bfloat16 *>(table)[at]);
    else
      v = e4m3ToFloat(static_cast<const u8 *>(table)[at]) * scale[r];
  }
  out[(long long)b * hidden + i] = v;
}

} // namespace glm
