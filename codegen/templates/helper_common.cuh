// helper_common.cuh - device helpers shared by the executor's helper families
// (embed_tokens, rms_norm_rows, kv_store, mla_*, gemv_any, ...).
//
// These families keep fp32 activations and, where the CPU reference sums in
// fp64, fp64 sums in a fixed order, so results are the same bits run to run
// and a CPU twin (runtime/twins/) can reproduce them. They are compiled with
// --fmad=false (FamilyInfo::nvrtcExtra): no multiply-add is contracted, so
// every product and sum rounds as the twin's C++ does.
// Self-contained for NVRTC: no CUDA headers (the decoders work on bits).
#pragma once

namespace glm {
namespace hx {

/// Stored element -> float, by bits. dt: 0 f32, 1 f16, 2 bf16, 3 e4m3.
/// Both decoders place the magnitude bits in an fp32's exponent/mantissa and
/// rescale by the bias difference (2^112, 2^120): exact for normals and
/// subnormals (no ftz), a handful of integer ops instead of ldexpf.
__device__ __forceinline__ float halfBits(unsigned short h) {
  const unsigned mag = h & 0x7fffu;
  float v = __uint_as_float(mag << 13) * __uint_as_float(0x77800000u);
  if (mag >= 0x7c00u) // inf / NaN
    v = __int_as_float(mag > 0x7c00u ? 0x7fc00000 : 0x7f800000);
  return (h & 0x8000u) ? -v : v;
}
__device__ __forceinline__ float e4m3Bits(unsigned char b) {
  const unsigned mag = b & 0x7fu;
  float v = __uint_as_float(mag << 20) * __uint_as_float(0x7b800000u);
  if (mag == 0x7fu) // E4M3 has NaN only (S.1111.111)
    v = __int_as_float(0x7fc00000);
  return (b & 0x80u) ? -v : v;
}
__device__ __forceinline__ float ldAny(const void *p, long long i, int dt) {
  switch (dt) {
  case 0:
    return ((const float *)p)[i];
  case 1:
    return halfBits(((const unsigned short *)p)[i]);
  case 2:
    return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
  default:
    return e4m3Bits(((const unsigned char *)p)[i]);
  }
}

/// Sum of every thread's v over the block in fp64, in a fixed tree order
/// (red[t] += red[t + s] for s = nt/2, nt/4, .., 1; blockDim.x a power of
/// two <= 1024). All threads get it.
__device__ __forceinline__ double blockSumD(double v) {
  __shared__ double red[1024];
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s)
      red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();
  return r;
}

/// Sum of every thread's v over the block in fp64 by shuffles: a butterfly
/// in each warp (offsets 16, 8, .., 1), then the warp sums (in warp order,
/// zeros past the last warp) by a second butterfly. Every lane of a
/// butterfly adds the same pairs, so every thread gets the same bits, run to
/// run and block to block. blockDim.x a multiple of 32.
__device__ __forceinline__ double blockSumFixedD(double v) {
  __shared__ double wsum[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0)
    wsum[w] = v;
  __syncthreads();
  double s = lane < (int)(blockDim.x >> 5) ? wsum[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads(); // wsum is reused by the next call
  return s;
}

/// fp32 butterfly over a warp (offsets 16, 8, .., 1): every lane the sum.
__device__ __forceinline__ float warpSumF(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Interleaved RoPE of pair i of p (dim values) at position pos, in fp64.
__device__ __forceinline__ void ropePair(float *p, int i, int dim, int pos,
                                         double theta) {
  double invFreq = pow(theta, -2.0 * (double)i / (double)dim);
  double angle = (double)pos * invFreq;
  double c = cos(angle), s = sin(angle);
  double a = p[2 * i], bb = p[2 * i + 1];
  p[2 * i] = (float)(a * c - bb * s);
  p[2 * i + 1] = (float)(bb * c + a * s);
}

/// The scale of element (o, i) of a stored [out, in] weight: sk 0 none, 1
/// FP8 block-128 (f32 scales), 2 FP8 row (f32), 3 MXFP8 (e8m0 bytes per 32
/// inputs), as the dense weights are stored.
__device__ __forceinline__ float e8m0Scale(unsigned char e) {
  return exp2f(float(int(e) - 127));
}

} // namespace hx
} // namespace glm
