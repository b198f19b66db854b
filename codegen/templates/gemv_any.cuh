// gemv_any.cuh - the fallback GEMV for dense weights the codegen dense_gemv
// cannot take (F16, or inputs not a multiple of 128):
// y[b*ys + o] = sum_i W[o, i] x[b*xs + i] in fp32, W stored as dt (0 f32,
// 1 f16, 2 bf16, 3 e4m3) with scales sk (0 none, 1 FP8 block-128 f32, 2 FP8
// row f32, 3 MXFP8 e8m0 bytes per 32 inputs).
// SUM (fixed_point.cuh): 0 fp32 lane sums; 1 every product rounded to
// fixed point and summed in int64, y = fromFixed(sum); 2 the int64 sum
// written to y reinterpreted as long long (for an int64 all-reduce).
#pragma once

#include "fixed_point.cuh"
#include "helper_common.cuh"

#define GLM_GEMV_ANY_PARAMS                                                    \
  const float *x, int xs, const void *w, int dt, const void *scale, int sk,    \
      float *y, int ys, int in, int out
#define GLM_GEMV_ANY_ARGS x, xs, w, dt, scale, sk, y, ys, in, out

namespace glm {

/// One warp per output row: lane l sums inputs i = l, l+32, .. in order,
/// then a butterfly (offsets 16 .. 1). Grid (ceil(out/(THREADS/32)), B).
template <int SUM, int THREADS>
__device__ __forceinline__ void gemvAny(GLM_GEMV_ANY_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  static_assert(SUM >= 0 && SUM <= 2, "sum: f32, fixed or fixed_out");
  const int lane = threadIdx.x & 31, b = blockIdx.y;
  const int o = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
  if (o >= out)
    return;
  const float *xb = x + (long long)b * xs; // (in)
  float acc = 0.0f;
  long long fx = 0;
  for (int i = lane; i < in; i += 32) {
    float v = hx::ldAny(w, (long long)o * in + i, dt);
    if (sk == 1)
      v *= ((const float *)
                scale)[(long long)(o >> 7) * ((in + 127) >> 7) + (i >> 7)];
    else if (sk == 2)
      v *= ((const float *)scale)[o];
    else if (sk == 3)
      v *= hx::e8m0Scale(
          ((const unsigned char *)scale)[(long long)o * (in / 32) + (i >> 5)]);
    if (SUM)
      fx += toFixed(v * xb[i]);
    else
      acc += v * xb[i];
  }
  if (SUM) {
    fx = warpSumFixed(fx);
    if (lane == 0)
      storeFixedSum<SUM>(y, (long long)b * ys + o, fx, 0);
    return;
  }
  for (int s = 16; s > 0; s >>= 1)
    acc += __shfl_xor_sync(0xFFFFFFFFu, acc, s);
  if (lane == 0)
    y[(long long)b * ys + o] = acc;
}

} // namespace glm
