//===- dense_gemv_abi.h - launch grid of the dense_gemv kernels -----------===//
//
// Host-side rule for codegen/templates/dense_gemv.cuh grids, shared by the
// executor, the GPU tests and the benches: the kernel derives its rows per
// block (and so its input slices per row) from the grid it is given.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace glm::codegen {

/// Blocks for `out` rows with `warps` warps a block on `sms` SMs: R rows a
/// block (R = warps: one warp a row), halved while that leaves fewer than
/// two blocks per SM, so a short-output matrix (kv_a's 576 rows, the
/// indexer's 128) splits each row's inputs over R / warps warps instead of
/// running on a few SMs.
inline unsigned denseGemvBlocks(int out, int sms, int warps = 8) {
  int r = warps;
  while (r > 1 && (out + r - 1) / r < 2 * sms)
    r /= 2;
  return unsigned((out + r - 1) / r);
}

} // namespace glm::codegen
