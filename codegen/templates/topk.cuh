// topk.cuh - top-k selection of scores (DSA indexer), in index order.
//
// For row b: the k largest of scores[b][0..len[b]) (radix select over
// order-preserving uint32 keys, four 8-bit passes; NaN ranks lowest; ties at
// the threshold go to the lower index), written in ascending index order to
// sel[b][0..); nsel[b] = min(k, len[b]). len <= k selects every key. One
// block per row; the result is deterministic.
#pragma once

#include "glm_common.cuh"

#define GLM_TOPK_PARAMS                                                        \
  const float *__restrict__ scores, const int *__restrict__ len,               \
      int *__restrict__ sel, int *__restrict__ nsel, int batch,                \
      int score_stride, int sel_stride, int k
#define GLM_TOPK_ARGS scores, len, sel, nsel, batch, score_stride, sel_stride, k

namespace glm {

__device__ __forceinline__ u32 orderKey(float f) {
  u32 u = __float_as_uint(f);
  if (f != f)
    return 0; // NaN: lowest
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Exclusive prefix of `flag` over the block; `total` gets the block sum.
template <int THREADS>
__device__ __forceinline__ int blockScanFlags(bool flag, int *warpTotals,
                                              int &total) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const u32 ballot = __ballot_sync(0xFFFFFFFFu, flag);
  const int within = __popc(ballot & ((1u << lane) - 1u));
  __syncthreads();
  if (lane == 0)
    warpTotals[warp] = __popc(ballot);
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < THREADS / 32; ++w) {
    before += w < warp ? warpTotals[w] : 0;
    total += warpTotals[w];
  }
  return before + within;
}

template <int THREADS>
__device__ __forceinline__ void topkSelect(GLM_TOPK_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 256 && THREADS <= 1024,
                "THREADS: 8..32 warps");
  __shared__ int hist[256];
  __shared__ int warpTotals[32];
  __shared__ u32 sPrefix;
  __shared__ int sRemaining;
  const int b = blockIdx.x;
  if (b >= batch)
    return;
  const int n = len[b];
  const float *row = scores + (long long)b * score_stride;
  int *out = sel + (long long)b * sel_stride;
  if (n <= k) {
    for (int i = threadIdx.x; i < n; i += THREADS)
      out[i] = i;
    if (threadIdx.x == 0)
      nsel[b] = n;
    return;
  }
  if (threadIdx.x == 0) {
    sPrefix = 0;
    sRemaining = k;
  }
  u32 mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += THREADS)
      hist[d] = 0;
    __syncthreads();
    const u32 prefix = sPrefix;
    for (int i = threadIdx.x; i < n; i += THREADS) {
      const u32 key = orderKey(row[i]);
      if ((key & mask) == prefix)
        atomicAdd(&hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= sRemaining)
          break;
        above += hist[d];
      }
      sRemaining -= above;
      sPrefix = prefix | (u32(d) << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const u32 threshold = sPrefix;
  const int ties = sRemaining; // keys == threshold to take, lowest index first
  int tiesSeen = 0, written = 0;
  for (int base = 0; base < n; base += THREADS) {
    const int i = base + threadIdx.x;
    const u32 key = i < n ? orderKey(row[i]) : 0;
    const bool tie = i < n && key == threshold;
    int tieTotal;
    const int tieRank = tiesSeen + blockScanFlags<THREADS>(tie, warpTotals, tieTotal);
    const bool take = i < n && (key > threshold || (tie && tieRank < ties));
    int takeTotal;
    const int pos = written + blockScanFlags<THREADS>(take, warpTotals, takeTotal);
    if (take)
      out[pos] = i;
    tiesSeen += tieTotal;
    written += takeTotal;
  }
  if (threadIdx.x == 0)
    nsel[b] = k;
}

} // namespace glm
