//===- gemm_dense_abi.h - launch grid of the gemm_dense kernels -----------===//
//
// Host-side rule for codegen/templates/gemm_dense.cuh grids, shared by the
// compiler's plans, the twin, the footprint and the tests: a block computes
// BM tokens x BN outputs, BN = 64 * threads / bm (warps (bm/64) x (BN/32),
// warp tile 64 x 32).
//
//===----------------------------------------------------------------------===//
#pragma once

namespace glm::codegen {

/// Output columns per block of gemm_dense at template bm / threads:
/// bm 64 -> threads, bm 128 -> threads / 2.
constexpr int gemmDenseBlockCols(int bm, int threads) {
  return 64 * threads / bm;
}

/// Grid x (column blocks) of gemm_dense for `out` outputs.
constexpr unsigned gemmDenseGridX(int out, int bm, int threads) {
  return unsigned((out + gemmDenseBlockCols(bm, threads) - 1) /
                  gemmDenseBlockCols(bm, threads));
}

/// Grid y (token blocks) of gemm_dense for `m` tokens.
constexpr unsigned gemmDenseGridY(int m, int bm) {
  return unsigned((m + bm - 1) / bm);
}

} // namespace glm::codegen
