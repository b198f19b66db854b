// mla_out.cuh - absorbed MLA, launch 3 of 3:
// ov[b][h*dv + j] = sum_c W[h*(dn+dv) + dn + j][c] * ctx[b][h][c], W as in
// mla_qabs. A warp per kMlaOutRows consecutive outputs (its ctx loads
// shared, the rows' weight loads in flight together; one row per warp left
// ~0.5 KB in flight per warp and ran in ~4 waves), lanes over channels,
// fp32 products, hx::warpSumF.
#pragma once

#include "mla_common.cuh"

#define GLM_MLA_OUT_PARAMS                                                     \
  const void *W, int dt, const void *scale, int sk, const float *ctxAll,       \
      const int *heads, float *ovAll, int H, int dn, int dv, int kvr
#define GLM_MLA_OUT_ARGS W, dt, scale, sk, ctxAll, heads, ovAll, H, dn, dv, kvr

namespace glm {
namespace hx {

/// Output rows per warp.
constexpr int kMlaOutRows = 4;

/// Scalar path: lane sums columns c = lane + 32k of row o in order.
template <int DT, int SK>
__device__ __forceinline__ void
mlaOutRun(float &a, const void *W, int dt, const void *scale, int sk,
          const float *ctx, long long o, int lane, int kvr) {
  a = 0.0f;
  int c = lane;
  for (; c + 32 * (kMlaBatch - 1) < kvr; c += 32 * kMlaBatch) {
    float v[kMlaBatch], x[kMlaBatch];
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k) {
      v[k] = ldWT<DT, SK>(W, dt, scale, sk, o, c + 32 * k, kvr);
      x[k] = ctx[c + 32 * k];
    }
#pragma unroll
    for (int k = 0; k < kMlaBatch; ++k)
      a += v[k] * x[k];
  }
  for (; c < kvr; c += 32)
    a += ldWT<DT, SK>(W, dt, scale, sk, o, c, kvr) * ctx[c];
}
/// Raw 4-element weight words (loaded first, decoded at the products, so a
/// warp's loads are all in flight without holding decoded floats).
template <int D> struct RawOf { typedef uint2 T; };
template <> struct RawOf<0> { typedef uint4 T; };
template <> struct RawOf<3> { typedef unsigned T; };
template <int D>
__device__ __forceinline__ void dec4(const typename RawOf<D>::T &q,
                                     float (&v)[4]);
template <>
__device__ __forceinline__ void dec4<0>(const uint4 &q, float (&v)[4]) {
  v[0] = __uint_as_float(q.x);
  v[1] = __uint_as_float(q.y);
  v[2] = __uint_as_float(q.z);
  v[3] = __uint_as_float(q.w);
}
template <>
__device__ __forceinline__ void dec4<1>(const uint2 &q, float (&v)[4]) {
  v[0] = halfBits((unsigned short)q.x);
  v[1] = halfBits((unsigned short)(q.x >> 16));
  v[2] = halfBits((unsigned short)q.y);
  v[3] = halfBits((unsigned short)(q.y >> 16));
}
template <>
__device__ __forceinline__ void dec4<2>(const uint2 &q, float (&v)[4]) {
  v[0] = __uint_as_float(q.x << 16);
  v[1] = __uint_as_float(q.x & 0xffff0000u);
  v[2] = __uint_as_float(q.y << 16);
  v[3] = __uint_as_float(q.y & 0xffff0000u);
}
template <>
__device__ __forceinline__ void dec4<3>(const unsigned &q, float (&v)[4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t)
    v[t] = e4m3Bits((unsigned char)(q >> (8 * t)));
}
/// Chunked path: lane l takes columns c = 4l + 128m (m in order): 4-element
/// weight loads and float4 ctx loads, both contiguous across the warp.
/// (Lanes over 16-column chunks read ctx with a 64-byte lane stride: ~16 L1
/// wavefronts per load, which was most of this kernel's ~36 us per layer.)
/// Rows o0 .. o0 + nr - 1 (nr <= kMlaOutRows); per group a[r] +=
/// ((v0*x0 + v1*x1) + v2*x2) + v3*x3; MB column groups per row in flight.
template <int DT, int SK>
__device__ __forceinline__ void
mlaOutVec(float (&a)[kMlaOutRows], const void *W, const void *scale,
          const float *ctx, long long o0, int nr, int lane, int kvr) {
  if (DT < 0 || (SK != 0 && DT != 3))
    return;
  constexpr int D = DT < 0 ? 0 : DT, MB = D == 0 ? 2 : 4;
  constexpr int kBytes = D == 0 ? 4 : D == 3 ? 1 : 2;
  typedef typename RawOf<D>::T Raw;
  const unsigned char *wb = static_cast<const unsigned char *>(W);
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r)
    a[r] = 0.0f;
  for (int c0 = 4 * lane; c0 < kvr; c0 += 128 * MB) {
    Raw q[kMlaOutRows][MB];
    float sc[kMlaOutRows][MB];
    float4 x[MB];
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const int c = c0 + 128 * m;
      x[m] = c < kvr ? *reinterpret_cast<const float4 *>(ctx + c)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int r = 0; r < kMlaOutRows; ++r) {
        q[r][m] = Raw();
        sc[r][m] = 0.0f;
        if (c < kvr && r < nr) {
          q[r][m] = *reinterpret_cast<const Raw *>(wb + ((o0 + r) * kvr + c) *
                                                            kBytes);
          sc[r][m] = scaleAt<SK>(scale, o0 + r, c, kvr);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMlaOutRows; ++r)
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        float v[4];
        dec4<D>(q[r][m], v);
        if (SK != 0)
#pragma unroll
          for (int t = 0; t < 4; ++t)
            v[t] *= sc[r][m];
        a[r] += v[0] * x[m].x + v[1] * x[m].y + v[2] * x[m].z + v[3] * x[m].w;
      }
  }
}
template <int DT, int SK>
__device__ __forceinline__ void
mlaOutRows(float (&a)[kMlaOutRows], const void *W, int dt, const void *scale,
           int sk, const float *ctx, long long o0, int nr, int lane, int kvr) {
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r) {
    a[r] = 0.0f;
    if (r < nr)
      mlaOutRun<DT, SK>(a[r], W, dt, scale, sk, ctx, o0 + r, lane, kvr);
  }
}

} // namespace hx

/// Block: THREADS/32 warps of kMlaOutRows outputs of one head. Grid
/// (nHeads * ceil(dv / (THREADS/32 * kMlaOutRows)), B).
template <int THREADS>
__device__ __forceinline__ void mlaOut(GLM_MLA_OUT_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  using hx::kMlaOutRows;
  const int rowsB = THREADS / 32 * kMlaOutRows, per = (dv + rowsB - 1) / rowsB;
  const int h = heads[blockIdx.x / per];
  const int j0 = (blockIdx.x % per) * rowsB + (threadIdx.x >> 5) * kMlaOutRows;
  const int lane = threadIdx.x & 31, b = blockIdx.y;
  if (j0 >= dv) // the whole warp
    return;
  const int nr = dv - j0 < kMlaOutRows ? dv - j0 : kMlaOutRows;
  const long long o0 = (long long)h * (dn + dv) + dn + j0;
  const float *ctx = ctxAll + ((long long)b * H + h) * kvr; // (kvr)
  float a[kMlaOutRows] = {};
  if (hx::vecOk(W, dt, sk, kvr)) {
    GLM_MLA_DISPATCH(dt, sk, hx::mlaOutVec, a, W, scale, ctx, o0, nr, lane,
                     kvr);
  } else {
    GLM_MLA_DISPATCH(dt, sk, hx::mlaOutRows, a, W, dt, scale, sk, ctx, o0, nr,
                     lane, kvr);
  }
#pragma unroll
  for (int r = 0; r < kMlaOutRows; ++r) {
    const float v = hx::warpSumF(a[r]);
    if (lane == 0 && r < nr)
      ovAll[(long long)b * H * dv + (long long)h * dv + j0 + r] = v;
  }
}

} // namespace glm
