// gemm_item.cuh - one work item of gemm_trellis_grouped (32 bytes; the
// layout is part of the kernel ABI).
//
// Its own header so that the families that build item lists on the device
// (moe_group) and the CPU twins (plain C++: no CUDA in this file) share the
// one definition without the GEMM's tile code.
#pragma once

namespace glm {

/// One work item (32 bytes; layout is part of the kernel ABI).
struct GemmItem {
  const unsigned char *tiles; // first tile of the matrix; null = skip
  long long z_off;            // z element offset of row 0, column 0
  int row_start;              // first row_ids entry (or xh row)
  int rows;                   // 1..BM
  int x_col;                  // first xh column
  int k;                      // bits per weight of this matrix
};
static_assert(sizeof(GemmItem) == 32, "GemmItem is 32 bytes");

} // namespace glm
