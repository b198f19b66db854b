//===- expert_gemv_trellis_twin.cpp - twins of the per-half expert GEMV ---===//
//
// expert_gemv_trellis (one block per (half h, expert e), grid (16, E)) and
// moe_reduce (the fixed-order sum of its partials) on the host.
//
// expert_gemv_trellis: the kernel sums each output's products in fp32 per
// lane (FMA contraction is the compiler's choice) and adds the four lanes
// of a column by xor shuffles; the twin sums those dot products in fp64 and
// rounds once where the kernel stores z (gate/up outputs, down outputs),
// then follows the kernel's fp32 arithmetic: Hadamard butterflies in warp
// order, * svh, SwiGLU * down.suh, routing weight and sv_block / svh.
// CUDA against the twin: max|cuda - twin| <= 2e-5 * max|twin| (fp32 sums of
// up to hidden products per output). moe_reduce is plain fp32 adds in a
// fixed order: the twin is bit-exact.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <cmath>

namespace glm::rt::twins {

namespace {

// GLM_EXPERT_GEMV_TRELLIS_PARAMS, in order.
enum ExpertArg {
  kXh,
  kIds,
  kRouteW,
  kTiles,
  kWidths,
  kGuSvh,
  kGuSuBlock,
  kDownSuh,
  kDownSvBlock,
  kDownSvh,
  kPartial,
  kBatch,
  kTopk,
  kHidden,
  kInter,
  kXhRowStride,
  kXhSlotStride,
  kXhProjStride,
  kGuSI,
  kGuSI8,
  kDownSI,
  kDownSJ8,
  kSwigluLimit,
  kNumExpertArgs
};

// GLM_MOE_REDUCE_PARAMS, in order.
enum ReduceArg {
  kRPartial,
  kRIds,
  kRTiles,
  kROut,
  kRBatch,
  kRTopk,
  kRHidden,
  kRAccumulate,
  kNumReduceArgs
};

/// One block (h, e) of expert_gemv_trellis.
void expertBlock(const Launch &l, int h, int e, int nExperts) {
  const int wmask = widthMaskArg(l);
  const trellis::Codebook cb = codebookArg(l);
  const bool e4m3 = boolArg(l, "e4m3");
  const int batchT = l.targInt("batch"), svt = storageId(l, "sv");
  const auto *tiles = l.ptr<const unsigned char *const>(kTiles);
  const unsigned char *widths = l.ptr<const unsigned char>(kWidths);
  const int *ids = l.ptr<const int>(kIds);
  const float *routeW = l.ptr<const float>(kRouteW);
  const float *xh = l.ptr<const float>(kXh);
  float *partial = l.ptr<float>(kPartial);
  const int batch = l.i32(kBatch), topk = l.i32(kTopk);
  const int hidden = l.i32(kHidden), inter = l.i32(kInter);
  const int nBlk = hidden / 128;
  const unsigned char *half[3];
  for (int p = 0; p < 3; ++p)
    half[p] = tiles[(e * 3 + p) * 16 + h];
  if (!half[0] || !half[1] || !half[2])
    return; // not on this rank
  int slot[8];
  bool any = false;
  for (int b = 0; b < batchT && b < 8; ++b) {
    slot[b] = -1;
    if (b < batch)
      for (int k = 0; k < topk; ++k)
        if (ids[b * topk + k] == e) {
          slot[b] = k;
          break;
        }
    any |= slot[b] >= 0;
  }
  if (!any)
    return;
  const int nRows = batchT < 8 ? batchT : 8;
  auto width = [&](int p) {
    const int k = widths[(e * 3 + p) * 16 + h];
    // GLM_DISPATCH_K skips a width it was not built for, leaving shared
    // memory unwritten: garbage in CUDA, an error here.
    check(k >= 1 && k <= 8 && (wmask >> k & 1),
          "twin of expert_gemv_trellis: half ", h, " of projection ", p,
          " of expert ", e, " has width ", k, ", not in the kernel's widths ",
          l.targ("widths"));
    return k;
  };

  // Gate and up: z[p][b][j] = sum_i su(i) * xh . T (fp64, one rounding).
  float w[256];
  float z[2][8][128];
  for (int p = 0; p < 2; ++p) {
    const int k = width(p);
    const void *su = l.args[kGuSuBlock].p;
    double acc[8][128] = {};
    for (int i = 0; i < hidden / 16; ++i) {
      const double s =
          optAt(su, svt, int64_t(p * nExperts + e) * nBlk + (i >> 3));
      for (int c = 0; c < 8; ++c) {
        decodeTileAt(half[p], tileIndex(i, c, l.i32(kGuSI), l.i32(kGuSI8), 0),
                     k, cb, e4m3, w);
        for (int b = 0; b < nRows; ++b) {
          if (slot[b] < 0)
            continue;
          const float *x = xh + int64_t(p) * l.i32(kXhProjStride) +
                           int64_t(b) * l.i32(kXhRowStride) +
                           int64_t(slot[b]) * l.i32(kXhSlotStride) + 16 * i;
          for (int col = 0; col < 16; ++col) {
            double d = 0;
            for (int r = 0; r < 16; ++r)
              d += double(w[16 * r + col]) * x[r];
            acc[b][16 * c + col] += s * d;
          }
        }
      }
    }
    for (int b = 0; b < nRows; ++b)
      for (int j = 0; j < 128; ++j)
        z[p][b][j] = float(acc[b][j]);
  }

  // Output Hadamard * svh, SwiGLU * down.suh, input Hadamard of down.
  const void *svh = l.args[kGuSvh].p, *dsuh = l.args[kDownSuh].p;
  float act[8][128];
  for (int b = 0; b < nRows; ++b) {
    if (slot[b] < 0)
      continue;
    for (int p = 0; p < 2; ++p) {
      hadamard128F32(z[p][b]);
      for (int j = 0; j < 128; ++j)
        z[p][b][j] =
            z[p][b][j] * kInvSqrt128 *
            optAt(svh, svt, int64_t(p * nExperts + e) * inter + 128 * h + j);
    }
    for (int j = 0; j < 128; ++j) {
      float g = z[0][b][j], u = z[1][b][j];
      clampSwiglu(g, u, l.f32(kSwigluLimit));
      act[b][j] = g / (1.0f + std::exp(-g)) * u *
                  optAt(dsuh, svt, int64_t(e) * inter + 128 * h + j);
    }
    hadamard128F32(act[b]);
    for (int j = 0; j < 128; ++j)
      act[b][j] *= kInvSqrt128;
  }

  // Down: 128-column blocks, each stored as a routing-weighted partial.
  const int kd = width(2);
  const void *svb = l.args[kDownSvBlock].p, *dsvh = l.args[kDownSvh].p;
  for (int blk = 0; blk < nBlk; ++blk) {
    double acc[8][128] = {};
    for (int jj = 0; jj < 8; ++jj)
      for (int r = 0; r < 8; ++r) {
        decodeTileAt(
            half[2],
            tileIndex(r, 8 * blk + jj, l.i32(kDownSI), 0, l.i32(kDownSJ8)), kd,
            cb, e4m3, w);
        for (int b = 0; b < nRows; ++b) {
          if (slot[b] < 0)
            continue;
          for (int col = 0; col < 16; ++col)
            for (int rr = 0; rr < 16; ++rr)
              acc[b][16 * jj + col] +=
                  double(w[16 * rr + col]) * act[b][16 * r + rr];
        }
      }
    for (int b = 0; b < nRows; ++b) {
      if (slot[b] < 0)
        continue;
      const float rw = routeW[b * topk + slot[b]];
      float *dst =
          partial + (int64_t(b * topk + slot[b]) * 16 + h) * hidden + 128 * blk;
      float v[128];
      for (int j = 0; j < 128; ++j)
        v[j] = float(acc[b][j]);
      if (dsvh) {
        hadamard128F32(v);
        for (int j = 0; j < 128; ++j)
          dst[j] = v[j] * kInvSqrt128 *
                   storageAt(dsvh, svt, int64_t(e) * hidden + 128 * blk + j) *
                   rw;
      } else {
        const float s = optAt(svb, svt, int64_t(e) * nBlk + blk) * rw;
        for (int j = 0; j < 128; ++j)
          dst[j] = v[j] * s;
      }
    }
  }
}

} // namespace

void expertGemvTrellisTwin(const Launch &l) {
  check(l.args.size() == kNumExpertArgs,
        "twin of expert_gemv_trellis: ", l.args.size(),
        " arguments, the family takes ", int(kNumExpertArgs));
  const int nH = int(l.grid[0]), nE = int(l.grid[1]);
  check(nH <= 16, "twin of expert_gemv_trellis: grid.x ", nH,
        " is over the 16 halves");
  parallelFor(int64_t(nH) * nE, 1, 0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t it = b0; it < b1; ++it)
      expertBlock(l, int(it % nH), int(it / nH), nE);
  });
}

void moeReduceTwin(const Launch &l) {
  check(l.args.size() == kNumReduceArgs, "twin of moe_reduce: ", l.args.size(),
        " arguments, the family takes ", int(kNumReduceArgs));
  const float *partial = l.ptr<const float>(kRPartial);
  const int *ids = l.ptr<const int>(kRIds);
  const auto *tiles = l.ptr<const unsigned char *const>(kRTiles);
  float *out = l.ptr<float>(kROut);
  const int batch = l.i32(kRBatch), topk = l.i32(kRTopk);
  const int hidden = l.i32(kRHidden);
  const bool accumulate = l.i32(kRAccumulate) != 0;
  // The grid covers rows b < grid.y and outputs o < grid.x * block.x.
  const int rows = std::min<int>(batch, int(l.grid[1]));
  const int64_t cols =
      std::min<int64_t>(hidden, int64_t(l.grid[0]) * l.block[0]);
  for (int b = 0; b < rows; ++b)
    for (int64_t o = 0; o < cols; ++o) {
      float s = accumulate ? out[int64_t(b) * hidden + o] : 0.0f;
      for (int k = 0; k < topk; ++k) {
        const int e = ids[b * topk + k];
        if (e < 0)
          continue;
        for (int h = 0; h < 16; ++h)
          if (tiles[(e * 3 + 0) * 16 + h])
            s += partial[(int64_t(b * topk + k) * 16 + h) * hidden + o];
      }
      out[int64_t(b) * hidden + o] = s;
    }
}

} // namespace glm::rt::twins
