// mla_core.cuh - absorbed MLA, launch 2 of 3: per (head heads[blockIdx.x],
// row b = blockIdx.y), scores of the selected latent rows (one warp per row,
// lanes over channels c = lane + 32k in order, q_abs and q_pe from shared
// memory, hx::warpSumF), softmax (fp64 exp, fixed-order block sums), then
// ctx[c] = inv * sum_j p_j c_j[c] with threads over (float4 column, row
// group g): rows j = g, g + G, .. of each tile in order, then the G partial
// sums in group order. Selected row ids and p are staged in shared memory
// in tiles of kMlaTile so no load waits on another (one block was ~29 us per
// layer with dependent sel -> cache loads in its loops). The cache's rows
// are in form KV (kv_cache.cuh): the arithmetic runs on the values read.
#pragma once

#include "helper_common.cuh"
#include "kv_cache.cuh"
#include "mla_softmax.cuh"

#define GLM_MLA_CORE_PARAMS                                                    \
  const float *qAll, const float *qabsAll, const void *cache, const int *seq,  \
      const int *selAll, const int *nselp, float *pAll, int maxCtx,            \
      float *ctxAll, const int *heads, int H, int dn, int dr, int kvr,         \
      double scale, const int *pages, int pageShift
#define GLM_MLA_CORE_ARGS                                                      \
  qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, ctxAll, heads, H,    \
      dn, dr, kvr, scale, pages, pageShift

namespace glm {
namespace hx {
/// Selected rows staged in shared memory per tile.
constexpr int kMlaTile = 1024;
} // namespace hx

/// p: global scratch float [B, H, maxCtx]. kvr and dr multiples of 4,
/// kvr/4 <= THREADS (checked by the caller). Dynamic shared memory:
/// (kvr + dr + 2*kMlaTile + 4*THREADS) floats. Grid (nHeads, B). Cache
/// [slots, maxCtx] rows of kv::rowBytes(KV, kvr + dr).
template <int KV, int THREADS>
__device__ __forceinline__ void mlaCore(GLM_MLA_CORE_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 1024,
                "THREADS: warps");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  using hx::kMlaTile;
  extern __shared__ float msh[];
  float *qs = msh, *qps = msh + kvr, *ps = qps + dr; // (kvr), (dr), (tile)
  int *ss = (int *)(ps + kMlaTile);                  // (tile) row ids
  float *part = (float *)(ss + kMlaTile);            // (G, kvr) partials
  const int h = heads[blockIdx.x], b = blockIdx.y, lat = kvr + dr;
  const int t = threadIdx.x, nt = THREADS, lane = t & 31, w = t >> 5,
            nw = nt >> 5;
  const int n = nselp[b];
  const float *qp =
      qAll + (long long)b * H * (dn + dr) + (long long)h * (dn + dr) + dn;
  const float *qabs = qabsAll + ((long long)b * H + h) * kvr;
  const kv::SlotRows r0 = kv::slotRows(pages, pageShift, seq[b], maxCtx);
  const int *sel = selAll + (long long)b * maxCtx;
  float *p = pAll + ((long long)b * H + h) * maxCtx;
  for (int c = t; c < kvr; c += nt)
    qs[c] = qabs[c];
  for (int c = t; c < dr; c += nt)
    qps[c] = qp[c];
  for (int j0 = 0; j0 < n; j0 += kMlaTile) {
    const int m = n - j0 < kMlaTile ? n - j0 : kMlaTile;
    __syncthreads();
    for (int j = t; j < m; j += nt)
      ss[j] = sel[j0 + j];
    __syncthreads();
    for (int j = w; j < m; j += nw) {
      const kv::Row<KV> ent = kv::row<KV>(cache, r0(ss[j]), lat);
      float a = 0.0f, r = 0.0f;
      int c = lane;
      for (; c + 32 * 15 < kvr; c += 32 * 16) {
        float e[16];
#pragma unroll
        for (int k = 0; k < 16; ++k)
          e[k] = ent[c + 32 * k];
#pragma unroll
        for (int k = 0; k < 16; ++k)
          a += e[k] * qs[c + 32 * k];
      }
      for (; c < kvr; c += 32)
        a += ent[c] * qs[c];
      for (c = lane; c < dr; c += 32)
        r += ent[kvr + c] * qps[c];
      a = hx::warpSumF(a);
      r = hx::warpSumF(r);
      if (lane == 0)
        p[j0 + j] = (float)(((double)a + (double)r) * scale);
    }
  }
  __syncthreads();
  const float inv = mlaSoftmaxWeights<THREADS, true>(p, n, ps, kMlaTile);
  const int cv = kvr >> 2, G = nt / cv, col = t % cv, grp = t / cv;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j0 = 0; j0 < n; j0 += kMlaTile) {
    const int m = n - j0 < kMlaTile ? n - j0 : kMlaTile;
    if (n > kMlaTile) { // tile 0 is still staged when n fits one tile
      __syncthreads();
      for (int j = t; j < m; j += nt) {
        ss[j] = sel[j0 + j];
        ps[j] = p[j0 + j];
      }
      __syncthreads();
    }
    if (grp >= G)
      continue;
    int j = grp;
    for (; j + 7 * G < m; j += 8 * G) {
      float4 v[8];
      float pv[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        v[k] = kv::row<KV>(cache, r0(ss[j + k * G]), lat).four(4 * col);
        pv[k] = ps[j + k * G];
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        acc.x += pv[k] * v[k].x;
        acc.y += pv[k] * v[k].y;
        acc.z += pv[k] * v[k].z;
        acc.w += pv[k] * v[k].w;
      }
    }
    for (; j < m; j += G) {
      const float4 v = kv::row<KV>(cache, r0(ss[j]), lat).four(4 * col);
      const float pv = ps[j];
      acc.x += pv * v.x;
      acc.y += pv * v.y;
      acc.z += pv * v.z;
      acc.w += pv * v.w;
    }
  }
  if (grp < G) {
    float *pp = part + grp * kvr + 4 * col;
    pp[0] = acc.x;
    pp[1] = acc.y;
    pp[2] = acc.z;
    pp[3] = acc.w;
  }
  __syncthreads();
  float *ctx = ctxAll + ((long long)b * H + h) * kvr;
  for (int c = t; c < kvr; c += nt) {
    float a = 0.0f;
    for (int g = 0; g < G; ++g)
      a += part[g * kvr + c];
    ctx[c] = a * inv;
  }
}

} // namespace glm
