//===- mla_prefill_abi.h - block shape of the mla_prefill kernels ---------===//
//
// Host-side rules for codegen/templates/mla_prefill.cuh, shared by the
// compiler (which kernel, grid and shared memory a prefill bucket's
// attention gets), the twin, the footprint and the tests.
//
// A block takes one query row and up to 16 * groups heads (a group = 16
// heads = 2 warps: 8 keys each in pass 1, a part of the value columns in
// pass 2); keys go through shared memory 16 at a time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdint>

#include "codegen/templates/mla_rows16_layout.cuh"

namespace glm::codegen {

/// Keys per shared-memory tile (one k16 of the P.V MMA).
constexpr int kMlaPrefillKeys = 16;
/// Shared memory a block may take: the Sparks' 99 KB (sm_121).
constexpr int64_t kMlaPrefillSmemMax = 99 * 1024;

/// Threads of the block for `nh` heads of this rank: 64 per 16 heads, 1, 2
/// or 4 groups (64 heads; more heads take more blocks).
inline int mlaPrefillThreads(int64_t nh) {
  return nh <= 16 ? 64 : nh <= 32 ? 128 : 256;
}
/// Threads of a plan's mla_prefill over H heads split across `ranks`: those
/// of the largest rank's share (ShardAttr::rangeOf: at most ceil(H / ranks)).
inline int mlaPrefillThreadsFor(int64_t H, int64_t ranks) {
  return mlaPrefillThreads((H + ranks - 1) / std::max<int64_t>(ranks, 1));
}
/// Heads one block of `threads` takes.
constexpr int64_t mlaPrefillHeadsPerBlock(int threads) {
  return 16 * (threads / 64);
}
/// Grid x: blocks over `nh` heads.
inline uint32_t mlaPrefillGridX(int64_t nh, int threads) {
  const int64_t per = mlaPrefillHeadsPerBlock(threads);
  return uint32_t((nh + per - 1) / per);
}
/// Halves per shared row of a latent of `lat` = kvr + dr values: padded to
/// whole k16 steps, plus 8 so ldmatrix's 8 rows fall in different banks.
constexpr int64_t mlaPrefillPitch(int64_t lat) {
  return (lat + 15) / 16 * 16 + 8;
}
/// Longest latent row (kvr + dr) the kernel takes: a lane holds a row's
/// 4-value chunks in 5 registers while its warp finds the row's scale.
constexpr int64_t kMlaPrefillMaxLatent = 5 * 32 * 4;
/// Longest rope part (dr) the kernel takes: pass 1 holds each head row's
/// q in registers, kvr / 16 + 4 k16 steps (mla_prefill.cuh kMaxRopeSteps).
constexpr int64_t kMlaPrefillMaxRope = 64;
/// Dynamic shared memory: q (heads x pitch halves; pass 2's fp16 P once q
/// is in registers), a key tile (16 x pitch halves; with q's, pass 1's
/// ring of key tiles on rows16), then floats: each head's max per column
/// half (then its l) and q scale, the keys' scales (a tile's per slot).
constexpr int64_t mlaPrefillSmem(int threads, int64_t kvr, int64_t dr) {
  return (mlaPrefillHeadsPerBlock(threads) + kMlaPrefillKeys) *
             mlaPrefillPitch(kvr + dr) * 2 +
         (4 * mlaPrefillHeadsPerBlock(threads) + kMlaPrefillKeys) * 4;
}
/// The fp16 rows mla_rows16 writes and mla_prefill<keys = rows16> reads:
/// templates/mla_rows16_layout.cuh (glm::rows16), shared with the kernels.
/// Whether mla_prefill takes the shape: kvr whole 16-column tiles (the
/// template's vt = kvr / 16, at most 32), 4-value rows (the cache's
/// 16-, 8- and 4-byte loads) of at most kMlaPrefillMaxLatent, a rope part
/// of at most kMlaPrefillMaxRope, and the
/// shared memory within the Sparks'.
inline bool mlaPrefillTakes(int64_t kvr, int64_t dr, int64_t nh) {
  return kvr > 0 && kvr % 16 == 0 && kvr / 16 <= 32 && dr >= 0 &&
         dr % 4 == 0 && dr <= kMlaPrefillMaxRope &&
         kvr + dr <= kMlaPrefillMaxLatent && nh > 0 &&
         mlaPrefillSmem(mlaPrefillThreads(nh), kvr, dr) <= kMlaPrefillSmemMax;
}

} // namespace glm::codegen
