// mla_prefill.cuh - absorbed MLA attention of a prefill chunk on tensor
// cores: mla_core's work (scores of each row's selected latent rows,
// softmax, ctx = sum p_j c_j) with one block per (query row, 16 * groups
// heads) instead of one per (row, head), so the row's selected keys are
// gathered once for all its heads and the products run as mma.sync
// m16n8k16 (fp16 in, fp32 accumulate; no wgmma, the same code on sm_90
// and the Sparks' sm_121, shared memory <= 99 KB: mla_prefill_abi.h).
//
// ABI: mla_core's runtime parameters (mla_core.cuh) with nh, the number of
// heads in `heads`, after the table: qAll [B][H][dn + dr] (q_pe roped),
// qabsAll [B][H][kvr], the cache [slots][maxCtx] rows of kvr + dr values in
// form KV (kv_cache.cuh), selAll [B][maxCtx] / nselp [B] (the selection),
// pAll [B][H][maxCtx] scratch (the scores), ctxAll [B][H][kvr] out. Grid
// (mlaPrefillGridX(nh, THREADS), B); block head i of blockIdx.x takes
// heads[16 * THREADS / 64 * blockIdx.x + i]; dynamic shared memory
// mlaPrefillSmem(THREADS, kvr, dr). VT = kvr / 16.
//
// Numerics (the twin, runtime/twins/twin_mla_prefill.cpp, computes the same
// roundings): q = (q_abs, q_pe), each key row and the probabilities enter
// the tensor cores as fp16 (round to nearest even; |values| below 65504:
// the latent is RMS-normed, q_abs and the rope keys are far below); the
// products are exact and summed in fp32. Pass 1: s_j = fp32(q . k_j) *
// fp32(scale), written to pAll, and each head's max m. Pass 2: p_j =
// fp16(expf(s_j - m)), l = the sum of those fp16 values, ctx = (sum_j p_j
// v_j) / l with v_j = fp16(the first kvr values of row j). Relative error
// about 1e-3 of |ctx| against fp32 inputs (the fp16 roundings), within
// 1e-5 of the twin but for the rare p_j whose fp16 rounding flips between
// the device's and the host's expf.
//
// Warps: group g = w / 2 holds heads 16g..16g+15, half = w % 2. Pass 1:
// the 16-key tile's keys 8 * half .. +7 (one n8 MMA tile over the latent,
// four accumulators so consecutive MMAs do not wait on each other); pass
// 2: the columns half * kvr / 2 .. +kvr / 2 (VT n8 tiles, VT * 4 fp32
// accumulators a thread), P built in registers from pAll.
#pragma once

#include "kv_cache.cuh"

#define GLM_MLA_PREFILL_PARAMS                                                 \
  const float *qAll, const float *qabsAll, const void *cache, const int *seq,  \
      const int *selAll, const int *nselp, float *pAll, int maxCtx,            \
      float *ctxAll, const int *heads, int nh, int H, int dn, int dr, int kvr, \
      double scale
#define GLM_MLA_PREFILL_ARGS                                                   \
  qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx, ctxAll, heads, nh,   \
      H, dn, dr, kvr, scale

namespace glm {
namespace mp {

__device__ __forceinline__ unsigned smem32(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
/// fp16 bits of x, round to nearest even (subnormals kept).
__device__ __forceinline__ unsigned short f16(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
__device__ __forceinline__ float f32(unsigned short h) {
  float x;
  asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
  return x;
}
/// Two fp16 in one register, x0 in the low half (the lower index).
__device__ __forceinline__ unsigned pack(float x0, float x1) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
  return r;
}
__device__ __forceinline__ void ldsm4(unsigned a[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(smem32(p)));
}
__device__ __forceinline__ void ldsm2(unsigned b[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(smem32(p)));
}
__device__ __forceinline__ void ldsm4t(unsigned a[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
      : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
      : "r"(smem32(p)));
}
__device__ __forceinline__ void ldsm2t(unsigned b[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(b[0]), "=r"(b[1])
               : "r"(smem32(p)));
}
/// c += a . b, m16n8k16, fp16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma(float c[4], const unsigned a[4],
                                    unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

/// Rows j0 .. j0 + 15 of the selection, columns [0, ncol) (a multiple of 4;
/// zero past lat and for keys past n), as fp16 into ks [16][pitch]. Four
/// 4-value loads issued per thread before their stores.
template <int KV, int THREADS>
__device__ __forceinline__ void loadKeys(unsigned short *ks, int pitch,
                                         int ncol, const void *cache,
                                         long long r0, const int *sel, int j0,
                                         int n, int lat) {
  const int c4 = ncol >> 2, items = 16 * c4;
  for (int it0 = threadIdx.x; it0 < items; it0 += 4 * THREADS) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int it = it0 + u * THREADS, k = it / c4, c = (it - k * c4) * 4;
      v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (it < items && j0 + k < n && c < lat)
        v[u] = kv::row<KV>(cache, r0 + sel[j0 + k], lat).four(c);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int it = it0 + u * THREADS, k = it / c4, c = (it - k * c4) * 4;
      if (it < items)
        *(uint2 *)(ks + k * pitch + c) =
            make_uint2(pack(v[u].x, v[u].y), pack(v[u].z, v[u].w));
    }
  }
}

} // namespace mp

template <int KV, int VT, int THREADS>
__device__ __forceinline__ void mlaPrefill(GLM_MLA_PREFILL_PARAMS) {
  static_assert(THREADS == 64 || THREADS == 128 || THREADS == 256,
                "THREADS: 64 per 16 heads, 1 to 4 groups");
  static_assert(VT >= 1 && VT <= 32, "VT = kvr / 16: 1 to 32");
  static_assert(KV >= kv::kF32 && KV <= kv::kE4m3, "KV: f32, bf16 or e4m3");
  constexpr int MH = 16 * (THREADS / 64); // heads of the block
  extern __shared__ __align__(16) unsigned char mpsh[];
  const int lat = kvr + dr, kp = (lat + 15) / 16 * 16, pitch = kp + 8;
  unsigned short *qs = (unsigned short *)mpsh; // [MH][pitch] fp16
  unsigned short *ks = qs + MH * pitch;        // [16][pitch] fp16
  float *red = (float *)(ks + 16 * pitch);     // [2][MH] column-half maxima
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int grp = w >> 1, half = w & 1, gr = lane >> 2, tq = lane & 3;
  const int b = blockIdx.y, hb0 = blockIdx.x * MH, n = nselp[b];
  const long long r0 = (long long)seq[b] * maxCtx;
  const int *sel = selAll + (long long)b * maxCtx;
  const float fscale = (float)scale;

  // q of the block's heads (zero rows past nh, zero columns past lat).
  for (int idx = t; idx < MH * kp; idx += THREADS) {
    const int i = idx / kp, c = idx - i * kp;
    float v = 0.0f;
    if (hb0 + i < nh) {
      const long long bh = (long long)b * H + heads[hb0 + i];
      if (c < kvr)
        v = qabsAll[bh * kvr + c];
      else if (c < lat)
        v = qAll[bh * (dn + dr) + dn + (c - kvr)];
    }
    qs[i * pitch + c] = mp::f16(v);
  }
  // This thread's two head rows (gr, gr + 8 of its group).
  bool valid[2];
  float *prow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hi = hb0 + 16 * grp + gr + 8 * r;
    valid[r] = hi < nh;
    prow[r] = valid[r] ? pAll + ((long long)b * H + heads[hi]) * maxCtx
                       : nullptr;
  }

  // Pass 1: scores into pAll, the running max of each head row.
  const float ninf = __int_as_float(0xff800000);
  float mx[2] = {ninf, ninf};
  const unsigned short *qa =
      qs + (16 * grp + (lane & 15)) * pitch + (lane >> 4) * 8;
  const unsigned short *kb =
      ks + (8 * half + (lane & 7)) * pitch + ((lane >> 3) & 1) * 8;
  const int nks = kp / 16;
  for (int j0 = 0; j0 < n; j0 += 16) {
    __syncthreads(); // the previous tile is consumed (and q is staged)
    mp::loadKeys<KV, THREADS>(ks, pitch, kp, cache, r0, sel, j0, n, lat);
    __syncthreads();
    float acc[4][4] = {};
    for (int s0 = 0; s0 < nks; s0 += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (s0 + u < nks) {
          unsigned a[4], bb[2];
          mp::ldsm4(a, qa + 16 * (s0 + u));
          mp::ldsm2(bb, kb + 16 * (s0 + u));
          mp::mma(acc[u], a, bb[0], bb[1]);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 8 * half + 2 * tq + e;
        const float d =
            (acc[0][2 * r + e] + acc[1][2 * r + e]) +
            (acc[2][2 * r + e] + acc[3][2 * r + e]);
        if (valid[r] && j < n) {
          const float s = d * fscale;
          prow[r][j] = s;
          mx[r] = fmaxf(mx[r], s);
        }
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    if (tq == 0)
      red[half * MH + 16 * grp + gr + 8 * r] = mx[r];
  }
  __syncthreads(); // the maxima, and pAll's scores seen by the block
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * grp + gr + 8 * r;
    mx[r] = fmaxf(red[row], red[MH + row]);
  }

  // Pass 2: ctx = P . V over the first kvr columns, l = sum of P.
  float o[VT][4] = {};
  float lsum[2] = {0.0f, 0.0f};
  const int mi = lane >> 3, col0 = half * VT * 8;
  const unsigned short *vb =
      ks + ((mi & 1) * 8 + (lane & 7)) * pitch + (mi >> 1) * 8 + col0;
  for (int j0 = 0; j0 < n; j0 += 16) {
    __syncthreads();
    mp::loadKeys<KV, THREADS>(ks, pitch, kvr, cache, r0, sel, j0, n, lat);
    // P fragment: rows gr / gr + 8, keys 2tq, 2tq + 1 / + 8.
    unsigned pa[4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        unsigned short hv[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = j0 + 2 * tq + 8 * kk + e;
          float p = 0.0f;
          if (valid[r] && j < n)
            p = expf(prow[r][j] - mx[r]);
          hv[e] = mp::f16(p);
          lsum[r] += mp::f32(hv[e]);
        }
        pa[2 * kk + r] = (unsigned)hv[0] | ((unsigned)hv[1] << 16);
      }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt + 1 < VT; nt += 2) {
      unsigned bv[4];
      mp::ldsm4t(bv, vb + 8 * nt);
      mp::mma(o[nt], pa, bv[0], bv[1]);
      mp::mma(o[nt + 1], pa, bv[2], bv[3]);
    }
    if (VT & 1) {
      unsigned bv[2];
      mp::ldsm2t(bv, vb + 8 * (VT - 1));
      mp::mma(o[VT - 1], pa, bv[0], bv[1]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 1);
    lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!valid[r])
      continue;
    const int hi = hb0 + 16 * grp + gr + 8 * r;
    float *crow = ctxAll + ((long long)b * H + heads[hi]) * kvr + col0;
    const float inv = lsum[r] > 0.0f ? 1.0f / lsum[r] : 0.0f;
#pragma unroll
    for (int nt = 0; nt < VT; ++nt) {
      crow[8 * nt + 2 * tq] = o[nt][2 * r] * inv;
      crow[8 * nt + 2 * tq + 1] = o[nt][2 * r + 1] * inv;
    }
  }
}

} // namespace glm
