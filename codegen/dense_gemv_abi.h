//===- dense_gemv_abi.h - launch grid of the dense_gemv kernels -----------===//
//
// Host-side rule for codegen/templates/dense_gemv.cuh grids, shared by the
// executor, the GPU tests and the benches: the kernel derives its rows per
// block (and so its input slices per row) from the grid it is given.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace glm::codegen {

/// Rows per warp (the template's `rows`, 1 = a warp a row) and whether
/// weight loads bypass L1 (`loads` = stream): chosen from `glm-engine bench
/// --suite gemv` on the H200 (docs/perf.md, "Session 11"). At batch 1, 4
/// rows a warp from 1024 outputs (q_a 10.3 -> 7.5 us, the LM head 0.44 ->
/// 1.0 of copy bandwidth), 2 from 512 (kv_a 5.3 -> 4.6 us), 1 below (the
/// router, the indexer key: fewer blocks cost more than x reads save).
constexpr int kDenseGemvRows = 4;
constexpr bool kDenseGemvStream = true;

/// Rows per warp a dense_gemv kernel of an `outputs`-row matrix at template
/// batch `batch` is built with. At larger batches x is read per row anyway:
/// rows a warp only where they still fill two 8-warp blocks on each of 148
/// SMs.
inline int denseGemvRowsFor(long long outputs, int batch) {
  if (outputs >= 2LL * 148 * 8 * kDenseGemvRows)
    return kDenseGemvRows;
  if (batch > 1)
    return 1;
  return outputs >= 1024 ? kDenseGemvRows : outputs >= 512 ? 2 : 1;
}

/// Blocks for `out` rows with `warps` warps a block on `sms` SMs: R rows a
/// block, from R = warps * rows (every warp its own rows) halved down to
/// `rows` while that leaves too few blocks, so a short-output matrix
/// (kv_a's 576 rows, the indexer's 128) splits each row's inputs over more
/// warps instead of running on a few SMs. Too few: one-row kernels, under
/// two blocks per SM; several rows a warp, under three blocks per two SMs
/// (measured: q_a 256 blocks of 8 rows 7.5 us, 512 of 4 9.9 us).
inline unsigned denseGemvBlocks(int out, int sms, int warps = 8,
                                int rows = 1) {
  const long long minBlocks = rows > 1 ? (3LL * sms + 1) / 2 : 2LL * sms;
  int r = warps * rows;
  while (r > rows && (out + r - 1) / r < minBlocks)
    r /= 2;
  return unsigned((out + r - 1) / r);
}

/// Rows a block computes on a grid of `grid` blocks: the power of two >=
/// ceil(out / grid), at least rowsPerWarp and at most warps * rowsPerWarp
/// (the kernel's rule, dense_gemv.cuh; for the twin and the footprint).
inline long long denseGemvRowsPerBlock(long long out, long long grid,
                                       int warps, int rowsPerWarp) {
  const long long need = (out + grid - 1) / grid;
  long long r = rowsPerWarp;
  while (r < need && r < (long long)warps * rowsPerWarp)
    r *= 2;
  return r;
}

} // namespace glm::codegen
