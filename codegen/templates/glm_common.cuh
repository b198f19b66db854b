// glm_common.cuh - shared device helpers of the glm kernel templates.
//
// Self-contained for NVRTC: only cuda_fp16.h, cuda_bf16.h and cuda_fp8.h.
// Trellis facts follow shared/specs/exl3-format.md §1-2 and exlr8-format.md
// §5: 16-bit tail-biting windows over a tile's circular 256*K-bit stream,
// MSB-first inside little-endian 32-bit words, the three codebooks, the
// optional E4M3 rounding after the fp16 sum, and the m16n8k16 permutation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/// +infinity without <math.h> (NVRTC has no INFINITY macro).
#define GLM_INF __int_as_float(0x7f800000)

namespace glm {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char u8;

constexpr float kInvSqrt128 = 0.088388347648318f; // 1/sqrt(128)

// Codebook ids as in exl3-format.md §1.1.
constexpr int kCb3Inst = 0;
constexpr int kCbMcg = 1;
constexpr int kCbMul1 = 2;

/// Value of a 16-bit trellis state under codebook CB, as the fp16 the format
/// defines (RN16 of the exact sum), optionally rounded on to E4M3 (exlr8).
template <int CB, bool E4M3> __device__ __forceinline__ float decodeState(u32 s) {
  float v;
  if (CB == kCbMul1) {
    u32 y = s * 0x83DCD12Du;
    int b = int((y & 0xFF) + ((y >> 8) & 0xFF) + ((y >> 16) & 0xFF) + (y >> 24));
    // Closed form (1774*b - 905216) / 2^18: exact in fp32, one RN16.
    v = __half2float(__float2half_rn(float(1774 * b - 905216) * (1.0f / 262144.0f)));
  } else {
    u32 y = CB == kCb3Inst ? s * 89226354u + 64248484u : s * 0xCBAC1FEDu;
    y = (y & 0x8FFF8FFFu) ^ 0x3B603B60u;
    __half lo = __ushort_as_half((unsigned short)(y & 0xFFFF));
    __half hi = __ushort_as_half((unsigned short)(y >> 16));
    // The sum of two such halves is exact in fp32; round once to fp16.
    v = __half2float(__float2half_rn(__half2float(lo) + __half2float(hi)));
  }
  if (E4M3) {
    // exlr8 double rounding: fp16, then E4M3 (RNE, saturating).
    __nv_fp8_e4m3 q(v);
    v = float(q);
  }
  return v;
}

/// The 16 stream bits ending (exclusive) at bit `end` of a tile's circular
/// stream of `nbits` bits stored MSB-first in `nwords` 32-bit words.
__device__ __forceinline__ u32 window16(const u32 *words, int nwords, int nbits,
                                        int end) {
  int start = end - 16;
  if (start < 0)
    start += nbits;
  int w = start >> 5;
  int w1 = w + 1 == nwords ? 0 : w + 1;
  u64 v = (u64(words[w]) << 32) | u64(words[w1]);
  return u32(v >> (48 - (start & 31))) & 0xFFFFu;
}

/// Decodes the 8 positions t = 8*lane + e (e = 0..7) of one tile whose words
/// sit in `words` (shared memory), width K. Returns them in `v[e]`; their
/// (row, col) inside the tile is tileRow(lane, e), tileCol(lane, e).
template <int K, int CB, bool E4M3>
__device__ __forceinline__ void decodeLane8(const u32 *words, int lane, float v[8]) {
  constexpr int kWords = 8 * K;
  constexpr int kBits = 256 * K;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    v[e] = decodeState<CB, E4M3>(window16(words, kWords, kBits, (8 * lane + e + 1) * K));
}

/// m16n8k16 B-fragment order (exl3-format.md §2.3).
__device__ __forceinline__ int tileRow(int lane, int e) {
  return 2 * (lane & 3) + (e & 1) + 8 * ((e >> 1) & 1);
}
__device__ __forceinline__ int tileCol(int lane, int e) {
  return (lane >> 2) + 8 * (e >> 2);
}

/// Tile (i, j) of a trellis matrix (i: 16-row block on the input side, j:
/// 16-column block on the output side) as a tile index, for every layout the
/// packs use: idx = (i>>3)*sI8 + (i&7)*sI + (j>>3)*sJ8 + (j&7).
/// EXL3 row-major (n cols): sI = n/16, sI8 = n/2, sJ8 = 8.
/// exlr8 gate/up half [k16][c]: sI = 8, sI8 = 64. exlr8 down half [b][r][c]:
/// sI = 8, sJ8 = 64.
struct TileStrides {
  int sI, sI8, sJ8;
};
__device__ __forceinline__ long long tileIndex(int i, int j, TileStrides s) {
  return (long long)(i >> 3) * s.sI8 + (long long)(i & 7) * s.sI +
         (long long)(j >> 3) * s.sJ8 + (j & 7);
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

/// Block-wide sum; every thread gets the result. `red` holds >= 32 floats.
template <int THREADS> __device__ __forceinline__ float blockSum(float v, float *red) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  v = warpSum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? red[lane] : 0.0f;
  return warpSum(v);
}
template <int THREADS> __device__ __forceinline__ float blockMax(float v, float *red) {
  v = warpMax(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? red[lane] : -GLM_INF;
  return warpMax(v);
}

/// Unnormalised Sylvester Hadamard of 128 values held 4 per lane (lane L has
/// elements 4L..4L+3): two butterfly stages in registers, five over lanes.
__device__ __forceinline__ void hadamard128Warp(float v[4], int lane) {
  float a = v[0] + v[1], b = v[0] - v[1], c = v[2] + v[3], d = v[2] - v[3];
  v[0] = a + c; v[1] = b + d; v[2] = a - c; v[3] = b - d;
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = lane & m; // this lane holds the "minus" side
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float o = __shfl_xor_sync(0xFFFFFFFFu, v[k], m);
      v[k] = upper ? o - v[k] : v[k] + o;
    }
  }
}

/// Element loads of the storage types the packs use.
template <class T> __device__ __forceinline__ float toFloat(T x);
template <> __device__ __forceinline__ float toFloat<float>(float x) { return x; }
template <> __device__ __forceinline__ float toFloat<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float e4m3ToFloat(u8 b) {
  __nv_fp8_e4m3 q;
  q.__x = b;
  return float(q);
}

/// Storage type ids used as template arguments: 0 f32, 1 f16, 2 bf16.
template <int DT> struct StorageOf;
template <> struct StorageOf<0> { typedef float type; };
template <> struct StorageOf<1> { typedef __half type; };
template <> struct StorageOf<2> { typedef __nv_bfloat16 type; };

/// Optional vector element: 1 when the pointer is null.
template <class T>
__device__ __forceinline__ float optAt(const T *p, long long i) {
  return p ? toFloat<T>(p[i]) : 1.0f;
}

/// The SwiGLU clamp of GLM-5.3-Flash (swiglu_limit; 0 = none) on the
/// trellis experts' fp32 gate and up: gate <= limit, up in [-limit, limit].
__device__ __forceinline__ void clampSwiglu(float &g, float &u, float limit) {
  if (limit > 0.0f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
}

} // namespace glm
