// mla_split_layout.cuh - the block shapes of the split decode attention
// (mla_scores -> mla_softmax -> mla_values), shared by the kernels, the
// compiler, the twins, the footprints and the tests (host and device).
//
// mla_core runs a block per head, so each head's block reads every selected
// latent row twice: at GLM-5.3's 64 heads and 2048 selected rows that is
// 64 x 9.4 MB through L2 on 64 SMs (143 us a layer on an H200 at 4K
// context). The split reads each row once per block of heads:
//   mla_scores   a block per (16 selected rows, 16 heads): the rows staged
//                in shared memory as fp32, a warp per head, the score of
//                (head, row) summed exactly as mla_core sums it (lanes over
//                channels c = lane + 32k in order, warp butterflies, fp64
//                sum of the two parts times the scale);
//   mla_softmax  a block per head: mla_core's fp64 softmax over the row's
//                scores (the same threads, so the same sums), the weights
//                written over the scores and the inverse of their sum;
//   mla_values   a block per (8 heads, 32 columns): thread (column, group
//                g = warp) sums weight * value over the rows j = g, g + 8,
//                .. in order, then the 8 group sums in group order, times
//                the inverse: mla_core's order at 1024 threads and kvr in
//                (448, 512] (GLM-5.3, GLM-5.3-Flash), so the split gives
//                mla_core's bits there (tests/unit/runtime/mla_split_test).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GLM_SPLIT_HD __host__ __device__ __forceinline__
#else
#define GLM_SPLIT_HD inline
#endif

namespace glm {
namespace mla_split {

/// Selected rows a mla_scores block stages.
constexpr int kScoreRows = 16;
/// Heads a mla_scores block takes (two per warp of 8).
constexpr int kScoreHeads = 16;
constexpr int kScoreThreads = 256;
/// Heads, columns and row groups of a mla_values block (a warp a group).
constexpr int kValueHeads = 8;
constexpr int kValueCols = 32;
constexpr int kValueGroups = 8;
constexpr int kValueThreads = kValueCols * kValueGroups;
/// Rows of weights and selected ids a mla_values block stages at a time.
constexpr int kValueTile = 256;
/// Largest latent the kernels take: a lane holds its kvr / 32 channels of
/// q_abs and dr / 32 of q_pe in registers.
constexpr int kMaxKvr = 512;
constexpr int kMaxRope = 64;

/// Blocks of mla_scores' grid x for nh heads and at most maxSel selected
/// rows a row (blockIdx.x = rowBlock * headBlocks + headBlock).
GLM_SPLIT_HD constexpr long long scoreHeadBlocks(long long nh) {
  return (nh + kScoreHeads - 1) / kScoreHeads;
}
GLM_SPLIT_HD constexpr long long scoreGridX(long long nh, long long maxSel) {
  return scoreHeadBlocks(nh) * ((maxSel + kScoreRows - 1) / kScoreRows);
}
/// mla_scores' dynamic shared memory: the staged rows as fp32.
GLM_SPLIT_HD constexpr long long scoreSmem(long long kvr, long long dr) {
  return (long long)kScoreRows * (kvr + dr) * 4;
}
/// mla_values' grid x (blockIdx.x = columnBlock * headBlocks + headBlock).
GLM_SPLIT_HD constexpr long long valueHeadBlocks(long long nh) {
  return (nh + kValueHeads - 1) / kValueHeads;
}
GLM_SPLIT_HD constexpr long long valueGridX(long long nh, long long kvr) {
  return valueHeadBlocks(nh) * ((kvr + kValueCols - 1) / kValueCols);
}

} // namespace mla_split
} // namespace glm
