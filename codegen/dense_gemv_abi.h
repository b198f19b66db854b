//===- dense_gemv_abi.h - launch grid of the dense_gemv kernels -----------===//
//
// Host-side rule for codegen/templates/dense_gemv.cuh grids, shared by the
// executor, the GPU tests and the benches: the kernel derives its rows per
// block (and so its input slices per row) from the grid it is given.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace glm::codegen {

/// Rows per warp of a long output (the template's `rows`, 1 = a warp a
/// row) and whether weight loads bypass L1 (`loads` = stream). Chosen from
/// `glm-engine bench --suite gemv` on the H200 (docs/perf.md, "Session 11").
constexpr int kDenseGemvRows = 4;
constexpr bool kDenseGemvStream = true;

/// Rows per warp a dense_gemv kernel of an `outputs`-row matrix is built
/// with: kDenseGemvRows when that many rows a warp still fill two 8-warp
/// blocks on each of 148 SMs, else 1. The grid (denseGemvBlocks) decides
/// per rank whether they are used.
inline int denseGemvRowsFor(long long outputs) {
  return outputs >= 2LL * 148 * 8 * kDenseGemvRows ? kDenseGemvRows : 1;
}

/// Blocks for `out` rows with `warps` warps a block on `sms` SMs. rows > 1
/// (a kernel built with that many rows per warp): ceil(out / (warps *
/// rows)) blocks when that leaves two blocks per SM. Else R rows a block
/// (R = warps: one warp a row), halved while that leaves fewer than two
/// blocks per SM, so a short-output matrix (kv_a's 576 rows, the indexer's
/// 128) splits each row's inputs over warps / R warps instead of running on
/// a few SMs.
inline unsigned denseGemvBlocks(int out, int sms, int warps = 8,
                                int rows = 1) {
  if (rows > 1 && (out + warps * rows - 1) / (warps * rows) >= 2 * sms)
    return unsigned((out + warps * rows - 1) / (warps * rows));
  int r = warps;
  while (r > 1 && (out + r - 1) / r < 2 * sms)
    r /= 2;
  return unsigned((out + r - 1) / r);
}

/// Rows a block computes on a grid of `grid` blocks: the kernel's rule
/// (dense_gemv.cuh), for the twin and the footprint of a launch.
inline long long denseGemvRowsPerBlock(long long out, long long grid,
                                       int warps, int rowsPerWarp) {
  const long long need = (out + grid - 1) / grid;
  if (rowsPerWarp > 1 && need > warps)
    return (long long)warps * rowsPerWarp;
  long long r = 1;
  while (r < need && r < warps)
    r *= 2;
  return r;
}

} // namespace glm::codegen
