//===- gemm_trellis_twin.cpp - twins of the prefill trellis GEMMs ---------===//
//
// gemm_trellis (z = xh . T over a grid of BM x THREADS output tiles) and
// gemm_trellis_grouped (the same tile code over a list of GemmItems) on the
// host. xh enters the tensor cores rounded to fp16 (RN; fp16 storage as
// is), weights are exact fp16 values, so every product is exact; the
// tensor cores add them in fp32 in hardware order over in/16 k16 steps,
// the twin in fp64 with one rounding, then z = s or z + s in fp32.
// CUDA against the twin: max|cuda - twin| <= 3e-5 * max|twin| (in up to
// a few thousand). An item of
// a width the grouped kernel was not built for gets NaN outputs in both.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "codegen/templates/gemm_item.cuh"

#include "runtime/base/parallel.h"

#include <functional>
#include <limits>
#include <vector>

namespace glm::rt::twins {

namespace {

// GLM_GEMM_TRELLIS_PARAMS, in order.
enum GemmArg {
  kXh,
  kTiles,
  kZ,
  kM,
  kIn,
  kOut,
  kXStride,
  kZStride,
  kAccumulate,
  kSI,
  kSI8,
  kSJ8,
  kNumGemmArgs
};
// GLM_GEMM_TRELLIS_GROUPED_PARAMS, in order.
enum GroupedArg {
  kGXh,
  kGRowIds,
  kGItems,
  kGZ,
  kGNItems,
  kGIn,
  kGOut,
  kGXStride,
  kGZStride,
  kGAccumulate,
  kGSI,
  kGSI8,
  kGSJ8,
  kNumGroupedArgs
};

struct GemmShape {
  int in, out, xStride, zStride, sI, sI8, sJ8;
  bool xf16, accumulate;
  trellis::Codebook cb;
  bool e4m3;
};

/// One matrix of a tile problem: its tiles and width, and the element
/// offset in xh of row r's first input.
struct TilePart {
  const unsigned char *tiles;
  int k;
  std::function<int64_t(int)> xRow;
};

/// Columns [n0, n1) of rows r of z = sum over parts of xh . T (exact
/// products, fp64 sums, one fp32 rounding; added to z when accumulating).
void gemmColumnsParts(const GemmShape &g, const void *xh,
                      const std::vector<TilePart> &parts, int rows, float *z,
                      int n0, int n1) {
  const int nIn = g.in;
  // xh rounded to fp16 as the kernel stages it.
  std::vector<std::vector<float>> xs(parts.size());
  for (size_t q = 0; q < parts.size(); ++q) {
    std::vector<float> &x = xs[q];
    x.resize(size_t(rows) * nIn);
    for (int r = 0; r < rows; ++r) {
      const int64_t off = parts[q].xRow(r);
      for (int i = 0; i < nIn; ++i)
        x[size_t(r) * nIn + i] =
            g.xf16 ? halfToFloat(static_cast<const uint16_t *>(xh)[off + i])
                   : roundToHalf(static_cast<const float *>(xh)[off + i]);
    }
  }
  float w[256];
  std::vector<double> acc(size_t(rows) * 16);
  for (int j = n0 / 16; j < (n1 + 15) / 16; ++j) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (size_t q = 0; q < parts.size(); ++q)
      for (int i = 0; i < nIn / 16; ++i) {
        decodeTileAt(parts[q].tiles, tileIndex(i, j, g.sI, g.sI8, g.sJ8),
                     parts[q].k, g.cb, g.e4m3, w);
        for (int r = 0; r < rows; ++r) {
          const float *xr = &xs[q][size_t(r) * nIn + 16 * i];
          for (int c = 0; c < 16; ++c) {
            double s = 0;
            for (int t = 0; t < 16; ++t)
              s += double(w[16 * t + c]) * xr[t];
            acc[size_t(r) * 16 + c] += s;
          }
        }
      }
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 16; ++c) {
        const int col = 16 * j + c;
        if (col < n0 || col >= n1)
          continue;
        float *p = z + int64_t(r) * g.zStride + col;
        const float v = float(acc[size_t(r) * 16 + c]);
        *p = g.accumulate ? v + *p : v;
      }
  }
}

template <class XRowFn>
void gemmColumns(const GemmShape &g, const void *xh, const unsigned char *tiles,
                 int k, int rows, XRowFn xRow, float *z, int n0, int n1) {
  gemmColumnsParts(g, xh, {TilePart{tiles, k, xRow}}, rows, z, n0, n1);
}

GemmShape shapeOf(const Launch &l, int in, int out, int xStride, int zStride,
                  int acc, int sI, int sI8, int sJ8) {
  GemmShape g;
  g.in = in, g.out = out, g.xStride = xStride, g.zStride = zStride;
  g.sI = sI, g.sI8 = sI8, g.sJ8 = sJ8;
  g.xf16 = l.targ("xt") == "f16";
  g.accumulate = acc != 0;
  g.cb = codebookArg(l);
  g.e4m3 = boolArg(l, "e4m3");
  check(in > 0 && in % 32 == 0 && out > 0 && out % 16 == 0, "twin of ",
        l.family, ": in ", in, " (multiple of 32) and out ", out,
        " (multiple of 16) do not meet the kernel's requirements");
  return g;
}

} // namespace

void gemmTrellisTwin(const Launch &l) {
  check(l.args.size() == kNumGemmArgs, "twin of gemm_trellis: ", l.args.size(),
        " arguments, the family takes ", int(kNumGemmArgs));
  const GemmShape g =
      shapeOf(l, l.i32(kIn), l.i32(kOut), l.i32(kXStride), l.i32(kZStride),
              l.i32(kAccumulate), l.i32(kSI), l.i32(kSI8), l.i32(kSJ8));
  const int K = l.targInt("K"), BM = l.targInt("bm");
  const int BN = int(l.block[0]);
  const int m = l.i32(kM);
  const void *xh = l.args[kXh].p;
  const unsigned char *tiles = l.ptr<const unsigned char>(kTiles);
  float *z = l.ptr<float>(kZ);
  // Blocks (bx, by) with bx * BN < out and by * BM < m compute their tile.
  const int64_t nCol = std::min<int64_t>(l.grid[0], (g.out + BN - 1) / BN);
  const int64_t nRow = std::min<int64_t>(l.grid[1], (m + BM - 1) / BM);
  parallelFor(nCol * nRow, 1, 0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t t = b0; t < b1; ++t) {
      const int bx = int(t % nCol), by = int(t / nCol);
      const int m0 = by * BM, rows = std::min(BM, m - m0);
      const int n0 = bx * BN, n1 = std::min(g.out, n0 + BN);
      gemmColumns(
          g, xh, tiles, K, rows,
          [&](int r) { return int64_t(m0 + r) * g.xStride; },
          z + int64_t(m0) * g.zStride, n0, n1);
    }
  });
}

void gemmTrellisGroupedTwin(const Launch &l) {
  check(l.args.size() == kNumGroupedArgs,
        "twin of gemm_trellis_grouped: ", l.args.size(),
        " arguments, the family takes ", int(kNumGroupedArgs));
  const GemmShape g =
      shapeOf(l, l.i32(kGIn), l.i32(kGOut), l.i32(kGXStride), l.i32(kGZStride),
              l.i32(kGAccumulate), l.i32(kGSI), l.i32(kGSI8), l.i32(kGSJ8));
  const int wmask = widthMaskArg(l), BM = l.targInt("bm");
  const int BN = int(l.block[0]);
  const void *xh = l.args[kGXh].p;
  const int *rowIds = l.ptr<const int>(kGRowIds);
  const auto *items = l.ptr<const GemmItem>(kGItems);
  float *z = l.ptr<float>(kGZ);
  const int64_t nItems = std::min<int64_t>(l.grid[0], l.i32(kGNItems));
  const int64_t nCol = l.grid[1];
  const int halves = l.targIntOr("halves", 1);
  const int64_t stride = l.i32(kGNItems); // items of one half
  auto xRowOf = [&](const GemmItem &it) {
    return [&, it](int r) -> int64_t {
      const int64_t row =
          rowIds ? rowIds[it.row_start + r] : int64_t(it.row_start) + r;
      return row * g.xStride + it.x_col;
    };
  };
  if (halves > 1) {
    // Block b adds items b, b + stride, .. (one row block's halves).
    parallelFor(nItems * nCol, 1, 0, [&](int64_t b0, int64_t b1, int) {
      for (int64_t t = b0; t < b1; ++t) {
        const GemmItem first = items[t / nCol];
        const int by = int(t % nCol);
        const int n0 = by * BN, n1 = std::min(g.out, n0 + BN);
        if (first.rows <= 0 || n0 >= g.out)
          continue;
        const int m = std::min(first.rows, BM);
        float *zz = z + first.z_off;
        std::vector<TilePart> parts;
        bool unbuilt = false;
        for (int h = 0; h < halves; ++h) {
          const GemmItem it = items[h * stride + t / nCol];
          if (!it.tiles)
            continue;
          if (it.k < 1 || it.k > 8 || !(wmask >> it.k & 1))
            unbuilt = true;
          else
            parts.push_back({it.tiles, it.k, xRowOf(it)});
        }
        if (unbuilt) {
          for (int r = 0; r < m; ++r)
            for (int c = n0; c < n1; ++c)
              zz[int64_t(r) * g.zStride + c] =
                  std::numeric_limits<float>::quiet_NaN();
        } else if (!parts.empty()) {
          gemmColumnsParts(g, xh, parts, m, zz, n0, n1);
        }
      }
    });
    return;
  }
  parallelFor(nItems * nCol, 1, 0, [&](int64_t b0, int64_t b1, int) {
    for (int64_t t = b0; t < b1; ++t) {
      const GemmItem it = items[t / nCol];
      const int by = int(t % nCol);
      if (!it.tiles || it.rows <= 0)
        continue;
      const int m = std::min(it.rows, BM);
      const int n0 = by * BN, n1 = std::min(g.out, n0 + BN);
      if (n0 >= g.out)
        continue;
      float *zz = z + it.z_off;
      if (it.k < 1 || it.k > 8 || !(wmask >> it.k & 1)) {
        for (int r = 0; r < m; ++r)
          for (int c = n0; c < n1; ++c)
            zz[int64_t(r) * g.zStride + c] =
                std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      gemmColumns(
          g, xh, it.tiles, it.k, m,
          [&](int r) -> int64_t {
            const int64_t row =
                rowIds ? rowIds[it.row_start + r] : int64_t(it.row_start) + r;
            return row * g.xStride + it.x_col;
          },
          zz, n0, n1);
    }
  });
}

} // namespace glm::rt::twins
