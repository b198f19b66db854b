//===- dense_trellis_twin.cpp - twins of the dense trellis decode GEMVs ---===//
//
// dense_trellis (split-k one-warp items on the tensor cores, a fixed
// reduction tree, optional output H * svh) and dense_gemv_trellis (one warp
// per 16-column tile column) on the host.
//
// dense_trellis: each warp item z_s (a k-chunk of one 128-output block) is
// the tensor cores' fp32 sum of exact products w * hi and w * lo of the
// fp16-split activations; the twin sums them in fp64 and rounds each once
// (HiLoSum). From there on the twin is the kernel: warp sums in warp order,
// block partials, the last block's ranges (warp w: partials [w nSB/NW,
// (w+1) nSB/NW) from 0 in order) added in warp order, H * svh / sqrt128,
// the padded tail not written. CUDA against the twin: max|cuda - twin| <=
// 2e-5 * max|twin| (fp32 mma accumulation of up to in/16/split k16 steps).
//
// With a fixed-point sum (template sum = fixed / fixed_out) each z_s is
// rounded to fixed point (fixed_point.cuh) and the sums after it are exact
// int64: the same tolerance against CUDA, and the same bits for every
// split of the ranks' units (the planner aligns the chunks to them).
//
// dense_gemv_trellis: fp32 per-lane sums with compiler-chosen FMA
// contraction and a 4-lane shuffle; the twin sums each output in fp64 and
// rounds once. CUDA against the twin: max|cuda - twin| <= 1e-5 * max|twin|.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <vector>

namespace glm::rt::twins {

namespace {

// GLM_DENSE_TRELLIS_PARAMS, in order.
enum DenseArg {
  kXh,
  kTiles,
  kSvh,
  kScratch,
  kCounters,
  kY,
  kBatch,
  kIn,
  kOut,
  kYStride,
  kOutValid,
  kSI,
  kSI8,
  kSJ8,
  kSplit,
  kNumDenseArgs
};

// GLM_DENSE_GEMV_TRELLIS_PARAMS, in order.
enum GemvArg {
  kGXh,
  kGTiles,
  kGZ,
  kGBatch,
  kGIn,
  kGOut,
  kGSI,
  kGSI8,
  kGSJ8,
  kNumGemvArgs
};

/// denseStore: optional H * svh / sqrt128, columns below out_valid.
void denseStore(float *v, int b, int blk, const float *svh, float *y,
                int yStride, int outValid) {
  if (svh) {
    hadamard128F32(v);
    for (int j = 0; j < 128; ++j)
      v[j] *= kInvSqrt128 * svh[128 * blk + j];
  }
  for (int j = 0; j < 128; ++j)
    if (128 * blk + j < outValid)
      y[int64_t(b) * yStride + 128 * blk + j] = v[j];
}

} // namespace

void denseTrellisTwin(const Launch &l) {
  check(l.args.size() == kNumDenseArgs,
        "twin of dense_trellis: ", l.args.size(),
        " arguments, the family takes ", int(kNumDenseArgs));
  const int K = l.targInt("K"), batchT = l.targInt("batch");
  const trellis::Codebook cb = codebookArg(l);
  const bool e4m3 = boolArg(l, "e4m3");
  const int NW = int(l.block[0]) / 32;
  const float *xh = l.ptr<const float>(kXh);
  const unsigned char *tiles = l.ptr<const unsigned char>(kTiles);
  const float *svh = l.ptr<const float>(kSvh);
  float *scratch = l.ptr<float>(kScratch);
  float *y = l.ptr<float>(kY);
  const int batch = l.i32(kBatch), in = l.i32(kIn), out = l.i32(kOut);
  const int yStride = l.i32(kYStride), outValid = l.i32(kOutValid);
  const int sI = l.i32(kSI), sI8 = l.i32(kSI8), sJ8 = l.i32(kSJ8);
  const int split = l.i32(kSplit);
  const int nRows = in >> 4, nBlk = out >> 7;
  check(K >= 1 && K <= 8 && NW >= 1 && l.block[0] % 32 == 0,
        "twin of dense_trellis: K ", K, ", block ", l.block[0]);
  check(!(batch < 1 || batch > batchT || (in & 15) || (out & 127) || in <= 0 ||
          split < NW || split > nRows || split % NW != 0 || outValid > out ||
          yStride < outValid),
        "twin of dense_trellis: launch violates the kernel's preconditions "
        "(batch ",
        batch, " of ", batchT, ", in ", in, ", out ", out, ", split ", split,
        " over ", NW, " warps, out_valid ", outValid, ", y_stride ", yStride,
        "): CUDA traps");
  const int nSB = split / NW;
  // Blocks beyond out/128 * nSB return; the grid covers blocks < grid.x.
  const int64_t blocks = std::min<int64_t>(l.grid[0], int64_t(nBlk) * nSB);
  check(blocks == int64_t(nBlk) * nSB, "twin of dense_trellis: a grid of ",
        l.grid[0],
        " blocks leaves "
        "output blocks without their last block (needs ",
        int64_t(nBlk) * nSB, ")");
  const int sum = l.sumMode();
  check(sum != 2 || !svh, "twin of dense_trellis: sum=fixed_out with an svh "
                          "(the output Hadamard follows the all-reduce): "
                          "CUDA traps");
  parallelFor(nBlk, 1, 0, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> zs(size_t(NW) * batch * 128);
    std::vector<long long> fx(size_t(batch) * 128);
    float w[256];
    for (int64_t blk = b0; blk < b1; ++blk) {
      std::fill(fx.begin(), fx.end(), 0);
      for (int sb = 0; sb < nSB; ++sb) {
        // The block's NW warp items.
        for (int warp = 0; warp < NW; ++warp) {
          const int s = sb * NW + warp;
          const int r0 = int(int64_t(s) * nRows / split);
          const int r1 = int(int64_t(s + 1) * nRows / split);
          std::vector<HiLoSum> acc(size_t(batch) * 128);
          for (int i = r0; i < r1; ++i) {
            float hi[8][16], lo[8][16];
            for (int b = 0; b < batch; ++b)
              for (int r = 0; r < 16; ++r)
                splitHiLo(xh[int64_t(b) * in + 16 * i + r], hi[b][r], lo[b][r]);
            for (int c = 0; c < 8; ++c) {
              decodeTileAt(tiles, tileIndex(i, 8 * blk + c, sI, sI8, sJ8), K,
                           cb, e4m3, w);
              for (int b = 0; b < batch; ++b)
                for (int col = 0; col < 16; ++col) {
                  HiLoSum &a = acc[size_t(b) * 128 + 16 * c + col];
                  for (int r = 0; r < 16; ++r) {
                    a.hi += double(w[16 * r + col]) * hi[b][r];
                    a.lo += double(w[16 * r + col]) * lo[b][r];
                  }
                }
            }
          }
          for (int b = 0; b < batch; ++b)
            for (int j = 0; j < 128; ++j) {
              const float z = acc[size_t(b) * 128 + j].value();
              zs[(size_t(warp) * batch + b) * 128 + j] = z;
              fx[size_t(b) * 128 + j] += toFixed(z); // sum: order-free
            }
        }
        if (sum)
          continue;
        // denseWarpSum: warp order.
        float *part = scratch + (blk * nSB + sb) * int64_t(batch) * 128;
        for (int b = 0; b < batch; ++b) {
          float v[128];
          for (int j = 0; j < 128; ++j) {
            float a = zs[size_t(b) * 128 + j];
            for (int wp = 1; wp < NW; ++wp)
              a += zs[(size_t(wp) * batch + b) * 128 + j];
            v[j] = a;
          }
          if (nSB == 1)
            denseStore(v, b, int(blk), svh, y, yStride, outValid);
          else
            std::copy(v, v + 128, part + int64_t(b) * 128);
        }
      }
      if (sum) { // every z_s rounded once, the sums exact
        for (int b = 0; b < batch; ++b) {
          const long long *f = fx.data() + size_t(b) * 128;
          if (sum == 2) {
            long long *dst = reinterpret_cast<long long *>(y) +
                             int64_t(b) * yStride + 128 * blk;
            for (int j = 0; j < 128; ++j)
              if (128 * blk + j < outValid)
                dst[j] = f[j];
            continue;
          }
          float v[128];
          for (int j = 0; j < 128; ++j)
            v[j] = fromFixed(f[j]);
          denseStore(v, b, int(blk), svh, y, yStride, outValid);
        }
        continue;
      }
      if (nSB == 1)
        continue;
      // The last block: warp ranges of partials, then warp order.
      const float *p0 = scratch + blk * nSB * int64_t(batch) * 128;
      for (int warp = 0; warp < NW; ++warp) {
        const int q0 = warp * nSB / NW, q1 = (warp + 1) * nSB / NW;
        for (int b = 0; b < batch; ++b)
          for (int j = 0; j < 128; ++j) {
            float sum = 0.0f;
            for (int q = q0; q < q1; ++q)
              sum += p0[(int64_t(q) * batch + b) * 128 + j];
            zs[(size_t(warp) * batch + b) * 128 + j] = sum;
          }
      }
      for (int b = 0; b < batch; ++b) {
        float v[128];
        for (int j = 0; j < 128; ++j) {
          float a = zs[size_t(b) * 128 + j];
          for (int wp = 1; wp < NW; ++wp)
            a += zs[(size_t(wp) * batch + b) * 128 + j];
          v[j] = a;
        }
        denseStore(v, b, int(blk), svh, y, yStride, outValid);
      }
    }
  });
}

void denseGemvTrellisTwin(const Launch &l) {
  check(l.args.size() == kNumGemvArgs,
        "twin of dense_gemv_trellis: ", l.args.size(),
        " arguments, the family takes ", int(kNumGemvArgs));
  const int K = l.targInt("K"), batchT = l.targInt("batch");
  const trellis::Codebook cb = codebookArg(l);
  const bool e4m3 = boolArg(l, "e4m3");
  const int NW = int(l.block[0]) / 32;
  const float *xh = l.ptr<const float>(kGXh);
  const unsigned char *tiles = l.ptr<const unsigned char>(kGTiles);
  float *z = l.ptr<float>(kGZ);
  const int batch = std::min(l.i32(kGBatch), batchT);
  const int in = l.i32(kGIn), out = l.i32(kGOut);
  const int sI = l.i32(kGSI), sI8 = l.i32(kGSI8), sJ8 = l.i32(kGSJ8);
  check(K >= 1 && K <= 8, "twin of dense_gemv_trellis: K ", K);
  // Warp j of the grid owns tile column j < out/16.
  const int64_t cols = std::min<int64_t>(out / 16, int64_t(l.grid[0]) * NW);
  parallelFor(cols, 4, 0, [&](int64_t j0, int64_t j1, int) {
    float w[256];
    for (int64_t j = j0; j < j1; ++j) {
      double acc[8][16] = {};
      for (int i = 0; i < in / 16; ++i) {
        decodeTileAt(tiles, tileIndex(i, j, sI, sI8, sJ8), K, cb, e4m3, w);
        for (int b = 0; b < batch; ++b) {
          const float *x = xh + int64_t(b) * in + 16 * i;
          for (int col = 0; col < 16; ++col)
            for (int r = 0; r < 16; ++r)
              acc[b][col] += double(w[16 * r + col]) * x[r];
        }
      }
      for (int b = 0; b < batch; ++b)
        for (int col = 0; col < 16; ++col)
          z[int64_t(b) * out + 16 * j + col] = float(acc[b][col]);
    }
  });
}

} // namespace glm::rt::twins
