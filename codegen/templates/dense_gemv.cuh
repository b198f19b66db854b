// dense_gemv.cuh - decode GEMV y = x . W^T for the dense weight formats.
//
// W is [out, in] row-major (Hugging Face orientation), x is fp32 [batch, in],
// y is fp32: y[b*out_stride + o] (= or += when accumulate). Formats
// (exlr8-format.md §6): 0 BF16; 1 FP8 block-128 (E4M3 * scale[o/128][i/128]);
// 2 FP8 per row (E4M3 * scale[o]); 3 MXFP8 (E4M3 * 2^(e8m0 - 127) per 32
// inputs). 16-byte weight loads. Requires in % 128 == 0 and 16-byte
// aligned rows (the planner pads and aligns).
// Grid: R rows per block, R = the power of two >= ceil(out / gridDim.x),
// at most one per warp; the block's warps split each row's inputs into
// S = warps / R interleaved slices, summed in slice order. A grid of
// ceil(out / warps) blocks is the plain warp-per-row GEMV (S = 1, the same
// sums); a launcher gives a short-output matrix (kv_a 576 rows, the
// indexer's 128) a larger grid so it still spreads over every SM.
// SUM (fixed_point.cuh): 0 fp32 sums as above; 1 each 16-byte load's dot
// (one product chain, the same for every rank count) rounded to fixed point
// and summed exactly in int64, y = fromFixed(sum) (+ y); 2 the same sum
// written as int64 to y (reinterpreted as long long [batch][out_stride]),
// for an int64 all-reduce. A load never straddles a 16-input boundary, so
// zeroed inputs of units another rank owns add exactly nothing.
#pragma once

#include "fixed_point.cuh"
#include "glm_common.cuh"

#define GLM_DENSE_GEMV_PARAMS                                                  \
  const float *__restrict__ x, const void *__restrict__ w,                     \
      const void *__restrict__ scale, float *__restrict__ y, int batch,        \
      int in, int out, int out_stride, int accumulate
#define GLM_DENSE_GEMV_ARGS                                                    \
  x, w, scale, y, batch, in, out, out_stride, accumulate

namespace glm {

constexpr int kFmtBf16 = 0, kFmtFp8Block = 1, kFmtFp8Row = 2, kFmtMxfp8 = 3;

/// acc[b] += W[o, i0 .. i0 + kElems) . x[b, same] for one 16-byte load q.
template <int FMT, int SCT, int BATCH>
__device__ __forceinline__ void denseChunk(const uint4 &q, int i0, int o,
                                           int in, const void *scale,
                                           const float *__restrict__ x,
                                           int batch, float (&acc)[BATCH]) {
  typedef typename StorageOf<SCT>::type SC;
  constexpr int kElems = FMT == kFmtBf16 ? 8 : 16;
  const SC *sc = static_cast<const SC *>(scale);
  float wv[kElems];
  if (FMT == kFmtBf16) {
    const __nv_bfloat16 *p = reinterpret_cast<const __nv_bfloat16 *>(&q);
#pragma unroll
    for (int t = 0; t < 8; ++t)
      wv[t] = __bfloat162float(p[t]);
  } else {
    const u8 *p = reinterpret_cast<const u8 *>(&q);
    float s = 1.0f;
    if (FMT == kFmtFp8Block)
      s = toFloat<SC>(sc[(long long)(o >> 7) * ((in + 127) >> 7) + (i0 >> 7)]);
    else if (FMT == kFmtFp8Row)
      s = toFloat<SC>(sc[o]);
    else if (FMT == kFmtMxfp8) // the 16 inputs share one 32-input exponent
      s = exp2f(float(int(static_cast<const u8 *>(
                              scale)[(long long)o * (in / 32) + (i0 >> 5)]) -
                      127));
    // Two bytes per conversion (E4M3x2 -> f16x2 is exact, f16 -> f32 too):
    // the same values as e4m3ToFloat byte by byte, in fewer instructions.
    const u32 *p32 = reinterpret_cast<const u32 *>(p);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const u32 word = p32[t >> 1];
      const __half2 h(__nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((t & 1) ? word >> 16 : word),
          __NV_E4M3));
      const float2 f = __half22float2(h);
      wv[2 * t] = f.x * s;
      wv[2 * t + 1] = f.y * s;
    }
  }
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    if (b >= batch)
      break;
    const float4 *xp =
        reinterpret_cast<const float4 *>(x + (long long)b * in + i0);
#pragma unroll
    for (int t = 0; t < kElems / 4; ++t) {
      const float4 xv = xp[t];
      acc[b] += wv[4 * t] * xv.x + wv[4 * t + 1] * xv.y +
                wv[4 * t + 2] * xv.z + wv[4 * t + 3] * xv.w;
    }
  }
}

/// A lane issues up to kDenseLoads 16-byte loads before using any of them
/// (a row is otherwise a chain of dependent-latency loads), the last round
/// predicated; chunks are added in the same order either way. 4: measured
/// on the H200 against 12 (one round for a 6144-input FP8 row, but 95
/// registers instead of 38, so fewer warps): the 36-layer step 12.235 vs
/// 12.447 ms, the LM head 507 vs 562 us (docs/perf.md, "Session 10").
constexpr int kDenseLoads = 4;
template <int FMT, int SCT, int BATCH, int SUM, int THREADS>
__device__ __forceinline__ void denseGemv(GLM_DENSE_GEMV_PARAMS) {
  static_assert(FMT >= 0 && FMT <= 3, "format");
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int kElems = FMT == kFmtBf16 ? 8 : 16; // per 16-byte load
  constexpr int kWarps = THREADS / 32;
  __shared__ float part[SUM ? 1 : kWarps][BATCH]; // slice sums (S > 1)
  __shared__ long long partFx[SUM ? kWarps : 1][BATCH];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int need = (out + gridDim.x - 1) / gridDim.x;
  int R = 1;
  while (R < need && R < kWarps)
    R *= 2;
  const int S = kWarps / R; // slices per row (a power of two)
  const int o = blockIdx.x * R + warp / S, slice = warp % S;
  const bool valid = o < out;
  if (S == 1 && !valid)
    return; // no barrier below when every row has one warp
  float acc[BATCH];
  long long fx[BATCH];
#pragma unroll
  for (int b = 0; b < BATCH; ++b)
    acc[b] = 0.0f, fx[b] = 0;
  // One 16-byte load: into acc (fp32 sums), or its own dot into fx.
  auto chunk = [&](const uint4 &q, int i0) {
    if (SUM == 0) {
      denseChunk<FMT, SCT, BATCH>(q, i0, o, in, scale, x, batch, acc);
      return;
    }
    float t[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      t[b] = 0.0f;
    denseChunk<FMT, SCT, BATCH>(q, i0, o, in, scale, x, batch, t);
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      fx[b] += toFixed(t[b]);
  };
  if (valid) {
    const int rowBytes = FMT == kFmtBf16 ? 2 * in : in;
    const uint4 *row = reinterpret_cast<const uint4 *>(
        static_cast<const u8 *>(w) + (long long)o * rowBytes);
    const int nv = in / kElems, step = 32 * S;
    for (int v = 32 * slice + lane; v < nv; v += step * kDenseLoads) {
      uint4 q[kDenseLoads];
#pragma unroll
      for (int u = 0; u < kDenseLoads; ++u)
        if (v + step * u < nv)
          q[u] = row[v + step * u];
#pragma unroll
      for (int u = 0; u < kDenseLoads; ++u)
        if (v + step * u < nv)
          chunk(q[u], (v + step * u) * kElems);
    }
  }
  if (SUM != 0) {
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      if (b >= batch)
        break;
      const long long s = warpSumFixed(fx[b]);
      if (S == 1) {
        if (lane == 0)
          storeFixedSum<SUM>(y, (long long)b * out_stride + o, s, accumulate);
      } else if (lane == 0) {
        partFx[warp][b] = s;
      }
    }
    if (S == 1)
      return;
    __syncthreads();
    if (slice != 0 || !valid)
      return;
    for (int b = lane; b < batch && b < BATCH; b += 32) {
      long long s = partFx[warp][b];
      for (int j = 1; j < S; ++j)
        s += partFx[warp + j][b];
      storeFixedSum<SUM>(y, (long long)b * out_stride + o, s, accumulate);
    }
    return;
  }
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    if (b >= batch)
      break;
    const float s = warpSum(acc[b]);
    if (S == 1) {
      if (lane == 0) {
        float *dst = y + (long long)b * out_stride + o;
        *dst = accumulate ? *dst + s : s;
      }
    } else if (lane == 0) {
      part[warp][b] = s;
    }
  }
  if (S == 1)
    return;
  __syncthreads();
  if (slice != 0 || !valid)
    return;
  for (int b = lane; b < batch && b < BATCH; b += 32) {
    float s = part[warp][b];
    for (int j = 1; j < S; ++j)
      s += part[warp + j][b];
    float *dst = y + (long long)b * out_stride + o;
    *dst = accumulate ? *dst + s : s;
  }
}

} // namespace glm
