// indexer_scores_ctx.cuh - DSA indexer scores over the cached keys:
// I(t) = sum_h w_h * headScale * ReLU(q_h . k_t * dotScale) for every key
// t < T = pos[b] + 1 of row b, in fp64 (head dots serial over i, heads added
// in order, as the CPU reference does).
// POOL > 1 (GLM-5.3-Flash's k-pool): the keys are pooled keys [slots,
// maxCtx / POOL, hd] (kpool_store), the candidates the T = (pos[b] + 1) /
// POOL complete pools, score [B, maxCtx / POOL]; maxCtx counts tokens. The
// keys' rows are in form KV (kv_cache.cuh): the dots run on the values read.
#pragma once

#include "kv_cache.cuh"

#define GLM_INDEXER_SCORES_CTX_PARAMS                                          \
  const float *qi, const void *keys, const float *wts, double *score,          \
      const int *seq, const int *pos, int nh, int hd, int maxCtx,              \
      double headScale, double dotScale, const int *pages, int pageShift
#define GLM_INDEXER_SCORES_CTX_ARGS                                            \
  qi, keys, wts, score, seq, pos, nh, hd, maxCtx, headScale, dotScale, pages,  \
      pageShift

namespace glm {

/// Warp w of a block takes keys t = NW*blockIdx.x + w (NW = THREADS/32
/// warps), then strides by NW*gridDim.x; lane l computes the head dot
/// products h = l, l+32, .. of each group of 64 heads, lane 0 adds them in
/// order. Grid (n, B).
template <int POOL, int KV, int THREADS>
__device__ __forceinline__ void
indexerScoresCtx(GLM_INDEXER_SCORES_CTX_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  static_assert(POOL >= 1, "POOL: tokens per key");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  constexpr int NW = THREADS / 32;
  __shared__ double term[NW][64]; // (NW, 64) a warp's head terms
  const int b = blockIdx.y, T = (pos[b] + 1) / POOL, pc = maxCtx / POOL;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const float *q = qi + (long long)b * nh * hd; // (nh, hd)
  const float *wv = wts + (long long)b * nh;    // (nh)
  // the slot's rows (paged only at POOL 1: glmc refuses a paged k-pool)
  const kv::SlotRows r0 = kv::slotRows(pages, pageShift, seq[b], pc);
  for (int t0 = blockIdx.x * NW; t0 < T; t0 += gridDim.x * NW) {
    const int t = t0 + w;
    const kv::Row<KV> kt = kv::row<KV>(keys, r0(t < T ? t : 0), hd);
    double acc = 0;
    for (int h0 = 0; h0 < nh; h0 += 64) {
      for (int h = h0 + lane; h < h0 + 64 && h < nh; h += 32) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += (double)q[h * hd + i] * (double)kt[i];
        const double v = d * dotScale;
        term[w][h - h0] = (double)wv[h] * headScale * (v > 0.0 ? v : 0.0);
      }
      __syncwarp();
      if (lane == 0)
        for (int h = h0; h < h0 + 64 && h < nh; ++h)
          acc += term[w][h - h0];
      __syncwarp();
    }
    if (lane == 0 && t < T)
      score[(long long)b * pc + t] = acc;
  }
}

} // namespace glm
