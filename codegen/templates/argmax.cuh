// argmax.cuh - greedy pick over logits, or over per-rank (value, index)
// candidates after an all-gather of a vocabulary-sharded LM head.
//
// Row b: the largest vals[b*in_stride + i], i < n (NaN ignored; ties: lower
// index). Its index is idx_in[...] when given (candidates), else
// i + index_offset (this rank's vocabulary slice). Writes out_val/out_idx at
// b*out_stride. One block per row.
#pragma once

#include "glm_common.cuh"

#define GLM_ARGMAX_PARAMS                                                      \
  const float *__restrict__ vals, const int *__restrict__ idx_in,              \
      float *__restrict__ out_val, int *__restrict__ out_idx, int batch,       \
      int n, int in_stride, int out_stride, int index_offset
#define GLM_ARGMAX_ARGS                                                        \
  vals, idx_in, out_val, out_idx, batch, n, in_stride, out_stride, index_offset

namespace glm {

template <int THREADS>
__device__ __forceinline__ void argmax(GLM_ARGMAX_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  __shared__ float rv[32];
  __shared__ int ri[32];
  const int b = blockIdx.x;
  if (b >= batch)
    return;
  const float *row = vals + (long long)b * in_stride;
  float bv = -GLM_INF;
  int bi = 0x7FFFFFFF;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    const float v = row[i];
    const int id = idx_in ? idx_in[(long long)b * in_stride + i] : i + index_offset;
    if (v > bv || (v == bv && id < bi)) {
      bv = v;
      bi = id;
    }
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    rv[warp] = bv;
    ri[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < THREADS / 32; ++w)
      if (rv[w] > bv || (rv[w] == bv && ri[w] < bi)) {
        bv = rv[w];
        bi = ri[w];
      }
    out_val[(long long)b * out_stride] = bv;
    out_idx[(long long)b * out_stride] = bi == 0x7FFFFFFF ? -1 : bi;
  }
}

} // namespace glm
