// indexer_scores.cuh - DSA lightning indexer scores (glm53-architecture.md
// §2.5): I(b, s) = sum_h w[b,h] * ReLU(q[b,h] . k_s * qk_scale) for the
// keys s < len[b] of the index-key cache (HEAD_DIM values per token, KT:
// 0 bf16, 1 f16, 2 f32). q is roped fp32 [batch, N_HEADS, HEAD_DIM]; w already
// carries the N_HEADS^-1/2 factor. Scores fp32 [batch, score_stride]; a topk
// kernel selects from them.
#pragma once

#include "glm_common.cuh"

#define GLM_INDEXER_SCORES_PARAMS                                              \
  const float *__restrict__ q, const float *__restrict__ w,                    \
      const void *__restrict__ keys, const int *__restrict__ len,              \
      float *__restrict__ scores, int batch, int score_stride, float qk_scale
#define GLM_INDEXER_SCORES_ARGS                                                \
  q, w, keys, len, scores, batch, score_stride, qk_scale

namespace glm {

/// Grid (ceil(max_len / (THREADS/32 * 4)), batch): each warp scores 4 keys.
template <int HEAD_DIM, int N_HEADS, int KT, int THREADS>
__device__ __forceinline__ void indexerScores(GLM_INDEXER_SCORES_PARAMS) {
  static_assert(HEAD_DIM % 32 == 0 && HEAD_DIM <= 256, "HEAD_DIM");
  static_assert(N_HEADS >= 1 && N_HEADS <= 64, "N_HEADS");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  typedef typename StorageOf<KT>::type KS;
  constexpr int kPerLane = HEAD_DIM / 32;
  constexpr int kKeysPerWarp = 4;
  __shared__ float qs[N_HEADS][HEAD_DIM]; // (N_HEADS, HEAD_DIM)
  __shared__ float ws[N_HEADS];
  const int b = blockIdx.y;
  if (b >= batch)
    return;
  for (int t = threadIdx.x; t < N_HEADS * HEAD_DIM; t += THREADS)
    qs[t / HEAD_DIM][t % HEAD_DIM] = q[(long long)b * N_HEADS * HEAD_DIM + t];
  for (int t = threadIdx.x; t < N_HEADS; t += THREADS)
    ws[t] = w[(long long)b * N_HEADS + t];
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = len[b];
  const int first = (blockIdx.x * (THREADS / 32) + warp) * kKeysPerWarp;
  const KS *kp = static_cast<const KS *>(keys);
  for (int s = first; s < min(first + kKeysPerWarp, n); ++s) {
    float k[kPerLane];
#pragma unroll
    for (int t = 0; t < kPerLane; ++t)
      k[t] = toFloat<KS>(kp[(long long)s * HEAD_DIM + 32 * t + lane]);
    float total = 0.0f;
#pragma unroll 4
    for (int h = 0; h < N_HEADS; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t)
        dot += qs[h][32 * t + lane] * k[t];
      dot = warpSum(dot);
      total += ws[h] * fmaxf(dot * qk_scale, 0.0f);
    }
    if (lane == 0)
      scores[(long long)b * score_stride + s] = total;
  }
}

} // namespace glm
