// mla_rows16_layout.cuh - where mla_rows16 puts a slot's cache rows in the
// fp16 forms mla_prefill's tensor cores take, and where mla_prefill<keys =
// rows16> gathers them (host and device; codegen/mla_prefill_abi.h, the
// twins and the footprints include it too). For maxCtx rows of a latent of
// kvr + dr values:
//   byte 0                 keys   [maxCtx][keyHalves] fp16: the row times
//                          2^e (e = 15 - exponent of its max |value|, within
//                          [-126, 100]), zero past kvr + dr
//   valueOffset            values [maxCtx][kvr] fp16: the first kvr values
//                          times 2^e (e within [-15, 0]: only large rows
//                          scaled, down)
//   keyScaleOffset         [maxCtx] fp32 2^-e of the key rows
//   valueScaleOffset       [maxCtx] fp32 2^-e of the value rows
// Those are the bits mla_prefill's per-tile conversion of a cache row
// makes; rows16 makes them once per chunk instead of once per query row.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_R16_HD __host__ __device__ __forceinline__
#else
#define GLM_R16_HD inline
#endif

namespace glm {
namespace rows16 {

/// Halves of a key row: the latent padded to whole k16 steps.
GLM_R16_HD constexpr long long keyHalves(long long kvr, long long dr) {
  return (kvr + dr + 15) / 16 * 16;
}
GLM_R16_HD constexpr long long valueOffset(long long maxCtx, long long kvr,
                                           long long dr) {
  return maxCtx * keyHalves(kvr, dr) * 2;
}
GLM_R16_HD constexpr long long keyScaleOffset(long long maxCtx, long long kvr,
                                              long long dr) {
  return valueOffset(maxCtx, kvr, dr) + maxCtx * kvr * 2;
}
GLM_R16_HD constexpr long long valueScaleOffset(long long maxCtx,
                                                long long kvr, long long dr) {
  return keyScaleOffset(maxCtx, kvr, dr) + maxCtx * 4;
}
/// Bytes of the whole buffer.
GLM_R16_HD constexpr long long bytes(long long maxCtx, long long kvr,
                                     long long dr) {
  return valueScaleOffset(maxCtx, kvr, dr) + maxCtx * 4;
}
/// Rows (warps) of one mla_rows16 block of 256 threads.
constexpr int kRowsPerBlock = 8;
/// Exponent bounds of the key and value rows' scales (mp::scaleExp).
constexpr int kKeyLo = -126, kKeyHi = 100, kValueLo = -15, kValueHi = 0;

} // namespace rows16
} // namespace glm
