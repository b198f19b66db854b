//===- indexer_abi.h - launch shape of the decode step's DSA indexer ------===//
//
// indexer_scores_ctx (templates/indexer_scores_ctx.cuh) runs a warp a key,
// 8 warps a block, striding over the row's candidates by the grid: any grid
// gives the same sums. The one rule for its grid, used by glmc when it
// emits the launch (for the plan's context) and by glmc inspect's model
// (for the context it models: blocks past a row's candidates return at
// once, so they neither read nor compute).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdint>

namespace glm::codegen {

/// Blocks for `candidates` keys: about 16 a block (two a warp), 64 .. 1024.
/// 64 whatever the context left 68 of the H200's 132 SMs idle: 0.6 ms a
/// launch at 16K tokens (docs/perf.md, session 21).
inline constexpr uint32_t indexerCtxGridX(int64_t candidates) {
  return uint32_t(std::clamp<int64_t>((candidates + 15) / 16, 64, 1024));
}

} // namespace glm::codegen
