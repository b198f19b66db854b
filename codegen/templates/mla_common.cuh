// mla_common.cuh - reading kv_b_proj in its stored form for the absorbed
// MLA families (mla_qabs, mla_out): dtype/scale decode as template
// arguments (so the loops carry no branch and their loads issue together),
// 16-byte chunk loads, and the dispatch over the forms kv_b takes.
#pragma once

#include "helper_common.cuh"

namespace glm {
namespace hx {

/// Loads issued together per thread in the MLA loops; the products are
/// then added in the same order as one at a time (same bits).
constexpr int kMlaBatch = 8;

/// Element i of a stored array: DT as ldAny's dt, -1 = read dt at run time.
template <int DT>
__device__ __forceinline__ float ldAnyT(const void *p, long long i, int dt) {
  if (DT == 0)
    return ((const float *)p)[i];
  if (DT == 1)
    return halfBits(((const unsigned short *)p)[i]);
  if (DT == 2)
    return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
  if (DT == 3)
    return e4m3Bits(((const unsigned char *)p)[i]);
  return ldAny(p, i, dt);
}
/// Element (o, i) of a row-major [out, in] weight with its scale (SK as
/// e8m0Scale's sk; -1 = sk at run time).
template <int DT, int SK>
__device__ __forceinline__ float ldWT(const void *w, int dt, const void *scale,
                                      int sk, long long o, int i, int in) {
  float v = ldAnyT<DT>(w, o * in + i, dt);
  const int k = SK >= 0 ? SK : sk;
  if (k == 1)
    v *= ((const float *)scale)[(o >> 7) * ((in + 127) >> 7) + (i >> 7)];
  else if (k == 2)
    v *= ((const float *)scale)[o];
  else if (k == 3)
    v *= e8m0Scale(((const unsigned char *)scale)[o * (in / 32) + (i >> 5)]);
  return v;
}
// Runs BODY<DT, SK> for the stored forms kv_b takes (f32/f16/bf16 plain,
// e4m3 with block, row or MXFP8 scales); anything else reads at run time.
#define GLM_MLA_DISPATCH(dt, sk, BODY, ...)                                    \
  if (dt == 0 && sk == 0)                                                      \
    BODY<0, 0>(__VA_ARGS__);                                                   \
  else if (dt == 1 && sk == 0)                                                 \
    BODY<1, 0>(__VA_ARGS__);                                                   \
  else if (dt == 2 && sk == 0)                                                 \
    BODY<2, 0>(__VA_ARGS__);                                                   \
  else if (dt == 3 && sk == 1)                                                 \
    BODY<3, 1>(__VA_ARGS__);                                                   \
  else if (dt == 3 && sk == 2)                                                 \
    BODY<3, 2>(__VA_ARGS__);                                                   \
  else if (dt == 3 && sk == 3)                                                 \
    BODY<3, 3>(__VA_ARGS__);                                                   \
  else                                                                         \
    BODY<-1, -1>(__VA_ARGS__)

/// Elements per 16-byte chunk of stored type DT.
template <int DT> struct VecOf {
  static constexpr int N = DT == 3 ? 16 : DT == 0 ? 4 : 8;
};
/// Whether the chunked paths apply: exactly the forms GLM_MLA_DISPATCH
/// instantiates, a 16-byte aligned W, rows of a multiple of 16 bytes and
/// of 32 columns (else: the scalar path).
__device__ __forceinline__ bool vecOk(const void *W, int dt, int sk, int in) {
  const int eb = dt == 0 ? 4 : dt == 3 ? 1 : 2;
  return dt >= 0 && dt <= 3 && (dt < 3 ? sk == 0 : sk >= 1 && sk <= 3) &&
         ((unsigned long long)W & 15) == 0 && (in * eb) % 16 == 0 &&
         in % 32 == 0;
}
/// The scale of element (o, c) (SK as ldWT, 0 = none); the same for the
/// aligned 4..16-element groups ldVec / dec4 read (a group never straddles
/// a scale block).
template <int SK>
__device__ __forceinline__ float scaleAt(const void *scale, long long o, int c,
                                         int in) {
  if (SK == 1)
    return ((const float *)scale)[(o >> 7) * ((in + 127) >> 7) + (c >> 7)];
  if (SK == 2)
    return ((const float *)scale)[o];
  if (SK == 3)
    return e8m0Scale(((const unsigned char *)scale)[o * (in / 32) + (c >> 5)]);
  return 1.0f;
}
/// N consecutive elements of row o from column c0 (a multiple of N), each
/// times its scale.
template <int DT, int SK>
__device__ __forceinline__ void ldVec(const void *w, const void *scale,
                                      long long o, int c0, int in,
                                      float (&v)[VecOf<DT>::N]) {
  constexpr int N = VecOf<DT>::N;
  constexpr int kBytes = DT == 0 ? 4 : DT == 3 ? 1 : 2;
  const uint4 q = *reinterpret_cast<const uint4 *>(
      static_cast<const unsigned char *>(w) + (o * in + c0) * kBytes);
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (DT == 0)
      v[t] = __uint_as_float(u[t]);
    else if (DT == 1)
      v[t] = halfBits((unsigned short)(u[t / 2] >> (16 * (t & 1))));
    else if (DT == 2)
      v[t] = __uint_as_float((u[t / 2] >> (16 * (t & 1))) << 16);
    else
      v[t] = e4m3Bits((unsigned char)(u[t / 4] >> (8 * (t & 3))));
  }
  if (SK != 0) {
    const float s = scaleAt<SK>(scale, o, c0, in);
#pragma unroll
    for (int t = 0; t < N; ++t)
      v[t] *= s;
  }
}

} // namespace hx
} // namespace glm
