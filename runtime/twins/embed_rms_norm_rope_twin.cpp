//===- embed_rms_norm_rope_twin.cpp - twins of embed, rms_norm, rope ------===//
//
// embed: a gather and one decode per element (f32 / f16 / bf16, E4M3 times
// the fp32 row scale): bit-exact.
// rms_norm: the kernel sums v * v per thread in fp32 (FMA contraction is
// the compiler's), then over the block's warps; the twin sums in fp64 and
// rounds once, then the kernel's y = x * inv * w in fp32 with inv =
// 1/sqrt(mean + eps) (CUDA: rsqrtf, <= 2 ulp). The fused residual add
// (x += add, written back) is exact. CUDA against the twin: max|cuda -
// twin| <= 1e-5 * max|twin| (y; fp32 sums of n = 6144 squares and
// rsqrtf), bit-exact x.
// rope: invFreq, angle, cos and sin in fp32 as the kernel writes them, the
// host's powf/cosf/sinf: CUDA's powf is within 2 ulp, and an ulp of
// invFreq moves the angle at position p by p * 6e-8 rad, so CUDA against
// the twin is max|cuda - twin| <= 1e-3 * max|twin| for positions < 4096
// (the kernel's own bound against float64).
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include <cmath>

namespace glm::rt::twins {

namespace {
enum EmbedArg {
  kEIds,
  kETable,
  kEScale,
  kEOut,
  kEBatch,
  kEHidden,
  kERowBegin,
  kERows,
  kNumEmbedArgs
};
enum NormArg {
  kNX,
  kNAdd,
  kNW,
  kNY,
  kNRows,
  kNN,
  kNXStride,
  kNEps,
  kNumNormArgs
};
enum RopeArg {
  kRX,
  kRPositions,
  kRBatch,
  kRHeads,
  kRRowStride,
  kRHeadStride,
  kROffset,
  kRTheta,
  kNumRopeArgs
};
} // namespace

void embedTwin(const Launch &l) {
  check(l.args.size() == kNumEmbedArgs, "twin of embed: ", l.args.size(),
        " arguments, the family takes ", int(kNumEmbedArgs));
  const std::string &format = l.targ("format");
  const int fmt = format == "f32"       ? 0
                  : format == "f16"     ? 1
                  : format == "bf16"    ? 2
                  : format == "fp8_row" ? 3
                                        : -1;
  check(fmt >= 0, "twin of embed: unknown format '", format, "'");
  const int *ids = l.ptr<const int>(kEIds);
  const void *table = l.args[kETable].p;
  const float *scale = l.ptr<const float>(kEScale);
  float *out = l.ptr<float>(kEOut);
  const int batch = std::min<int>(l.i32(kEBatch), int(l.grid[1]));
  const int64_t hidden =
      std::min<int64_t>(l.i32(kEHidden), int64_t(l.grid[0]) * l.block[0]);
  const int fullHidden = l.i32(kEHidden);
  const int rowBegin = l.i32(kERowBegin), rows = l.i32(kERows);
  for (int b = 0; b < batch; ++b) {
    const int r = ids[b] - rowBegin;
    for (int64_t i = 0; i < hidden; ++i) {
      float v = 0.0f;
      if (r >= 0 && r < rows) {
        const int64_t at = int64_t(r) * fullHidden + i;
        if (fmt == 3)
          v = e4m3ToFloat(static_cast<const uint8_t *>(table)[at]) * scale[r];
        else
          v = storageAt(table, fmt, at);
      }
      out[int64_t(b) * fullHidden + i] = v;
    }
  }
}

void rmsNormTwin(const Launch &l) {
  check(l.args.size() == kNumNormArgs, "twin of rms_norm: ", l.args.size(),
        " arguments, the family takes ", int(kNumNormArgs));
  const int wt = storageId(l, "wt");
  float *x = l.ptr<float>(kNX);
  const float *add = l.ptr<const float>(kNAdd);
  const void *w = l.args[kNW].p;
  float *y = l.ptr<float>(kNY);
  const int rows = std::min<int>(l.i32(kNRows), int(l.grid[0]));
  const int n = l.i32(kNN), xStride = l.i32(kNXStride);
  const float eps = l.f32(kNEps);
  for (int r = 0; r < rows; ++r) {
    float *xr = x + int64_t(r) * xStride;
    double ss = 0;
    for (int i = 0; i < n; ++i) {
      float v = xr[i];
      if (add) {
        v += add[int64_t(r) * n + i];
        xr[i] = v;
      }
      ss += double(v) * v;
    }
    const float inv = 1.0f / std::sqrt(float(ss) / float(n) + eps);
    float *yr = y + int64_t(r) * n;
    for (int i = 0; i < n; ++i)
      yr[i] = xr[i] * inv * storageAt(w, wt, i);
  }
}

void ropeTwin(const Launch &l) {
  check(l.args.size() == kNumRopeArgs, "twin of rope: ", l.args.size(),
        " arguments, the family takes ", int(kNumRopeArgs));
  const int dim = l.targInt("rope_dim");
  float *x = l.ptr<float>(kRX);
  const int *pos = l.ptr<const int>(kRPositions);
  const int heads = std::min<int>(l.i32(kRHeads), int(l.grid[0]));
  const int batch = std::min<int>(l.i32(kRBatch), int(l.grid[1]));
  const int rowStride = l.i32(kRRowStride), headStride = l.i32(kRHeadStride);
  const int offset = l.i32(kROffset);
  const float theta = l.f32(kRTheta);
  const int pairs = std::min<int>(dim / 2, int(l.block[0]));
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < pairs; ++i) {
        const float invFreq = 1.0f / std::pow(theta, float(2 * i) / float(dim));
        const float angle = float(pos[b]) * invFreq;
        const float c = std::cos(angle), s = std::sin(angle);
        float *p = x + int64_t(b) * rowStride + int64_t(h) * headStride +
                   offset + 2 * i;
        const float a = p[0], d = p[1];
        p[0] = a * c - d * s;
        p[1] = d * c + a * s;
      }
}

} // namespace glm::rt::twins
