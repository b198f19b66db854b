// kv_cache.cuh - the storage forms of the KV cache (glmc compile --kv-dtype):
// how the latent cache (written by kv_store, read by mla_core and mla_attn)
// and the DSA index keys (index_key_store, kpool_store; indexer_scores_ctx)
// hold one row of n values. Template argument KV of those families:
//   0 f32   n floats, 4n bytes: the values as computed (the default).
//   1 bf16  n bfloat16, 2n bytes: round to nearest even on store (NaN kept
//           quiet); read widened exactly.
//   2 e4m3  n FP8 E4M3 bytes, then the row's fp32 scale: n + 4 bytes (n a
//           multiple of 4, so the scale and 4-value groups stay aligned).
//           On store scale = amax / 448 over the row's n values (fp32
//           division; 1 where that is not positive: a row of zeros), byte
//           i = E4M3(x_i / scale), round to nearest even, saturating to
//           +-448 (NaN -> 0x7F); read x_i = E4M3(byte i) * scale (one fp32
//           product).
// Rows are kvRowBytes(KV, n) bytes apart: [slots, rows, kvRowBytes], or
// with --kv-page-tokens [pages, page tokens, kvRowBytes] (SlotRows).
// A writer computes its row in fp32 exactly as the f32 form stores it, so a
// bf16 or e4m3 row is the rounding of the f32 row; readers run their f32
// arithmetic on the values read. The CPU twins (runtime/twins/kv_rows.cpp)
// use runtime/base/numeric.h's conversions; the encoders here are the same
// algorithms on the bits (tests/unit/runtime/kv_rows_test.cpp holds them to
// numeric.h over every bf16 and E4M3 rounding boundary).
#pragma once

#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__)
#include <cstring>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_KV_HD __host__ __device__ __forceinline__
#else
#define GLM_KV_HD inline
#endif

namespace glm {
namespace kv {

/// Template argument values (codegen's "kv": f32, bf16, e4m3).
constexpr int kF32 = 0, kBf16 = 1, kE4m3 = 2;
/// Largest row a bf16 or e4m3 writer stages in shared memory (floats):
/// GLM-5.3's latent is 576, the index keys 128.
constexpr int kStageMax = 1024;
/// The E4M3 scale's target: the largest finite E4M3 value.
constexpr float kE4m3Max = 448.0f;

/// Bytes of one stored row of n values.
GLM_KV_HD long long rowBytes(int kvForm, long long n) {
  return kvForm == kBf16 ? 2 * n : kvForm == kE4m3 ? n + 4 : 4 * n;
}

GLM_KV_HD unsigned floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
GLM_KV_HD float bitsFloat(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// float -> bfloat16 bits, round to nearest even (numeric.h floatToBf16).
GLM_KV_HD unsigned short bf16Of(float f) {
  const unsigned x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((x >> 16) | 0x40u);
  const unsigned lsb = (x >> 16) & 1u;
  return (unsigned short)((x + 0x7fffu + lsb) >> 16);
}
GLM_KV_HD float bf16Value(unsigned short b) {
  return bitsFloat((unsigned)b << 16);
}

/// float -> E4M3 bits: round to nearest even, saturating to +-448, NaN ->
/// 0x7F (numeric.h floatToE4m3). Only exact operations: a * 512 and the
/// remainder below are exact in fp32.
GLM_KV_HD unsigned char e4m3Of(float f) {
  const unsigned x = floatBits(f);
  const unsigned sign = (x >> 24) & 0x80u, absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u)
    return (unsigned char)(sign | 0x7fu);
  const float a = bitsFloat(absx);
  if (a >= 448.0f)
    return (unsigned char)(sign | 0x7eu);
  if (a < 0.015625f) { // below 2^-6: the subnormal grid of 2^-9
    const float s = a * 512.0f;
    unsigned q = (unsigned)s;
    const float rem = s - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u)))
      ++q;
    return (unsigned char)(sign | q); // q == 8 is the smallest normal
  }
  const unsigned e = (absx >> 23) - 120u, man = absx & 0x7fffffu;
  unsigned v = (e << 3) | (man >> 20);
  const unsigned rest = man & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (v & 1u)))
    ++v;
  if (v > 0x7eu) // rounded past 448
    v = 0x7eu;
  return (unsigned char)(sign | v);
}
/// E4M3 bits -> float, exact (the magnitude bits placed in an fp32 and
/// rescaled by 2^120, as hx::e4m3Bits; S.1111.111 is NaN).
GLM_KV_HD float e4m3Value(unsigned char b) {
  const unsigned mag = b & 0x7fu;
  float v = bitsFloat(mag << 20) * bitsFloat(0x7b800000u);
  if (mag == 0x7fu)
    v = bitsFloat(0x7fc00000u);
  return (b & 0x80u) ? -v : v;
}

/// The E4M3 scale of a row whose largest magnitude is amax.
GLM_KV_HD float e4m3Scale(float amax) {
  const float s = amax / kE4m3Max;
  return s > 0.0f ? s : 1.0f;
}

/// Where the tokens of one KV slot live in a cache of maxCtx rows a slot
/// (slotRows). Unpaged (pages null): the slot's own block, base + t. Paged
/// (glmc compile --kv-page-tokens 2^shift): pages of 2^shift rows, the
/// slot's page table naming the page of each 2^shift tokens, so slots can
/// share the pages of a common prompt prefix (io.pages, the runtime's).
struct SlotRows {
  const int *pages; // the slot's maxCtx >> shift page numbers, or null
  long long base;   // unpaged: the slot's row 0
  int shift;
  GLM_KV_HD long long operator()(int t) const {
    return pages ? ((long long)pages[t >> shift] << shift) +
                       (t & ((1 << shift) - 1))
                 : base + t;
  }
};
/// pages: io.pages [slots][maxCtx >> pageShift] (null: unpaged).
GLM_KV_HD SlotRows slotRows(const int *pages, int pageShift, int slot,
                            int maxCtx) {
  SlotRows r;
  r.pages = pages ? pages + (long long)slot * (maxCtx >> pageShift) : nullptr;
  r.base = pages ? 0 : (long long)slot * maxCtx;
  r.shift = pages ? pageShift : 0;
  return r;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

/// Row `row` of a KV-form cache of n-value rows, for reading.
/// What one load of four stored values is, per form.
template <int KV> struct Raw4 { using Type = float4; };
template <> struct Raw4<kBf16> { using Type = uint2; };
template <> struct Raw4<kE4m3> { using Type = unsigned; };

template <int KV> struct Row {
  const unsigned char *p; // the row's first byte
  float s;                // e4m3: the row's scale
  __device__ __forceinline__ float operator[](int i) const {
    if constexpr (KV == kF32)
      return ((const float *)p)[i];
    else if constexpr (KV == kBf16)
      return bitsFloat((unsigned)((const unsigned short *)p)[i] << 16);
    else
      return e4m3Value(p[i]) * s;
  }
  /// The stored bytes of values i .. i+3, as one load: float4 (f32), uint2
  /// (bf16), unsigned (e4m3). Split from widen() so a kernel can issue the
  /// loads of a later tile before it needs the values.
  using Raw = typename Raw4<KV>::Type;
  __device__ __forceinline__ Raw raw4(int i) const {
    return *(const Raw *)(p + (long long)i * (sizeof(Raw) / 4)); // 4 values
  }
  __device__ __forceinline__ float4 widen(Raw u) const {
    if constexpr (KV == kF32) {
      return u;
    } else if constexpr (KV == kBf16) {
      return make_float4(bitsFloat(u.x << 16), bitsFloat(u.x & 0xffff0000u),
                         bitsFloat(u.y << 16), bitsFloat(u.y & 0xffff0000u));
    } else {
      return make_float4(e4m3Value((unsigned char)u) * s,
                         e4m3Value((unsigned char)(u >> 8)) * s,
                         e4m3Value((unsigned char)(u >> 16)) * s,
                         e4m3Value((unsigned char)(u >> 24)) * s);
    }
  }
  /// Values i .. i+3 (i a multiple of 4): one 16-, 8- or 4-byte load.
  __device__ __forceinline__ float4 four(int i) const { return widen(raw4(i)); }
};
template <int KV>
__device__ __forceinline__ Row<KV> row(const void *cache, long long r, int n) {
  Row<KV> w;
  w.p = (const unsigned char *)cache + r * rowBytes(KV, n);
  w.s = 1.0f;
  if constexpr (KV == kE4m3)
    w.s = *(const float *)(w.p + n);
  return w;
}

/// Where a writer computes its fp32 row: the f32 cache row itself, or
/// (bf16, e4m3) a shared-memory stage that store() then converts.
template <int KV> __device__ __forceinline__ float *stage() {
  static_assert(KV != kF32, "the f32 form writes the cache row directly");
  __shared__ float s[kStageMax]; // (kStageMax) the row in fp32
  return s;
}

/// Largest |v[i]| over i < n, all threads of the block (THREADS of them);
/// a maximum is exact in any order.
template <int THREADS>
__device__ __forceinline__ float blockAmax(const float *v, int n) {
  __shared__ float wmax[32];
  float m = 0.0f;
  for (int i = threadIdx.x; i < n; i += THREADS)
    m = fmaxf(m, fabsf(v[i]));
  for (int o = 16; o > 0; o >>= 1)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0)
    wmax[threadIdx.x >> 5] = m;
  __syncthreads();
  m = 0.0f;
  for (int w = 0; w < THREADS / 32; ++w)
    m = fmaxf(m, wmax[w]);
  __syncthreads(); // wmax is reused by the next call
  return m;
}

/// Stores the staged fp32 row v (n values, complete: the caller synced)
/// as row `r` of the KV-form cache. All THREADS threads call it.
template <int KV, int THREADS>
__device__ __forceinline__ void store(const float *v, void *cache, long long r,
                                      int n) {
  unsigned char *p = (unsigned char *)cache + r * rowBytes(KV, n);
  if constexpr (KV == kBf16) {
    for (int i = threadIdx.x; i < n; i += THREADS)
      ((unsigned short *)p)[i] = bf16Of(v[i]);
  } else {
    static_assert(KV == kE4m3, "store: bf16 or e4m3 rows");
    const float scale = e4m3Scale(blockAmax<THREADS>(v, n));
    for (int i = threadIdx.x; i < n; i += THREADS)
      p[i] = e4m3Of(v[i] / scale);
    if (threadIdx.x == 0)
      *(float *)(p + n) = scale;
  }
}

#endif // CUDA

} // namespace kv
} // namespace glm
