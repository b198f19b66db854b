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
// indexer's 128) a larger grid so it still spreads over every SM. ROWS > 1
// (template): each warp computes ROWS consecutive rows (denseGemvRows), a
// block a power-of-two multiple of ROWS. HINT 1 streams the weight loads
// past L1.
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

/// A lane issues up to kDenseLoads 16-byte loads before using any of them
/// (a row is otherwise a chain of dependent-latency loads), the last round
/// predicated; chunks are added in the same order either way. 4: measured
/// on the H200 against 12 (one round for a 6144-input FP8 row, but 95
/// registers instead of 38, so fewer warps): the 36-layer step 12.235 vs
/// 12.447 ms, the LM head 507 vs 562 us (docs/perf.md, "Session 10").
constexpr int kDenseLoads = 4;

/// The scale of the 16-byte load at inputs i0.. of row o, loaded with the
/// weights (the load phase) and converted when the load is used: a scale
/// read only after the weights arrive is a second memory round trip.
template <int FMT, int SCT> struct DenseScale {
  typedef typename StorageOf<SCT>::type SC;
  SC s;      // FP8 block / row scale as stored
  u32 e = 0; // MXFP8 e8m0 exponent byte
  __device__ __forceinline__ void load(const void *scale, int o, int i0,
                                       int in) {
    if (FMT == kFmtFp8Block)
      s = static_cast<const SC *>(
          scale)[(long long)(o >> 7) * ((in + 127) >> 7) + (i0 >> 7)];
    else if (FMT == kFmtFp8Row)
      s = static_cast<const SC *>(scale)[o];
    else if (FMT == kFmtMxfp8) // the 16 inputs share one 32-input exponent
      e = static_cast<const u8 *>(scale)[(long long)o * (in / 32) + (i0 >> 5)];
  }
  __device__ __forceinline__ float value() const {
    if (FMT == kFmtFp8Block || FMT == kFmtFp8Row)
      return toFloat<SC>(s);
    if (FMT == kFmtMxfp8)
      return exp2f(float(int(e) - 127));
    return 1.0f;
  }
};

/// The kElems weights of one 16-byte load q, decoded as the format defines
/// them (times the load's scale s).
template <int FMT>
__device__ __forceinline__ void denseDecode(const uint4 &q, float s,
                                            float (&wv)[FMT == 0 ? 8 : 16]) {
  if (FMT == kFmtBf16) {
    const __nv_bfloat16 *p = reinterpret_cast<const __nv_bfloat16 *>(&q);
#pragma unroll
    for (int t = 0; t < 8; ++t)
      wv[t] = __bfloat162float(p[t]);
  } else {
    // Two bytes per conversion (E4M3x2 -> f16x2 is exact, f16 -> f32 too):
    // the same values as e4m3ToFloat byte by byte, in fewer instructions.
    const u32 *p32 = reinterpret_cast<const u32 *>(&q);
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
}

/// acc += wv . xv, four products a term: every path of the family sums a
/// load's products in this one expression (the same FMA contraction).
template <int E>
__device__ __forceinline__ void denseDot(const float (&wv)[E],
                                         const float (&xv)[E], float &acc) {
#pragma unroll
  for (int t = 0; t < E / 4; ++t)
    acc += wv[4 * t] * xv[4 * t] + wv[4 * t + 1] * xv[4 * t + 1] +
           wv[4 * t + 2] * xv[4 * t + 2] + wv[4 * t + 3] * xv[4 * t + 3];
}

/// The kElems inputs i0.. of x row b.
template <int E>
__device__ __forceinline__ void denseInputs(const float *__restrict__ x, int b,
                                            int in, int i0, float (&xv)[E]) {
  const float4 *xp = reinterpret_cast<const float4 *>(x + (long long)b * in + i0);
#pragma unroll
  for (int t = 0; t < E / 4; ++t) {
    const float4 v = xp[t];
    xv[4 * t] = v.x, xv[4 * t + 1] = v.y, xv[4 * t + 2] = v.z,
           xv[4 * t + 3] = v.w;
  }
}

/// acc[b] += W[o, i0 .. i0 + kElems) . x[b, same] for one 16-byte load q
/// of scale s.
template <int FMT, int BATCH>
__device__ __forceinline__ void denseChunk(const uint4 &q, float s, int i0,
                                           int in, const float *__restrict__ x,
                                           int batch, float (&acc)[BATCH]) {
  constexpr int kElems = FMT == kFmtBf16 ? 8 : 16;
  float wv[kElems];
  denseDecode<FMT>(q, s, wv);
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    if (b >= batch)
      break;
    // x a float4 at a time (fewer live registers than denseInputs), summed
    // as denseDot sums.
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

/// One 16-byte weight load. HINT 1 streams it past L1
/// (ld.global.nc.L1::no_allocate): each weight byte is read once, while the
/// x row every warp of the SM re-reads stays in L1.
template <int HINT>
__device__ __forceinline__ uint4 denseLoad(const uint4 *row, int i) {
  if (HINT == 0)
    return row[i];
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(row + i));
  return v;
}

/// Adds a load's dot to a row's sum: into acc (fp32 sums), or rounded to
/// fixed point into fx (SUM 1, 2).
template <int SUM>
__device__ __forceinline__ void denseAdd(float t, float &acc, long long &fx) {
  if (SUM == 0)
    acc += t;
  else
    fx += toFixed(t);
}

/// Writes one row's sum (lane 0 of the warp that owns it).
template <int SUM>
__device__ __forceinline__ void denseStore(float *y, long long at, float acc,
                                           long long fx, int accumulate) {
  if (SUM != 0) {
    storeFixedSum<SUM>(y, at, fx, accumulate);
    return;
  }
  float *dst = y + at;
  *dst = accumulate ? *dst + acc : acc;
}

/// ROWS > 1 rows per warp. A block computes RB rows (the power of two >=
/// ceil(out / gridDim.x), at least ROWS, at most warps * ROWS): G = RB /
/// ROWS groups of ROWS consecutive rows, each group's inputs split over
/// S = warps / G warps in interleaved slices summed in slice order (as the
/// one-row path). The lane's x inputs of a load are read once for the ROWS
/// rows (at batch 1), so x comes from L1 ROWS times less: the one-row
/// kernel is bound by those reads (LM head 0.44 of copy bandwidth against
/// 1.0 with 4 rows, docs/perf.md "Session 11").
template <int FMT, int SCT, int BATCH, int SUM, int ROWS, int HINT, int THREADS>
__device__ __forceinline__ void denseGemvRows(GLM_DENSE_GEMV_PARAMS) {
  constexpr int kElems = FMT == kFmtBf16 ? 8 : 16;
  constexpr int kWarps = THREADS / 32;
  // About kDenseLoads loads in flight per lane, as with one row a warp.
  constexpr int kLoads = kDenseLoads / ROWS > 0 ? kDenseLoads / ROWS : 1;
  __shared__ float part[SUM ? 1 : kWarps][ROWS][BATCH]; // slice sums
  __shared__ long long partFx[SUM ? kWarps : 1][ROWS][BATCH];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int need = (out + gridDim.x - 1) / gridDim.x;
  int RB = ROWS;
  while (RB < need && RB < kWarps * ROWS)
    RB *= 2;
  const int S = kWarps / (RB / ROWS); // slices per group (a power of two)
  const int o0 = blockIdx.x * RB + (warp / S) * ROWS, slice = warp % S;
  const bool valid = o0 < out;
  if (S == 1 && !valid)
    return; // no barrier below when every group has one warp
  float acc[ROWS][BATCH];
  long long fx[ROWS][BATCH];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      acc[r][b] = 0.0f, fx[r][b] = 0;
  if (valid) {
    const long long rowBytes = FMT == kFmtBf16 ? 2LL * in : in;
    const uint4 *row0 = reinterpret_cast<const uint4 *>(
        static_cast<const u8 *>(w) + o0 * rowBytes);
    const int rowVecs = int(rowBytes / 16), nv = in / kElems, step = 32 * S;
    for (int v = 32 * slice + lane; v < nv; v += step * kLoads) {
      uint4 q[kLoads][ROWS];
      DenseScale<FMT, SCT> sc[kLoads][ROWS];
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
          if (v + step * u < nv && o0 + r < out) {
            q[u][r] =
                denseLoad<HINT>(row0 + (long long)r * rowVecs, v + step * u);
            sc[u][r].load(scale, o0 + r, (v + step * u) * kElems, in);
          }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int i0 = (v + step * u) * kElems;
        if (v + step * u >= nv)
          break;
        // Batch 1: x read once for the ROWS rows. Larger batches decode
        // each row once and read x per row (registers for ROWS x BATCH
        // inputs).
        float xv1[kElems];
        if (BATCH == 1)
          denseInputs(x, 0, in, i0, xv1);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (o0 + r >= out)
            break;
          float wv[kElems];
          denseDecode<FMT>(q[u][r], sc[u][r].value(), wv);
#pragma unroll
          for (int b = 0; b < BATCH; ++b) {
            if (b >= batch)
              break;
            float xv[kElems];
            if (BATCH == 1) {
#pragma unroll
              for (int e = 0; e < kElems; ++e)
                xv[e] = xv1[e];
            } else {
              denseInputs(x, b, in, i0, xv);
            }
            float t = 0.0f;
            denseDot(wv, xv, SUM == 0 ? acc[r][b] : t);
            if (SUM != 0)
              denseAdd<SUM>(t, acc[r][b], fx[r][b]);
          }
        }
      }
    }
  }
  // Warp sums; one warp a group stores, else slice sums in slice order.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      if (b >= batch)
        break;
      const float s = SUM == 0 ? warpSum(acc[r][b]) : 0.0f;
      const long long f = SUM != 0 ? warpSumFixed(fx[r][b]) : 0;
      if (lane != 0)
        continue;
      if (S > 1) {
        if (SUM == 0)
          part[warp][r][b] = s;
        else
          partFx[warp][r][b] = f;
      } else if (o0 + r < out) {
        denseStore<SUM>(y, (long long)b * out_stride + o0 + r, s, f,
                        accumulate);
      }
    }
  }
  if (S == 1)
    return;
  __syncthreads();
  if (slice != 0 || !valid)
    return;
  for (int i = lane; i < ROWS * BATCH; i += 32) {
    const int r = i / BATCH, b = i % BATCH;
    if (b >= batch || o0 + r >= out)
      continue;
    float s = 0.0f;
    long long f = 0;
    for (int j = 0; j < S; ++j) {
      if (SUM == 0)
        s = j ? s + part[warp + j][r][b] : part[warp][r][b];
      else
        f += partFx[warp + j][r][b];
    }
    denseStore<SUM>(y, (long long)b * out_stride + o0 + r, s, f, accumulate);
  }
}

template <int FMT, int SCT, int BATCH, int SUM, int ROWS, int HINT,
          int THREADS>
__device__ __forceinline__ void denseGemv(GLM_DENSE_GEMV_PARAMS) {
  static_assert(FMT >= 0 && FMT <= 3, "format");
  static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4, "rows per warp 1, 2, 4");
  static_assert(HINT == 0 || HINT == 1, "weight loads: cached or streamed");
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  static_assert(BATCH >= 1 && BATCH <= 8, "batch 1..8");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  constexpr int kElems = FMT == kFmtBf16 ? 8 : 16; // per 16-byte load
  constexpr int kWarps = THREADS / 32;
  __shared__ float part[SUM ? 1 : kWarps][BATCH]; // slice sums (S > 1)
  __shared__ long long partFx[SUM ? kWarps : 1][BATCH];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int need = (out + gridDim.x - 1) / gridDim.x;
  if (ROWS > 1) {
    denseGemvRows<FMT, SCT, BATCH, SUM, ROWS, HINT, THREADS>(
        GLM_DENSE_GEMV_ARGS);
    return;
  }
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
  auto chunk = [&](const uint4 &q, float s, int i0) {
    if (SUM == 0) {
      denseChunk<FMT, BATCH>(q, s, i0, in, x, batch, acc);
      return;
    }
    float t[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      t[b] = 0.0f;
    denseChunk<FMT, BATCH>(q, s, i0, in, x, batch, t);
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
      DenseScale<FMT, SCT> sc[kDenseLoads];
#pragma unroll
      for (int u = 0; u < kDenseLoads; ++u)
        if (v + step * u < nv) {
          q[u] = denseLoad<HINT>(row, v + step * u);
          sc[u].load(scale, o, (v + step * u) * kElems, in);
        }
#pragma unroll
      for (int u = 0; u < kDenseLoads; ++u)
        if (v + step * u < nv)
          chunk(q[u], sc[u].value(), (v + step * u) * kElems);
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
