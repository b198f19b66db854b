// dense_trellis.cuh - decode GEMV of a dense trellis matrix, split-k wide.
//
// Replaces dense_gemv_trellis (one warp per 16-column tile column, every
// input tile serially) for decode: work is cut into one-warp items so that
// thousands of warps stream the trellis bytes at once, and each 16x16 tile is
// decoded by one warp straight into an mma.sync m16n8k16 A fragment
// (trellis_tile.cuh: weights as A, activations as B, fp32 accumulation).
//
//   item = (128-output block blk = 8 tile columns, k-chunk s of tile rows).
//     z_s = xh[rows of chunk s] . T[:, 128 blk ..]   stored as a partial.
//   The last item of blk to finish (integer arrival counter) sums the
//   partials in fixed order s = 0, 1, ... and writes
//     y[b][128 blk + j] = (svh ? H(z)[j] * svh[128 blk + j] / sqrt128 : z[j])
//   for j < out_valid - 128 blk (the padded tail is not written).
//   The order is fixed and the counters are integers, so results are
//   bit-reproducible run to run whichever warp finishes last.
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
//   scratch   f32, DenseTrellisDims::scratchFloats() = out*split*batch
//             (codegen/dense_trellis_abi.h): partials [blk][s][b][128]
//   counters  int, out/128 of them, zero before the first launch; every
//             completed launch leaves them zero again
//   y         f32 [batch][y_stride]
//   batch, in, out   in % 16 == 0, out % 128 == 0 (the padded width:
//             DeviceLinear.outPad), 1 <= batch <= BATCH
//   y_stride  elements between rows of y (>= out_valid)
//   out_valid columns written (<= out): the unpadded output width
//   sI, sI8, sJ8   tile strides (above)
//   split     k-chunks per 128-output block, 1..in/16; chunk s covers tile
//             rows [s*R/split, (s+1)*R/split), R = in/16
// Grid (x only): ceil(out/128 * split / (THREADS/32)); block THREADS.
// A violated precondition traps (never wrong numbers).
// -------------------------------------------------------------------------
#pragma once

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

/// Integer arrival counter of dense_trellis (the moe_trellis protocol): true
/// in the one warp that arrives last; it then owns the reduction and resets
/// the counter for the next launch.
__device__ __forceinline__ bool denseArriveLast(int *counter, int expected) {
  __threadfence();
  __syncwarp();
  int old = 0;
  if ((threadIdx.x & 31) == 0)
    old = atomicAdd(counter, 1);
  old = __shfl_sync(0xFFFFFFFFu, old, 0);
  if (old != expected - 1)
    return false;
  __threadfence();
  if ((threadIdx.x & 31) == 0)
    *counter = 0;
  return true;
}

template <int K, int CB, bool E4M3, int BATCH, int PIPE, int MINBLOCKS,
          int THREADS>
__device__ __forceinline__ void denseTrellis(GLM_DENSE_TRELLIS_PARAMS) {
  (void)MINBLOCKS; // __launch_bounds__(THREADS, MINBLOCKS) on the entry
  static_assert(K >= 1 && K <= 8, "K in 1..8");
  static_assert(CB >= 0 && CB <= 2, "codebook: 3inst, mcg or mul1");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(PIPE == 0 || (PIPE >= 2 && PIPE <= 8), "pipe: 0 or 2..8");
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 512,
                "THREADS: 1..16 warps");
  constexpr int NB = kNB(BATCH), W = TileLane<K>::kWords;
  constexpr int kRing = PIPE ? PIPE * 8 * W : 1;
  static_assert(THREADS / 32 * kRing * 4 <= 32768,
                "cp.async ring over 32 KB: fewer stages or threads");
  __shared__ __align__(16) u32 ring[THREADS / 32][kRing];
  const int nRows = in >> 4, nBlk = out >> 7;
  if (batch < 1 || batch > BATCH || (in & 15) || (out & 127) || in <= 0 ||
      split < 1 || split > nRows || out_valid > out || y_stride < out_valid)
    __trap();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j4 = lane & 3, g = lane >> 2;
  const long long item = (long long)blockIdx.x * (THREADS / 32) + warp;
  if (item >= (long long)nBlk * split)
    return;
  const int blk = int(item / split), s = int(item % split);
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
      ring[warp], acc);

  // D fragment: batch row j4 (+4), columns 16c + g (+8): hi + lo parts.
  float *part = scratch + ((long long)blk * split + s) * batch * 128;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int b = j4 + 4 * nb;
    if (b >= batch)
      continue;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      part[b * 128 + 16 * c + g] = acc[nb][c][0] + acc[nb][c][1];
      part[b * 128 + 16 * c + g + 8] = acc[nb][c][2] + acc[nb][c][3];
    }
  }
  if (split > 1) {
    if (!denseArriveLast(&counters[blk], split))
      return;
  } else {
    __syncwarp(); // this warp's own partial, read back below
  }

  // Last item of blk: partials summed in order s = 0, 1, ...; loads issued
  // eight at a time (the sum order does not change).
  const float *src0 = scratch + (long long)blk * split * batch * 128;
  for (int b = 0; b < batch; ++b) {
    const float *src = src0 + b * 128 + 4 * lane;
    float4 sum = __ldcg(reinterpret_cast<const float4 *>(src));
    for (int s0 = 1; s0 < split; s0 += 8) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (s0 + u < split)
          v[u] = __ldcg(reinterpret_cast<const float4 *>(
              src + (long long)(s0 + u) * batch * 128));
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (s0 + u < split)
          sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
    }
    float v[4] = {sum.x, sum.y, sum.z, sum.w};
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
}

} // namespace glm
