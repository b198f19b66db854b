// dense_gemv_trellis.cuh - decode GEMV z = xh . T for a dense trellis matrix.
//
// xh is the input already multiplied by suh and rotated (hadamard128), fp32
// [batch, in]; T is the trellis matrix (in x out) decoded on the fly from its
// tiles (exl3-format.md §1-2); z is fp32 [batch, out] in the rotated domain
// (a hadamard128 with svh follows). Tile addressing covers EXL3 row-major
// tensors and exlr8 dense records through TileStrides. One warp per 16-column
// tile column; blocks cover THREADS/32 tile columns.
#pragma once

#include "glm_common.cuh"

#define GLM_DENSE_GEMV_TRELLIS_PARAMS                                          \
  const float *__restrict__ xh, const unsigned char *__restrict__ tiles,       \
      float *__restrict__ z, int batch, int in, int out, int sI, int sI8,      \
      int sJ8
#define GLM_DENSE_GEMV_TRELLIS_ARGS xh, tiles, z, batch, in, out, sI, sI8, sJ8

namespace glm {

template <int K, int CB, bool E4M3, int BATCH, int THREADS>
__device__ __forceinline__ void denseGemvTrellis(GLM_DENSE_GEMV_TRELLIS_PARAMS) {
  static_assert(K >= 1 && K <= 8, "K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int kNWarps = THREADS / 32;
  constexpr int kWords = 8 * K;
  __shared__ u32 words[kNWarps][kWords]; // (16,16) tile per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = blockIdx.x * kNWarps + warp; // tile column
  if (j >= out / 16)
    return;
  const int r0 = 2 * (lane & 3), c0 = lane >> 2;
  const TileStrides st{sI, sI8, sJ8};
  float acc[BATCH][2];
#pragma unroll
  for (int b = 0; b < BATCH; ++b)
    acc[b][0] = acc[b][1] = 0.0f;
  for (int i = 0; i < in / 16; ++i) {
    const u32 *src = reinterpret_cast<const u32 *>(tiles) + tileIndex(i, j, st) * kWords;
    for (int w = lane; w < kWords; w += 32)
      words[warp][w] = src[w];
    __syncwarp();
    float v[8];
    decodeLane8<K, CB, E4M3>(words[warp], lane, v);
    __syncwarp();
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      if (b >= batch)
        break;
      const float *x = xh + (long long)b * in + 16 * i + r0;
      const float x0 = x[0], x1 = x[1], x2 = x[8], x3 = x[9];
      acc[b][0] += v[0] * x0 + v[1] * x1 + v[2] * x2 + v[3] * x3;
      acc[b][1] += v[4] * x0 + v[5] * x1 + v[6] * x2 + v[7] * x3;
    }
  }
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    if (b >= batch)
      break;
    float a0 = acc[b][0], a1 = acc[b][1];
    a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 1);
    a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 2);
    a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 1);
    a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 2);
    if ((lane & 3) == 0) {
      z[(long long)b * out + 16 * j + c0] = a0;
      z[(long long)b * out + 16 * j + c0 + 8] = a1;
    }
  }
}

} // namespace glm
