// mla_values.cuh - split decode attention, launch 3 of 3
// (mla_split_layout.cuh): ctx[b][h][c] = inv[b][h] * sum_j p_j value_j[c]
// for 8 heads and 32 columns a block. Thread (column lane, group g = warp)
// reads value_j[c] of the rows j = g, g + 8, .. in order, each once for the
// block's 8 heads, adding the products (rounded, --fmad=false) into one sum
// per head; the 8 group sums are then added in group order from 0 and
// times the inverse. The weights and selected ids go through shared memory
// kValueTile rows at a time; the value loads of 16 rows issue together.
#pragma once

#include "kv_cache.cuh"
#include "mla_split_layout.cuh"

#define GLM_MLA_VALUES_PARAMS                                                  \
  const void *cache, const int *seq, const int *selAll, const int *nselp,     \
      const float *pAll, const float *inv, int maxCtx, float *ctxAll,         \
      const int *heads, int nh, int H, int dr, int kvr, const int *pages,     \
      int pageShift
#define GLM_MLA_VALUES_ARGS                                                    \
  cache, seq, selAll, nselp, pAll, inv, maxCtx, ctxAll, heads, nh, H, dr,     \
      kvr, pages, pageShift

namespace glm {

/// pAll float [B, H, maxCtx] (mla_softmax's weights), inv float [B, H],
/// ctxAll float [B, H, kvr]. Grid (valueGridX(nh, kvr), B), THREADS = 256.
template <int KV, int THREADS>
__device__ __forceinline__ void mlaValues(GLM_MLA_VALUES_PARAMS) {
  using namespace mla_split;
  static_assert(THREADS == kValueThreads, "a warp per row group");
  static_assert(kValueHeads == 8 && kValueGroups == 8,
                "add() takes 8 heads; the last sums a head a warp");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  constexpr int HB = kValueHeads, G = kValueGroups, T = kValueTile;
  __shared__ __align__(16) float wts[T][HB]; // the tile's weights, by head
  __shared__ int ids[T];                     // its selected rows
  __shared__ float part[G][HB][kValueCols];
  const int lane = threadIdx.x & 31, g = threadIdx.x >> 5, b = blockIdx.y;
  const int headBlocks = (int)valueHeadBlocks(nh);
  const int hb = blockIdx.x % headBlocks, cb = blockIdx.x / headBlocks;
  const int c = cb * kValueCols + lane, lat = kvr + dr;
  const bool colOk = c < kvr;
  const int nhb = nh - hb * HB < HB ? nh - hb * HB : HB;
  const int n = nselp[b];
  const kv::SlotRows r0 = kv::slotRows(pages, pageShift, seq[b], maxCtx);
  const int *sel = selAll + (long long)b * maxCtx;
  // This thread's head for staging weights (head t % 8 of the block's).
  const int myK = (int)threadIdx.x % HB;
  const float *myP =
      myK < nhb ? pAll + ((long long)b * H + heads[hb * HB + myK]) * maxCtx
                : nullptr;
  float acc[HB];
#pragma unroll
  for (int k = 0; k < HB; ++k)
    acc[k] = 0.0f;
  for (int j0 = 0; j0 < n; j0 += T) {
    const int m = n - j0 < T ? n - j0 : T;
    __syncthreads();
    // The tile's ids and weights with every load in flight: thread t
    // stages head t % 8's weights of rows t / 8 + 32 q (THREADS % HB == 0).
    constexpr int WQ = T * HB / THREADS, IQ = T / THREADS;
    static_assert(THREADS % HB == 0 && T % THREADS == 0, "whole tile rows");
    {
      int id[IQ];
      float wv[WQ];
#pragma unroll
      for (int q = 0; q < IQ; ++q) {
        const int i = threadIdx.x + q * THREADS;
        id[q] = i < m ? sel[j0 + i] : 0;
      }
#pragma unroll
      for (int q = 0; q < WQ; ++q) {
        const int jj = (int)threadIdx.x / HB + q * (THREADS / HB);
        wv[q] = myP && jj < m ? myP[j0 + jj] : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < IQ; ++q)
        if ((int)threadIdx.x + q * THREADS < m)
          ids[threadIdx.x + q * THREADS] = id[q];
#pragma unroll
      for (int q = 0; q < WQ; ++q) {
        const int jj = (int)threadIdx.x / HB + q * (THREADS / HB);
        if (jj < m)
          wts[jj][threadIdx.x % HB] = wv[q];
      }
    }
    __syncthreads();
    auto add = [&](int jj, float v) {
      const float4 lo = *reinterpret_cast<const float4 *>(&wts[jj][0]);
      const float4 hi = *reinterpret_cast<const float4 *>(&wts[jj][4]);
      acc[0] += lo.x * v, acc[1] += lo.y * v, acc[2] += lo.z * v;
      acc[3] += lo.w * v, acc[4] += hi.x * v, acc[5] += hi.y * v;
      acc[6] += hi.z * v, acc[7] += hi.w * v;
    };
    // U rows' loads in flight a thread (the adds stay in row order).
    constexpr int U = 16;
    for (int jj = g; jj < m; jj += U * G) {
      float v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jj + u * G;
        v[u] = colOk && j < m ? kv::row<KV>(cache, r0(ids[j]), lat)[c] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (jj + u * G < m)
          add(jj + u * G, v[u]);
    }
  }
#pragma unroll
  for (int k = 0; k < HB; ++k)
    part[g][k][lane] = acc[k];
  __syncthreads();
  // Thread (head k = warp, column lane): the group sums in group order.
  const int k = g;
  if (k < nhb && colOk) {
    const int h = heads[hb * HB + k];
    float a = 0.0f;
#pragma unroll
    for (int q = 0; q < G; ++q)
      a += part[q][k][lane];
    ctxAll[((long long)b * H + h) * kvr + c] = a * inv[(long long)b * H + h];
  }
}

} // namespace glm
