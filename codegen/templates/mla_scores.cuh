// mla_scores.cuh - split decode attention, launch 1 of 3 (the plan:
// mla_qabs, mla_scores, mla_softmax, mla_values, mla_out; the shapes in
// mla_split_layout.cuh): the scores of 16 selected latent rows for 16
// heads a block. The rows are staged once in shared memory as fp32 (the
// values the cache's form reads as); warp w takes heads w and w + 8 of the
// block, its lanes holding q_abs[c] and q_pe[c] for c = lane + 32k, and per
// row sums a = sum_c key[c] q_abs[c] and r = sum_c rope[c] q_pe[c] in c
// order (4 rows at a time), then p = float((double(warpSum a) +
// double(warpSum r)) * scale) with hx::warpSumF's butterfly:
// mla_core's arithmetic, so p is mla_core's to the bit. A row with more
// selected rows than the grid covers traps.
#pragma once

#include "helper_common.cuh"
#include "kv_cache.cuh"
#include "mla_split_layout.cuh"

#define GLM_MLA_SCORES_PARAMS                                                  \
  const float *qAll, const float *qabsAll, const void *cache, const int *seq,  \
      const int *selAll, const int *nselp, float *pAll, int maxCtx,            \
      const int *heads, int nh, int H, int dn, int dr, int kvr, double scale,  \
      const int *pages, int pageShift
#define GLM_MLA_SCORES_ARGS                                                    \
  qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, heads, nh, H, dn,    \
      dr, kvr, scale, pages, pageShift

namespace glm {

/// pAll float [B, H, maxCtx]: row b's scores of head h at [b][h][0, n).
/// Grid (scoreGridX(nh, rows the grid covers), B), THREADS = 256, dynamic
/// shared memory scoreSmem(kvr, dr); kvr <= 512, dr <= 64.
template <int KV, int THREADS>
__device__ __forceinline__ void mlaScores(GLM_MLA_SCORES_PARAMS) {
  using namespace mla_split;
  static_assert(THREADS == kScoreThreads, "8 warps: two heads each");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  constexpr int NK = kMaxKvr / 32, NR = kMaxRope / 32, NW = THREADS / 32;
  extern __shared__ float keys[]; // [kScoreRows][kvr + dr]
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int b = blockIdx.y, lat = kvr + dr;
  const int headBlocks = (int)scoreHeadBlocks(nh);
  const int hb = blockIdx.x % headBlocks, rb = blockIdx.x / headBlocks;
  const int n = nselp[b];
  if (n > (int)(gridDim.x / headBlocks) * kScoreRows || kvr > kMaxKvr ||
      dr > kMaxRope)
    __trap(); // more rows than the plan sized the grid for
  const int j0 = rb * kScoreRows;
  const int m = n - j0 < kScoreRows ? n - j0 : kScoreRows;
  if (m <= 0)
    return;
  const kv::SlotRows r0 = kv::slotRows(pages, pageShift, seq[b], maxCtx);
  const int *sel = selAll + (long long)b * maxCtx + j0;
  // The warp's heads' q (HW heads: w, w + 8) load while the rows stage.
  constexpr int HW = kScoreHeads / NW;
  static_assert(kScoreHeads % NW == 0, "whole heads a warp");
  float q[HW][NK + NR];
  int hOf[HW];
  bool hasHead[HW];
#pragma unroll
  for (int u = 0; u < HW; ++u) {
    const int hi = hb * kScoreHeads + w + u * NW;
    hasHead[u] = hi < nh;
    hOf[u] = hasHead[u] ? heads[hi] : 0;
    const float *qabs = qabsAll + ((long long)b * H + hOf[u]) * kvr;
    const float *qp = qAll + (long long)b * H * (dn + dr) +
                      (long long)hOf[u] * (dn + dr) + dn;
#pragma unroll
    for (int k = 0; k < NK; ++k)
      q[u][k] = hasHead[u] && lane + 32 * k < kvr ? qabs[lane + 32 * k] : 0.0f;
#pragma unroll
    for (int k = 0; k < NR; ++k)
      q[u][NK + k] = hasHead[u] && lane + 32 * k < dr ? qp[lane + 32 * k] : 0.0f;
  }
  // Each warp stages its rows w, w + 8 with every load in flight (one
  // round trip, not one per 32 values: 18 of them at GLM-5.3's 576).
  constexpr int NL = NK + NR, RW = kScoreRows / NW;
  static_assert(kScoreRows % NW == 0, "whole rows a warp");
  {
    float v[RW][NL];
#pragma unroll
    for (int u = 0; u < RW; ++u) {
      const int jj = w + u * NW;
      if (jj < m) {
        const kv::Row<KV> ent = kv::row<KV>(cache, r0(sel[jj]), lat);
#pragma unroll
        for (int k = 0; k < NL; ++k)
          v[u][k] = lane + 32 * k < lat ? ent[lane + 32 * k] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < RW; ++u) {
      const int jj = w + u * NW;
      if (jj < m)
#pragma unroll
        for (int k = 0; k < NL; ++k)
          if (lane + 32 * k < lat)
            keys[jj * lat + lane + 32 * k] = v[u][k];
    }
  }
  __syncthreads();
#pragma unroll
  for (int hh = 0; hh < HW; ++hh) {
    if (!hasHead[hh])
      continue;
    const float *qk = q[hh], *qr = q[hh] + NK; // registers: hh unrolled
    float *p = pAll + ((long long)b * H + hOf[hh]) * maxCtx + j0;
    // IL rows at a time: independent sums (each row's in its own c order)
    // and butterflies, so their latencies overlap.
    constexpr int IL = 4;
    for (int j1 = 0; j1 < m; j1 += IL) {
      float a[IL], r[IL];
#pragma unroll
      for (int u = 0; u < IL; ++u) {
        a[u] = 0.0f, r[u] = 0.0f;
        const float *key = keys + (j1 + u < m ? j1 + u : j1) * lat;
#pragma unroll
        for (int k = 0; k < NK; ++k)
          if (lane + 32 * k < kvr)
            a[u] += key[lane + 32 * k] * qk[k];
#pragma unroll
        for (int k = 0; k < NR; ++k)
          if (lane + 32 * k < dr)
            r[u] += key[kvr + lane + 32 * k] * qr[k];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int u = 0; u < IL; ++u) {
          a[u] += __shfl_xor_sync(0xffffffffu, a[u], o);
          r[u] += __shfl_xor_sync(0xffffffffu, r[u], o);
        }
      if (lane == 0)
#pragma unroll
        for (int u = 0; u < IL; ++u)
          if (j1 + u < m)
            p[j1 + u] = (float)(((double)a[u] + (double)r[u]) * scale);
    }
  }
}

} // namespace glm
