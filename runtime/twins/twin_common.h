//===- twin_common.h - arithmetic the codegen twins share
//------------------===//
//
// The pieces of codegen/templates/glm_common.cuh and trellis_tile.cuh whose
// exact rounding the twins must reproduce: the warp Hadamard-128 butterfly
// (same stage order, fp32), the fp16 hi + lo and bf16 hi + mid + lo splits
// of activations that enter the tensor cores, side-vector loads of the three
// storage types, and one 16x16 trellis tile decoded through the CPU codec
// (bit-exact with the kernels' decode: tests/gpu/trellis_decode_gpu_test.cpp).
//
// Private to runtime/twins. Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/codec/trellis.h"
#include "runtime/twins/twin.h"

#include "codegen/templates/fixed_point.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace glm::rt::twins {

/// 1/sqrt(128) as the kernels spell it (kInvSqrt128, a float literal).
constexpr float kInvSqrt128 = 0.088388347648318f;

/// Unnormalised Sylvester Hadamard of 128 floats in the order of
/// hadamard128Warp: pair distance 1, then 2, then 4 .. 64, each stage
/// a + b (lower element) and a - b (upper), in fp32. The same order and
/// type give the same bits as the warp for the same inputs.
inline void hadamard128F32(float *v) {
  for (int d = 1; d < 128; d <<= 1)
    for (int i = 0; i < 128; ++i)
      if (!(i & d)) {
        const float a = v[i], b = v[i + d];
        v[i] = a + b;
        v[i + d] = a - b;
      }
}

/// cvt.rna.tf32.f32: round to 11 significant bits, ties away from zero
/// (the tensor cores' tf32 operands; 3xTF32 splits x into tf32(x) and
/// tf32(x - tf32(x))).
inline float tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Side-vector storage of the templates' SVT/VT/SCT ids: 0 f32, 1 f16,
/// 2 bf16 (StorageOf in glm_common.cuh).
/// clampSwiglu of glm_common.cuh: GLM-5.3-Flash's SwiGLU clamp on fp32 gate
/// and up (limit 0 = none); min/max are exact, so the twin is the kernel.
inline void clampSwiglu(float &g, float &u, float limit) {
  if (limit > 0.0f) {
    g = std::fmin(g, limit);
    u = std::fmin(std::fmax(u, -limit), limit);
  }
}

inline float storageAt(const void *p, int dt, int64_t i) {
  if (dt == 1)
    return halfToFloat(static_cast<const uint16_t *>(p)[i]);
  if (dt == 2)
    return bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  return static_cast<const float *>(p)[i];
}
/// optAt: 1 when the vector is absent.
inline float optAt(const void *p, int dt, int64_t i) {
  return p ? storageAt(p, dt, i) : 1.0f;
}
/// The storage id of a template argument written "f32" | "f16" | "bf16".
inline int storageId(const Launch &l, const std::string &key) {
  const std::string &v = l.targ(key);
  if (v == "f32")
    return 0;
  if (v == "f16")
    return 1;
  if (v == "bf16")
    return 2;
  fail("twin of ", l.family, ": ", key, "='", v, "' is not f32, f16 or bf16");
}

/// The codebook template argument ("3inst" | "mcg" | "mul1").
inline trellis::Codebook codebookArg(const Launch &l) {
  return trellis::parseCodebook(l.targ("codebook").c_str());
}
inline bool boolArg(const Launch &l, const std::string &key) {
  return l.targInt(key) != 0;
}
/// The widths template argument ("234") as a bit mask (bit K = width K).
inline int widthMaskArg(const Launch &l) {
  const std::string &v = l.targ("widths");
  int mask = 0;
  for (char c : v) {
    check(c >= '1' && c <= '8', "twin of ", l.family, ": widths='", v,
          "' is not a set of digits 1..8");
    mask |= 1 << (c - '0');
  }
  check(mask != 0, "twin of ", l.family, ": empty widths");
  return mask;
}

/// The fp16 hi + lo parts of an activation as splitHiLo makes them
/// (trellis_tile.cuh): hi = RN16(x), lo = RN16(x - hi) (x - hi is exact in
/// fp32). The tensor cores multiply each by an exact fp16 weight.
inline void splitHiLo(float x, float &hi, float &lo) {
  hi = roundToHalf(x);
  lo = roundToHalf(x - hi);
}

/// The bf16 hi + mid + lo planes of an activation as gemm_dense's
/// splitBf16x3 makes them: each plane RN-rounds what the planes before it
/// left (the differences are exact in fp32), so hi + mid + lo == x (down to
/// |x| = 2^-110). The tensor cores multiply each by an exact bf16 weight.
inline void splitBf16x3(float x, float &hi, float &mid, float &lo) {
  hi = bf16ToFloat(floatToBf16(x));
  const float r = x - hi;
  mid = bf16ToFloat(floatToBf16(r));
  lo = bf16ToFloat(floatToBf16(r - mid));
}

/// Tile index of tile (i, j) under the TileStrides of glm_common.cuh.
inline int64_t tileIndex(int64_t i, int64_t j, int sI, int sI8, int sJ8) {
  return (i >> 3) * sI8 + (i & 7) * sI + (j >> 3) * sJ8 + (j & 7);
}

/// Decodes the tile `idx` (32K bytes each) of a trellis blob of width K to
/// out[row * 16 + col] (row = input side), as the kernels decode it.
inline void decodeTileAt(const unsigned char *blob, int64_t idx, int k,
                         trellis::Codebook cb, bool e4m3, float out[256]) {
  const float *table = trellis::codebookFloatTable(cb, e4m3);
  uint16_t words[128];
  std::memcpy(words, blob + idx * 32 * k, size_t(32) * k);
  uint16_t states[256];
  trellis::unpackTileStates(words, trellis::Width::bits(k), states);
  for (int t = 0; t < 256; ++t)
    out[trellis::permRow(t) * 16 + trellis::permCol(t)] = table[states[t]];
}

/// Sums of exact products w * hi and w * lo in fp64: the tensor cores add
/// the same products in fp32 (hardware order), so a twin's result differs
/// from CUDA's only by fp32 accumulation (see each family's tolerance).
struct HiLoSum {
  double hi = 0, lo = 0;
  /// What the kernels store: fp32 hi sum + fp32 lo sum (the two mma
  /// columns of one batch row, added in fp32).
  float value() const { return float(hi) + float(lo); }
};

/// The end of a fixed-point reduction (fixed_point.cuh storeFixedSum):
/// sum mode 1 writes fromFixed(s) (+ y[i]) as fp32, 2 the int64 (+ y[i]).
inline void storeFixedSum(int sum, void *y, int64_t i, long long s,
                          bool accumulate) {
  if (sum == 2) {
    long long *d = static_cast<long long *>(y) + i;
    *d = accumulate ? *d + s : s;
  } else {
    float *d = static_cast<float *>(y) + i;
    const float v = fromFixed(s);
    *d = accumulate ? *d + v : v;
  }
}

} // namespace glm::rt::twins
