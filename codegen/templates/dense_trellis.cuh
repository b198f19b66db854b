// dense_trellis.cuh - decode GEMV of a dense trellis matrix, split-k wide.
//
// Replaces dense_gemv_trellis (one warp per 16-column tile column, every
// input tile serially) for decode: work is cut into one-warp items so that
// thousands of warps stream the trellis bytes at once, and each 16x16 tile is
// decoded by one warp straight into an mma.sync m16n8k16 A fragment
// (trellis_tile.cuh: weights as A, activations as B, fp32 accumulation).
//
//   warp item = (128-output block blk = 8 tile columns, k-chunk s of tile
//     rows): z_s = xh[rows of chunk s] . T[:, 128 blk ..].
//   A block's NW = THREADS/32 warps take NW consecutive chunks of one blk
//   and add their z_s in warp order in shared memory; with several blocks
//   per blk, each stores that sum as a partial and the last block of blk to
//   arrive (integer counter) adds the partials (warp w a contiguous range
//   in order, then the NW range sums in warp order) and writes
//     y[b][128 blk + j] = (svh ? H(z)[j] * svh[128 blk + j] / sqrt128 : z[j])
//   for j < out_valid - 128 blk (the padded tail is not written).
//   The tree is fixed and the counters are integers, so results are
//   bit-reproducible run to run whichever block finishes last.
//
// Activations enter the tensor cores as fp16 hi + lo pairs (x = hi + lo,
// |x| < 65504), so products carry ~22 bits of x; weights are exact fp16
// (E4M3-rounded values are a subset). Trellis decode per exl3-format.md
// §1-2; the E4M3 step per exlr8-format.md §5.5.
//
// ---------------------------------------------------------------- ABI ----
// Template: denseTrellis<K, CB, E4M3, BATCH, PIPE, MINBLOCKS, THREADS>
//   K       trellis width 1..8 (one width per dense tensor)
//   CB      0 3inst, 1 mcg, 2 mul1;  E4M3 exlr8 rounding on/off
//   BATCH   1..8 (template bound on the runtime batch)
//   PIPE    0: next tile row prefetched into registers; 2..8: per-warp
//           shared-memory ring of PIPE rows filled by cp.async (static smem
//           PIPE * 256 * K bytes per warp, <= 32 KB per block)
//   MINBLOCKS  min resident blocks per SM in the entry's __launch_bounds__
//           (0 = none)
//   SUM     0 fp32 sums as above; 1 each warp item's z_s rounded to fixed
//           point (fixed_point.cuh) and every sum after it exact in int64
//           (shared-memory and scratch partials int64: scratch twice the
//           floats), y = H(fromFixed(sum)) * svh as above; 2 the int64 sum
//           of the rotated-domain z written to y reinterpreted as long long
//           [batch][y_stride] (svh must be null: H follows the all-reduce).
//           With chunks that never straddle a unit another rank owns (the
//           planner aligns split), the result is the same bits at every
//           rank count.
// Runtime parameters (GLM_DENSE_TRELLIS_PARAMS, in order):
//   xh        f32 [batch][in]: the input times suh, rotated (hadamard128)
//   tiles     the trellis tiles; tile (i, j) (rows 16i.., cols 16j..) at
//             tileIndex(i, j, {sI, sI8, sJ8}) * 32K bytes (glm_common.cuh):
//             EXL3 row-major (out/16, out/2, 8); exlr8 side-0/1 records
//             (8, 64, in/2); exlr8 side-2 records (8, out/2, 64). 16-byte
//             aligned (cp.async with PIPE > 0); the 8 tiles (i, 8q..8q+7)
//             are contiguous in all of these.
//   svh       f32 [out] or null: null = y is z (the rotated domain, a
//             hadamard128 with svh follows outside); else the output
//             Hadamard and svh are applied in the kernel
//   scratch   f32, DenseTrellisDims::scratchFloats() = out*batch*split/NW
//             (codegen/dense_trellis_abi.h): block partials
//             [blk][split/NW][b][128] (unused when split == NW)
//   counters  int, out/128 of them, zero before the first launch; every
//             completed launch leaves them zero again
//   y         f32 [batch][y_stride]
//   batch, in, out   in % 16 == 0, out % 128 == 0 (the padded width:
//             DeviceLinear.outPad), 1 <= batch <= BATCH
//   y_stride  elements between rows of y (>= out_valid)
//   out_valid columns written (<= out): the unpadded output width
//   sI, sI8, sJ8   tile strides (above)
//   split     k-chunks per 128-output block, a multiple of NW in NW..in/16;
//             chunk s covers tile rows [s*R/split, (s+1)*R/split), R = in/16
// Grid (x only): out/128 * split/NW blocks of THREADS (<= 256) threads.
// Shared memory: static, max(NW * PIPE * 256K, NW * BATCH * 512) bytes.
// A violated precondition traps (never wrong numbers).
// -------------------------------------------------------------------------
#pragma once

#include "fixed_point.cuh"
#include "trellis_tile.cuh"

#define GLM_DENSE_TRELLIS_PARAMS                                               \
  const float *__restrict__ xh, const unsigned char *__restrict__ tiles,       \
      const float *__restrict__ svh, float *__restrict__ scratch,              \
      int *__restrict__ counters, float *__restrict__ y, int batch, int in,    \
      int out, int y_stride, int out_valid, int sI, int sI8, int sJ8,          \
      int split
#define GLM_DENSE_TRELLIS_ARGS                                                 \
  xh, tiles, svh, scratch, counters, y, batch, in, out, y_stride, out_valid,   \
      sI, sI8, sJ8, split

namespace glm {

/// y[b][128 blk + 4 lane + t] = v[t] (after the optional H * svh), the
/// padded tail not written.
template <int BATCH>
__device__ __forceinline__ void denseStore(float (&v)[4], int b, int blk,
                                           const float *svh, float *y,
                                           int y_stride, int out_valid) {
  const int lane = threadIdx.x & 31;
  if (svh) {
    hadamard128Warp(v, lane);
#pragma unroll
    for (int t = 0; t < 4; ++t)
      v[t] *= kInvSqrt128 * svh[128 * blk + 4 * lane + t];
  }
  const int col = 128 * blk + 4 * lane;
  float *dst = y + (long long)b * y_stride + col;
#pragma unroll
  for (int t = 0; t < 4; ++t)
    if (col + t < out_valid)
      dst[t] = v[t];
}

/// Sum of the NW per-warp rows zs[w][b][4 lane ..] in warp order.
template <int NW, int BATCH>
__device__ __forceinline__ void denseWarpSum(const float *zs, int b,
                                             float (&v)[4]) {
  const int lane = threadIdx.x & 31;
  float4 a = *reinterpret_cast<const float4 *>(zs + b * 128 + 4 * lane);
#pragma unroll
  for (int w = 1; w < NW; ++w) {
    const float4 c = *reinterpret_cast<const float4 *>(
        zs + (w * BATCH + b) * 128 + 4 * lane);
    a.x += c.x, a.y += c.y, a.z += c.z, a.w += c.w;
  }
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}

/// Stores the final int64 sums of batch row b (this lane's 4 columns):
/// SUM 1 as fp32 through denseStore, SUM 2 as int64.
template <int SUM, int BATCH>
__device__ __forceinline__ void denseStoreFixed(const long long *fx, int b,
                                                int blk, const float *svh,
                                                float *y, int y_stride,
                                                int out_valid) {
  const int lane = threadIdx.x & 31;
  if (SUM == 2) {
    const int col = 128 * blk + 4 * lane;
    long long *dst = reinterpret_cast<long long *>(y) + (long long)b * y_stride;
#pragma unroll
    for (int t = 0; t < 4; ++t)
      if (col + t < out_valid)
        dst[col + t] = fx[4 * lane + t];
    return;
  }
  float v[4];
#pragma unroll
  for (int t = 0; t < 4; ++t)
    v[t] = fromFixed(fx[4 * lane + t]);
  denseStore<BATCH>(v, b, blk, svh, y, y_stride, out_valid);
}

/// SUM 1 / 2 after the k loop: each warp's z_s (hi + lo) rounded to fixed
/// point and added into the block's int64 row sums in shared memory
/// (integer atomics: any order gives the same sum); one block per output
/// block stores them, else int64 partials, and the last block to arrive
/// adds them (its warps split the partials, again by integer atomics).
template <int NB, int NW, int BATCH, int SUM>
__device__ __forceinline__ void
denseTrellisFixedTail(const float (&acc)[NB][8][4], u32 *smem, float *scratch,
                      int *counters, const float *svh, float *y, int batch,
                      int y_stride, int out_valid, int blk, int sb, int nSB,
                      int &lastBlock) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j4 = lane & 3, g = lane >> 2;
  unsigned long long *fx = reinterpret_cast<unsigned long long *>(smem);
  for (int i = threadIdx.x; i < BATCH * 128; i += NW * 32)
    fx[i] = 0;
  __syncthreads();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = j4 + 4 * nb;
    if (b >= batch)
      continue;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      atomicAdd(&fx[b * 128 + 16 * c + g],
                (unsigned long long)toFixed(acc[nb][c][0] + acc[nb][c][1]));
      atomicAdd(&fx[b * 128 + 16 * c + g + 8],
                (unsigned long long)toFixed(acc[nb][c][2] + acc[nb][c][3]));
    }
  }
  __syncthreads();
  const long long *sum = reinterpret_cast<const long long *>(fx);
  if (nSB == 1) {
    for (int b = warp; b < batch; b += NW)
      denseStoreFixed<SUM, BATCH>(sum + b * 128, b, blk, svh, y, y_stride,
                                  out_valid);
    return;
  }
  long long *part = reinterpret_cast<long long *>(scratch) +
                    ((long long)blk * nSB + sb) * batch * 128;
  for (int i = threadIdx.x; i < batch * 128; i += NW * 32)
    __stcg(part + i, sum[i]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int old = atomicAdd(&counters[blk], 1);
    lastBlock = old == nSB - 1;
    if (lastBlock)
      counters[blk] = 0;
  }
  __syncthreads();
  if (!lastBlock)
    return;
  __threadfence();
  for (int i = threadIdx.x; i < BATCH * 128; i += NW * 32)
    fx[i] = 0;
  __syncthreads();
  const long long *p0 =
      reinterpret_cast<const long long *>(scratch) + (long long)blk * nSB * batch * 128;
  for (int q = warp; q < nSB; q += NW)
    for (int i = lane; i < batch * 128; i += 32)
      atomicAdd(&fx[i],
                (unsigned long long)__ldcg(p0 + (long long)q * batch * 128 + i));
  __syncthreads();
  for (int b = warp; b < batch; b += NW)
    denseStoreFixed<SUM, BATCH>(sum + b * 128, b, blk, svh, y, y_stride,
                                out_valid);
}

template <int K, int CB, bool E4M3, int BATCH, int PIPE, int MINBLOCKS,
          int SUM, int THREADS>
__device__ __forceinline__ void denseTrellis(GLM_DENSE_TRELLIS_PARAMS) {
  (void)MINBLOCKS; // __launch_bounds__(THREADS, MINBLOCKS) on the entry
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  static_assert(K >= 1 && K <= 8, "K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook: 3inst, mcg or mul1");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(PIPE == 0 || (PIPE >= 2 && PIPE <= 8), "pipe: 0 or 2..8");
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 256,
                "THREADS: 1..8 warps");
  constexpr int NB = kNB(BATCH), W = TileLane<K>::kWords;
  constexpr int NW = THREADS / 32;
  constexpr int kRing = PIPE ? PIPE * 8 * W : 1; // words per warp
  static_assert(NW * kRing * 4 <= 32768,
                "cp.async ring over 32 KB: fewer stages or threads");
  // One buffer: the warps' cp.async rings while streaming, then their
  // output rows zs[w][b][128] (<= 8 * 8 * 512 B = 32 KB).
  constexpr int kZs0 = SUM ? BATCH * 256 : NW * BATCH * 128; // fixed: int64
  constexpr int kZs = kZs0 > NW * BATCH * 128 ? kZs0 : NW * BATCH * 128;
  constexpr int kSmem = NW * kRing > kZs ? NW * kRing : kZs;
  __shared__ __align__(16) u32 smem[kSmem];
  __shared__ int lastBlock;
  const int nRows = in >> 4, nBlk = out >> 7;
  if (batch < 1 || batch > BATCH || (in & 15) || (out & 127) || in <= 0 ||
      split < NW || split > nRows || split % NW != 0 || out_valid > out ||
      y_stride < out_valid || (SUM == 2 && svh))
    __trap();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j4 = lane & 3, g = lane >> 2;
  const int nSB = split / NW; // blocks per 128-output block
  const int blk = int(blockIdx.x / nSB), sb = int(blockIdx.x % nSB);
  if (blk >= nBlk)
    return; // whole block: no barrier below is left waiting
  const int s = sb * NW + warp;
  const int r0 = int((long long)s * nRows / split);
  const int r1 = int((long long)(s + 1) * nRows / split);

  // This lane's B-fragment batch rows: b = g/2 + 4 nb, hi (g even) or lo.
  const bool lo = g & 1;
  const float *xp[NB];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = (g >> 1) + 4 * nb;
    xp[nb] = b < batch ? xh + (long long)b * in + 2 * j4 : nullptr;
  }
  float acc[NB][8][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        acc[nb][c][t] = 0.0f;
  const TileStrides st{sI, sI8, sJ8};
  const u32 *base = reinterpret_cast<const u32 *>(tiles);
  decodeRows<K, CB, E4M3, NB, PIPE>(
      r1 - r0,
      [&](int i) { return base + tileIndex(r0 + i, 8 * blk, st) * W; },
      [&](int i, float (&r)[NB][4]) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
          loadX4(xp[nb] ? xp[nb] + 16 * (r0 + i) : nullptr, r[nb]);
      },
      [&](int, const float (&r)[NB][4], u32 (&b)[NB][2]) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          b[nb][0] = splitHiLo(r[nb][0], r[nb][1], lo);
          b[nb][1] = splitHiLo(r[nb][2], r[nb][3], lo);
        }
      },
      smem + warp * kRing, acc);
  __syncthreads(); // every ring drained: the buffer becomes zs
  if (SUM != 0) {
    denseTrellisFixedTail<NB, NW, BATCH, SUM>(
        acc, smem, scratch, counters, svh, y, batch, y_stride, out_valid, blk,
        sb, nSB, lastBlock);
    return;
  }

  // D fragment: batch row j4 (+4), columns 16c + g (+8): hi + lo parts.
  float *zs = reinterpret_cast<float *>(smem);
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = j4 + 4 * nb;
    if (b >= batch)
      continue;
    float *row = zs + (warp * BATCH + b) * 128;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      row[16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
      row[16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
    }
  }
  __syncthreads();

  // The block's sum over its NW chunks (warp order); batch rows spread
  // over the warps. One block per output block: that is the result.
  float *part = scratch + ((long long)blk * nSB + sb) * batch * 128;
  for (int b = warp; b < batch; b += NW) {
    float v[4];
    denseWarpSum<NW, BATCH>(zs, b, v);
    if (nSB == 1)
      denseStore<BATCH>(v, b, blk, svh, y, y_stride, out_valid);
    else
      __stcg(reinterpret_cast<float4 *>(part + b * 128 + 4 * lane),
             make_float4(v[0], v[1], v[2], v[3]));
  }
  if (nSB == 1)
    return;

  // Integer arrival counter per output block (the moe_trellis protocol,
  // per block): the last block to arrive reduces and resets it.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int old = atomicAdd(&counters[blk], 1);
    lastBlock = old == nSB - 1;
    if (lastBlock)
      counters[blk] = 0;
  }
  __syncthreads();
  if (!lastBlock)
    return;
  __threadfence();

  // Last block: warp w sums the block partials sb in [w nSB/NW,
  // (w+1) nSB/NW) in order (loads eight at a time), then the NW range sums
  // are added in warp order: a fixed tree, so results are bit-reproducible.
  const float *p0 = scratch + (long long)blk * nSB * batch * 128 + 4 * lane;
  const int q0 = warp * nSB / NW, q1 = (warp + 1) * nSB / NW;
  for (int b = 0; b < batch; ++b) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = q0; q < q1; q += 8) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (q + u < q1)
          v[u] = __ldcg(reinterpret_cast<const float4 *>(
              p0 + ((long long)(q + u) * batch + b) * 128));
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (q + u < q1)
          sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
    }
    *reinterpret_cast<float4 *>(zs + (warp * BATCH + b) * 128 + 4 * lane) =
        sum;
  }
  __syncthreads();
  for (int b = warp; b < batch; b += NW) {
    float v[4];
    denseWarpSum<NW, BATCH>(zs, b, v);
    denseStore<BATCH>(v, b, blk, svh, y, y_stride, out_valid);
  }
}

} // namespace glm
