// mla_decode.cuh - MLA decode attention over the latent cache, restricted to
// the token indices the DSA indexer selected (glm53-architecture.md §2.3,
// absorbed form).
//
// For row b and head h (HEADS heads per block share every cache read):
//   score_s = (q_lat[b,h] . c_s + q_pe[b,h] . kpe_s) * softmax_scale
//   o_lat[b,h] = sum_s softmax(score)_s * c_s        (fp32, LORA wide)
// over s in sel[b][0..nsel[b]). The cache row of token s is LORA latent
// values then ROPE (already roped) k_pe values, stored as KVT (0 bf16,
// 1 e4m3 with a per-token fp32 scale). q_lat is W_UK^T q_nope (absorbed),
// q_pe is roped. Dynamic shared memory: HEADS * max_sel floats.
#pragma once

#include "glm_common.cuh"

#define GLM_MLA_DECODE_PARAMS                                                  \
  const float *__restrict__ q_lat, const float *__restrict__ q_pe,             \
      const void *__restrict__ cache, const float *__restrict__ cache_scale,   \
      const int *__restrict__ sel, const int *__restrict__ nsel,               \
      float *__restrict__ o_lat, int batch, int heads, int max_sel,            \
      float softmax_scale
#define GLM_MLA_DECODE_ARGS                                                    \
  q_lat, q_pe, cache, cache_scale, sel, nsel, o_lat, batch, heads, max_sel,    \
      softmax_scale

namespace glm {

template <int KVT, int LORA, int ROPE>
__device__ __forceinline__ float cacheAt(const void *cache, const float *scale,
                                         int s, int d) {
  constexpr int kRow = LORA + ROPE;
  if (KVT == 0)
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(cache)[(long long)s * kRow + d]);
  return e4m3ToFloat(static_cast<const u8 *>(cache)[(long long)s * kRow + d]) *
         (scale ? scale[s] : 1.0f);
}

/// Grid (heads / HEADS, batch).
template <int LORA, int ROPE, int KVT, int HEADS, int THREADS>
__device__ __forceinline__ void mlaDecode(GLM_MLA_DECODE_PARAMS) {
  static_assert(LORA % 32 == 0 && LORA <= 1024, "LORA: multiple of 32");
  static_assert(ROPE % 16 == 0 && ROPE <= 128, "ROPE: multiple of 16");
  static_assert(KVT == 0 || KVT == 1, "KVT: bf16 or e4m3");
  static_assert(HEADS >= 1 && HEADS <= 16, "HEADS 1..16");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int kRow = LORA + ROPE;
  constexpr int kNWarps = THREADS / 32;
  extern __shared__ float scores[];       // (HEADS, max_sel)
  __shared__ float q[HEADS][kRow];        // (HEADS, LORA+ROPE)
  __shared__ float red[32];
  __shared__ float inv[HEADS];
  const int h0 = blockIdx.x * HEADS, b = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (b >= batch || h0 >= heads)
    return;
  const int n = min(nsel[b], max_sel);
  const int *idx = sel + (long long)b * max_sel;
  for (int t = threadIdx.x; t < HEADS * kRow; t += THREADS) {
    const int hh = t / kRow, d = t % kRow, h = min(h0 + hh, heads - 1);
    q[hh][d] = d < LORA ? q_lat[((long long)b * heads + h) * LORA + d]
                        : q_pe[((long long)b * heads + h) * ROPE + d - LORA];
  }
  __syncthreads();
  // Scores: one warp per selected token, lanes over the row.
  for (int i = warp; i < n; i += kNWarps) {
    const int s = idx[i];
    constexpr int kPerLane = (kRow + 31) / 32;
    float c[kPerLane];
#pragma unroll
    for (int t = 0; t < kPerLane; ++t)
      c[t] = 32 * t + lane < kRow
                 ? cacheAt<KVT, LORA, ROPE>(cache, cache_scale, s, 32 * t + lane)
                 : 0.0f;
#pragma unroll 4
    for (int hh = 0; hh < HEADS; ++hh) {
      float dot = 0.0f;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t)
        if (32 * t + lane < kRow)
          dot += q[hh][32 * t + lane] * c[t];
      dot = warpSum(dot);
      if (lane == 0)
        scores[hh * max_sel + i] = dot * softmax_scale;
    }
  }
  __syncthreads();
  // Softmax per head (fp32, max-subtracted).
  for (int hh = 0; hh < HEADS; ++hh) {
    float m = -GLM_INF;
    for (int i = threadIdx.x; i < n; i += THREADS)
      m = fmaxf(m, scores[hh * max_sel + i]);
    m = blockMax<THREADS>(m, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += THREADS) {
      const float p = expf(scores[hh * max_sel + i] - m);
      scores[hh * max_sel + i] = p;
      sum += p;
    }
    sum = blockSum<THREADS>(sum, red);
    if (threadIdx.x == 0)
      inv[hh] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  // Output: threads over latent dims, loop over tokens.
  for (int d = threadIdx.x; d < LORA; d += THREADS) {
    float acc[HEADS];
#pragma unroll
    for (int hh = 0; hh < HEADS; ++hh)
      acc[hh] = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float c = cacheAt<KVT, LORA, ROPE>(cache, cache_scale, idx[i], d);
#pragma unroll
      for (int hh = 0; hh < HEADS; ++hh)
        acc[hh] += scores[hh * max_sel + i] * c;
    }
#pragma unroll
    for (int hh = 0; hh < HEADS; ++hh)
      if (h0 + hh < heads)
        o_lat[((long long)b * heads + h0 + hh) * LORA + d] = acc[hh] * inv[hh];
  }
}

} // namespace glm
