// fixed_point.cuh - the fixed-point partial sums that make a tensor-parallel
// result the same bits at every rank count.
//
// A GEMV whose inputs are split over ranks (o_proj over heads, a dense MLP's
// down over 128-channel chunks, the experts' down over halves) ends in a sum
// over units owned by different ranks. fp32 addition is not associative, so
// summing rank partials gives other bits than one rank's sum. Instead each
// unit's fp32 partial is rounded once to a multiple of 2^-kFixedFracBits and
// everything after is an int64 sum: exact, so independent of which rank
// added what (docs/passes.md, "Byte-identical across ranks"). One final
// fromFixed gives the fp32 value on every rank count.
//
// Range and resolution: 2^-28 (3.7e-9) absolute per unit; sums are exact
// while they stay below 2^35 (3.4e10) in magnitude, far beyond any fp32
// activation a model produces. A unit's partial is clamped to kFixedLimit
// (2^34) so that the conversion is always defined (inf saturates); NaN
// becomes -kFixedLimit (a visibly wrong value, never a plausible one).
//
// Host and device: the CPU twins include this file, so both round the same
// way (llrintf: round to nearest even; int64 -> float: round to nearest).
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_FIXED_HD __host__ __device__ __forceinline__
#else
#define GLM_FIXED_HD inline
#endif

namespace glm {

constexpr int kFixedFracBits = 28;
constexpr float kFixedScale = 268435456.0f;        // 2^28
constexpr float kFixedInvScale = 1.0f / 268435456.0f;
constexpr float kFixedLimit = 17179869184.0f;      // 2^34

GLM_FIXED_HD long long toFixed(float v) {
  v = v >= -kFixedLimit ? v : -kFixedLimit; // NaN takes this branch too
  v = v <= kFixedLimit ? v : kFixedLimit;
  return llrintf(v * kFixedScale); // exact scaling by a power of two
}

GLM_FIXED_HD long long toFixed(double v) {
  v = v >= -double(kFixedLimit) ? v : -double(kFixedLimit);
  v = v <= double(kFixedLimit) ? v : double(kFixedLimit);
  return llrint(v * double(kFixedScale));
}

GLM_FIXED_HD float fromFixed(long long s) {
  return float(s) * kFixedInvScale;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/// Sum over the warp's lanes: integer, so the shuffle order does not matter.
__device__ __forceinline__ long long warpSumFixed(long long v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, m);
  return v;
}

/// The end of a SUM = 1 / 2 reduction: y[i] = fromFixed(s) (or + y[i]) as
/// fp32, or (SUM 2) the int64 sum itself (+ y[i]) at y reinterpreted.
template <int SUM>
__device__ __forceinline__ void storeFixedSum(float *y, long long i,
                                              long long s, int accumulate) {
  if (SUM == 2) {
    long long *d = reinterpret_cast<long long *>(y) + i;
    *d = accumulate ? *d + s : s;
  } else {
    const float v = fromFixed(s);
    y[i] = accumulate ? y[i] + v : v;
  }
}
#endif

} // namespace glm
