// expert_gemv_trellis.cuh - fused MoE expert decode GEMV over trellis halves.
//
// One block per (half h, expert e): if expert e is selected by any of the
// batch rows and this rank owns half h (non-null tile pointer), it computes
//   g = H(xh_e * su_block) . Tg -> H, * svh     (128 intermediate channels)
//   u = H(xh_e * su_block) . Tu -> H, * svh
//   a = H(SiLU(g) * u * down.suh)    (g, u clamped first when swiglu_limit
//                                     > 0: GLM-5.3-Flash)
//   z = a . Td                                   (hidden outputs)
// and writes the routing-weighted fp32 partial of (row, slot, half):
//   exlr8 (down_svh == null): z * sv_block * w   (pre-Hadamard; the reducer
//                                                 applies one H * signs.out)
//   EXL3  (down_svh != null): H(z) * svh_e * w   (final domain)
// Trellis decode per exl3-format.md §1-2; per-half widths come from a width
// table and dispatch to the K specialisations allowed by WMASK, so one
// launch covers a mixed-width manifest. Input xh is already rotated by the
// hadamard128 kernel (shared by all experts for exlr8, per slot for EXL3).
// The up projection reads xh + xh_proj_stride: 0 for exlr8 (gate and up share
// signs.in), the offset of the up copy for EXL3 (gate and up have their own
// suh, so each needs its own rotated input).
#pragma once

#include "glm_common.cuh"

/// Kernel parameters (runtime ABI 1), in order.
#define GLM_EXPERT_GEMV_TRELLIS_PARAMS                                         \
  const float *__restrict__ xh, const int *__restrict__ expert_ids,            \
      const float *__restrict__ route_w,                                       \
      const unsigned char *const *__restrict__ tiles,                          \
      const unsigned char *__restrict__ widths, const void *gu_svh,            \
      const void *gu_su_block, const void *down_suh, const void *down_sv_block, \
      const void *down_svh, float *__restrict__ partial, int batch, int topk,  \
      int hidden, int inter, int xh_row_stride, int xh_slot_stride,            \
      int xh_proj_stride, int gu_sI, int gu_sI8, int down_sI, int down_sJ8,    \
      float swiglu_limit
#define GLM_EXPERT_GEMV_TRELLIS_ARGS                                           \
  xh, expert_ids, route_w, tiles, widths, gu_svh, gu_su_block, down_suh,       \
      down_sv_block, down_svh, partial, batch, topk, hidden, inter,            \
      xh_row_stride, xh_slot_stride, xh_proj_stride, gu_sI, gu_sI8, down_sI,   \
      down_sJ8, swiglu_limit

namespace glm {

// Layouts of the tables (e = expert, p = 0 gate / 1 up / 2 down, h = half):
//   tiles[(e*3 + p)*16 + h]   first tile of the half (null = not on this rank)
//   widths[(e*3 + p)*16 + h]  its K (bits per weight)
//   gu_svh[(p*E + e)*inter + 128h + j]   gate/up output-side vector (p < 2)
//   gu_su_block[(p*E + e)*(hidden/128) + blk]  gate/up input block scale
//   down_suh[e*inter + 128h + j], down_sv_block[e*(hidden/128) + blk],
//   down_svh[e*hidden + o]  (EXL3 only)
//   partial[((b*topk + k)*16 + h)*hidden + o]
// where E = gridDim.y.

template <int BATCH> struct ExpertRows {
  int slot[BATCH]; // k of row b that selected this expert, -1 = none
};

/// z[b][0..128) += xh_b . T for one gate/up half of width K.
/// Warp w handles tile columns c = w, w + NWARPS, ... (8 columns).
template <int K, int CB, bool E4M3, int BATCH, int SVT, int THREADS>
__device__ void expertGateUpHalf(const float *__restrict__ xh,
                                 const ExpertRows<BATCH> &rows,
                                 const u8 *tilesBase, const void *suBlock,
                                 int hidden, int xhRowStride,
                                 int xhSlotStride, TileStrides st,
                                 float (*z)[128], u32 *warpWords) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int kNWarps = THREADS / 32;
  constexpr int kWords = 8 * K; // (16,16) tile = 8K u32
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = 2 * (lane & 3), c0 = lane >> 2;
  const SV *su = static_cast<const SV *>(suBlock);
  for (int c = warp; c < 8; c += kNWarps) {
    float acc[BATCH][2];
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      acc[b][0] = acc[b][1] = 0.0f;
    for (int i = 0; i < hidden / 16; ++i) {
      const u32 *src = reinterpret_cast<const u32 *>(tilesBase) +
                       tileIndex(i, c, st) * kWords;
      for (int w = lane; w < kWords; w += 32)
        warpWords[w] = src[w];
      __syncwarp();
      float v[8];
      decodeLane8<K, CB, E4M3>(warpWords, lane, v);
      __syncwarp();
      const float s = optAt(su, i >> 3);
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        if (rows.slot[b] < 0)
          continue;
        const float *x = xh + (long long)b * xhRowStride +
                         (long long)rows.slot[b] * xhSlotStride + 16 * i + r0;
        const float x0 = x[0], x1 = x[1], x2 = x[8], x3 = x[9];
        acc[b][0] += s * (v[0] * x0 + v[1] * x1 + v[2] * x2 + v[3] * x3);
        acc[b][1] += s * (v[4] * x0 + v[5] * x1 + v[6] * x2 + v[7] * x3);
      }
    }
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      // Lanes sharing c0 hold the four row pairs: sum them.
      float a0 = acc[b][0], a1 = acc[b][1];
      a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 1);
      a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 2);
      a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 1);
      a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 2);
      if ((lane & 3) == 0) {
        z[b][16 * c + c0] = a0;
        z[b][16 * c + c0 + 8] = a1;
      }
    }
  }
}

/// Down projection of one half of width K: a[b][0..128) . T (128 x hidden).
/// Warp w handles 128-column output blocks blk = w, w + NWARPS, ...
template <int K, int CB, bool E4M3, int BATCH, int SVT, int THREADS>
__device__ void expertDownHalf(const ExpertRows<BATCH> &rows,
                               const float (*a)[128], const u8 *tilesBase,
                               const void *svBlock, const void *svhFull,
                               const float *__restrict__ routeW, int e, int h,
                               int hidden, int topk, TileStrides st,
                               float *__restrict__ partial, u32 *warpWords,
                               float (*warpOut)[128]) {
  typedef typename StorageOf<SVT>::type SV;
  constexpr int kNWarps = THREADS / 32;
  constexpr int kWords = 8 * K;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = 2 * (lane & 3), c0 = lane >> 2;
  const SV *svb = static_cast<const SV *>(svBlock);
  const SV *svh = static_cast<const SV *>(svhFull);
  for (int blk = warp; blk < hidden / 128; blk += kNWarps) {
    for (int jj = 0; jj < 8; ++jj) {
      const int J = 8 * blk + jj;
      float acc[BATCH][2];
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
        acc[b][0] = acc[b][1] = 0.0f;
#pragma unroll 1
      for (int r = 0; r < 8; ++r) {
        const u32 *src = reinterpret_cast<const u32 *>(tilesBase) +
                         tileIndex(r, J, st) * kWords;
        for (int w = lane; w < kWords; w += 32)
          warpWords[w] = src[w];
        __syncwarp();
        float v[8];
        decodeLane8<K, CB, E4M3>(warpWords, lane, v);
        __syncwarp();
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
          if (rows.slot[b] < 0)
            continue;
          const float *x = a[b] + 16 * r + r0;
          const float x0 = x[0], x1 = x[1], x2 = x[8], x3 = x[9];
          acc[b][0] += v[0] * x0 + v[1] * x1 + v[2] * x2 + v[3] * x3;
          acc[b][1] += v[4] * x0 + v[5] * x1 + v[6] * x2 + v[7] * x3;
        }
      }
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        float a0 = acc[b][0], a1 = acc[b][1];
        a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 1);
        a0 += __shfl_xor_sync(0xFFFFFFFFu, a0, 2);
        a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 1);
        a1 += __shfl_xor_sync(0xFFFFFFFFu, a1, 2);
        if ((lane & 3) == 0 && b < BATCH) {
          warpOut[b][16 * jj + c0] = a0;
          warpOut[b][16 * jj + c0 + 8] = a1;
        }
      }
    }
    __syncwarp();
    // The 128 outputs of block blk are complete for every row.
    for (int b = 0; b < BATCH; ++b) {
      if (rows.slot[b] < 0)
        continue;
      const int k = rows.slot[b];
      const float w = routeW[b * topk + k];
      float *dst = partial + ((long long)(b * topk + k) * 16 + h) * hidden +
                   128 * blk;
      float v[4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        v[q] = warpOut[b][4 * lane + q];
      if (svh) {
        hadamard128Warp(v, lane);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          dst[4 * lane + q] = v[q] * kInvSqrt128 *
                              toFloat<SV>(svh[(long long)e * hidden +
                                              128 * blk + 4 * lane + q]) * w;
      } else {
        const float s = optAt(svb, (long long)e * (hidden / 128) + blk) * w;
#pragma unroll
        for (int q = 0; q < 4; ++q)
          dst[4 * lane + q] = v[q] * s;
      }
    }
    __syncwarp();
  }
}

/// Dispatches a runtime K to the specialisations WMASK allows.
#define GLM_DISPATCH_K(WMASK, k, CALL)                                         \
  switch (k) {                                                                 \
  case 1: if ((WMASK) & 0x002) { CALL(1); } break;                             \
  case 2: if ((WMASK) & 0x004) { CALL(2); } break;                             \
  case 3: if ((WMASK) & 0x008) { CALL(3); } break;                             \
  case 4: if ((WMASK) & 0x010) { CALL(4); } break;                             \
  case 5: if ((WMASK) & 0x020) { CALL(5); } break;                             \
  case 6: if ((WMASK) & 0x040) { CALL(6); } break;                             \
  case 7: if ((WMASK) & 0x080) { CALL(7); } break;                             \
  case 8: if ((WMASK) & 0x100) { CALL(8); } break;                             \
  default: break;                                                              \
  }

template <int WMASK, int CB, bool E4M3, int BATCH, int SVT, int THREADS>
__device__ __forceinline__ void
expertGemvTrellis(GLM_EXPERT_GEMV_TRELLIS_PARAMS) {
  // Preconditions.
  static_assert(WMASK != 0 && (WMASK & ~0x1FE) == 0, "widths: K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook: 3inst, mcg or mul1");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(THREADS % 32 == 0 && THREADS >= 64 && THREADS <= 512,
                "THREADS: 2..16 warps");
  typedef typename StorageOf<SVT>::type SV;
  constexpr int kNWarps = THREADS / 32;
  const int h = blockIdx.x, e = blockIdx.y, nExperts = gridDim.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  __shared__ ExpertRows<BATCH> rows;
  __shared__ float z[2][BATCH][128]; // (2,BATCH,128) gate and up
  __shared__ float act[BATCH][128];  // (BATCH,128) rotated SwiGLU output
  __shared__ u32 words[kNWarps][64]; // one (16,16) tile of K <= 8 per warp
  __shared__ float wout[kNWarps][BATCH][128];

  const u8 *gate = tiles[(e * 3 + 0) * 16 + h];
  const u8 *up = tiles[(e * 3 + 1) * 16 + h];
  const u8 *down = tiles[(e * 3 + 2) * 16 + h];
  if (!gate || !up || !down)
    return; // half not on this rank (or not of this launch's widths)
  if (threadIdx.x < BATCH) {
    int s = -1;
    if (int(threadIdx.x) < batch)
      for (int k = 0; k < topk; ++k)
        if (expert_ids[threadIdx.x * topk + k] == e) {
          s = k;
          break;
        }
    rows.slot[threadIdx.x] = s;
  }
  __syncthreads();
  bool any = false;
#pragma unroll
  for (int b = 0; b < BATCH; ++b)
    any |= rows.slot[b] >= 0;
  if (!any)
    return;

  const TileStrides gus{gu_sI, gu_sI8, 0};
  const TileStrides ds{down_sI, 0, down_sJ8};
  const int nBlk = hidden / 128;
  for (int p = 0; p < 2; ++p) {
    const u8 *t = p == 0 ? gate : up;
    const int k = widths[(e * 3 + p) * 16 + h];
    const void *su =
        gu_su_block ? static_cast<const SV *>(gu_su_block) +
                          (long long)(p * nExperts + e) * nBlk
                    : nullptr;
#define GLM_GU(KK)                                                             \
  expertGateUpHalf<KK, CB, E4M3, BATCH, SVT, THREADS>(                         \
      xh + (long long)p * xh_proj_stride, rows, t, su, hidden, xh_row_stride,  \
      xh_slot_stride, gus, z[p], words[warp])
    GLM_DISPATCH_K(WMASK, k, GLM_GU)
#undef GLM_GU
  }
  __syncthreads();

  // Output Hadamard of gate and up (one warp per (p, b)), * svh.
  const SV *svh = static_cast<const SV *>(gu_svh);
  for (int task = warp; task < 2 * BATCH; task += kNWarps) {
    const int p = task / BATCH, b = task % BATCH;
    if (rows.slot[b] < 0)
      continue;
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      v[q] = z[p][b][4 * lane + q];
    hadamard128Warp(v, lane);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      z[p][b][4 * lane + q] =
          v[q] * kInvSqrt128 *
          optAt(svh, (long long)(p * nExperts + e) * inter + 128 * h +
                         4 * lane + q);
  }
  __syncthreads();

  // SwiGLU, down's input-side vector and input Hadamard (one warp per row).
  const SV *dsuh = static_cast<const SV *>(down_suh);
  for (int b = warp; b < BATCH; b += kNWarps) {
    if (rows.slot[b] < 0)
      continue;
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = 4 * lane + q;
      float g = z[0][b][j], u = z[1][b][j];
      clampSwiglu(g, u, swiglu_limit);
      v[q] = g / (1.0f + expf(-g)) * u *
             optAt(dsuh, (long long)e * inter + 128 * h + j);
    }
    hadamard128Warp(v, lane);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      act[b][4 * lane + q] = v[q] * kInvSqrt128;
  }
  __syncthreads();

  const int kd = widths[(e * 3 + 2) * 16 + h];
#define GLM_DOWN(KK)                                                           \
  expertDownHalf<KK, CB, E4M3, BATCH, SVT, THREADS>(                           \
      rows, act, down, down_sv_block, down_svh, route_w, e, h, hidden, topk,   \
      ds, partial, words[warp], wout[warp])
  GLM_DISPATCH_K(WMASK, kd, GLM_DOWN)
#undef GLM_DOWN
}

} // namespace glm
