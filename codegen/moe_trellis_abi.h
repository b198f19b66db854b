//===- moe_trellis_abi.h - launch geometry of the moe_trellis kernels -----===//
//
// Host-side arithmetic of the moe_trellis family (codegen/templates/
// moe_trellis.cuh, which documents the parameter list and table layouts):
// scratch and counter sizes and the grids of the two launches, so that the
// bench, the GPU tests and the executor size them the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/kernel_batch.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace glm::codegen {

struct MoeTrellisDims {
  int batch = 1, topk = 8, nRouted = 256, nShared = 1;
  int hidden = 6144, inter = 2048;
  int guSplit = 16;  // k-chunks per gate/up half (divides hidden/16)
  int downGroup = 4; // halves per down item (divides 16)
  int threads = 128; // block size of both launches
  int sum = 0;       // template SUM: 0 f32, 1/2 int64 down partials
  /// > 0: grids of at most this many blocks. A grid smaller than the
  /// one-item-per-warp grid takes the kernel's persistent path (warp w
  /// streams items w, w + W, ... through one cp.async ring; same scratch
  /// slots and results as the full grid; needs downGroup 1, template pipe
  /// >= 2 and maxUnits() <= 72). E.g. SMs x resident blocks per SM.
  /// 0: one item per warp.
  int persistBlocks = 0;

  int maxUnits() const { return batch * topk + nShared; }
  int slots() const { return batch * (topk + nShared); }
  /// f32 elements of the scratch buffer.
  size_t scratchFloats() const {
    const size_t q = size_t(slots());
    return q * 32 * guSplit * 128 + q * 16 * 128 +
           q * size_t(hidden) * (16 / downGroup) * (sum ? 2 : 1);
  }
  /// int elements of the counter buffer (zero before the first launch).
  size_t counterInts() const {
    return size_t(maxUnits()) * 16 + size_t(hidden / 128);
  }
  unsigned gridGateUp() const {
    const size_t items = size_t(maxUnits()) * 16 * 2 * guSplit;
    return capped((items + threads / 32 - 1) / (threads / 32));
  }
  unsigned gridDown() const {
    const size_t items =
        size_t(maxUnits()) * (hidden / 128) * (16 / downGroup);
    return capped((items + threads / 32 - 1) / (threads / 32));
  }
  unsigned capped(size_t full) const {
    return unsigned(persistBlocks > 0 && size_t(persistBlocks) < full
                        ? size_t(persistBlocks)
                        : full);
  }
  /// The kernel traps on anything else.
  bool valid() const {
    return inter == 16 * 128 && hidden % 128 == 0 && batch >= 1 &&
           batch <= 8 && batch * topk <= 64 && guSplit >= 1 &&
           (hidden / 16) % guSplit == 0 && downGroup >= 1 &&
           16 % downGroup == 0 && threads % 32 == 0 &&
           (persistBlocks <= 0 || (downGroup == 1 && maxUnits() <= 72));
  }
};

/// Dynamic shared memory (bytes) a moe_trellis launch must pass: the E4M3
/// instances of 256+ thread blocks on the one-item-per-warp stages (gu,
/// down; not the *_persist ones) decode part of every tile through a 64 KB
/// state -> E4M3 byte table in shared memory (+ its 16-byte mbarrier;
/// moe_trellis.cuh, moeTablePairs) and trap without it. Above 48 KB the
/// launcher must also raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
inline unsigned moeTrellisDynSmem(bool e4m3, int threads, bool persist) {
  return e4m3 && threads >= 256 && !persist ? 65536u + 16u : 0u;
}

/// Launch tuning every moe_trellis layer of a model shares: the executor's
/// default (GLM_MOE_TRELLIS_CONFIG overrides it there) and what the
/// compiler writes into a plan, so both launch the same kernels.
struct MoeTrellisTuning {
  int guSplit = 1;   // gate/up k-chunks
  int downGroup = 2; // halves per down item
  int threads = 128;
  int pipe = 4;      // cp.async ring depth (template PIPE)
  int minBlocks = 4; // __launch_bounds__ minimum blocks per SM
};

/// The default tuning for `hidden`: gate/up k-chunks of at least 8 tile
/// rows each (24 chunks at GLM-5.3's 6144, measured fastest by bench
/// --suite moe).
inline MoeTrellisTuning defaultMoeTrellisTuning(int64_t hidden) {
  MoeTrellisTuning t;
  const int64_t rows16 = hidden / 16;
  for (int sp : {24, 16, 12, 8, 6, 4, 3, 2, 1})
    if (rows16 > 0 && rows16 % sp == 0 && (rows16 / sp >= 8 || sp == 1)) {
      t.guSplit = sp;
      break;
    }
  return t;
}

/// The dims of one layer's launches at `batch` rows under `t`.
inline MoeTrellisDims moeTrellisDims(const MoeTrellisTuning &t, int batch,
                                     int topk, int nRouted, int nShared,
                                     int hidden) {
  MoeTrellisDims d;
  d.batch = batch;
  d.topk = topk;
  d.nRouted = nRouted;
  d.nShared = nShared;
  d.hidden = hidden;
  d.inter = 16 * 128;
  d.guSplit = t.guSplit;
  d.downGroup = t.downGroup;
  d.threads = t.threads;
  return d;
}

/// What decides whether a MoE layer's trellis experts run through
/// moe_trellis (else expert_gemv_trellis + moe_reduce per group).
struct MoeTrellisLayer {
  bool routedTrellis = true; // routed experts are trellis tiles
  bool exl3 = false;         // EXL3 experts (else exlr8 halves)
  int64_t inter = 2048, halves = 16; // routed intermediate width, halves
  int64_t topk = 8;
  int maxBatch = 1;           // largest decode batch the layer runs
  bool hasShared = false;     // a shared expert exists
  bool sharedSameFormat = true; // trellis, same layout/codebook/E4M3/hidden
  int64_t sharedInter = 2048;
};

/// "" when moe_trellis runs the layer, else why not (the executor and the
/// compiler both decide with this).
inline std::string moeTrellisRefusal(const MoeTrellisLayer &l) {
  if (!l.routedTrellis)
    return "experts are not trellis";
  if (l.inter > 2048 || l.halves > 16)
    return "intermediate width over 16 halves of 128";
  if (int64_t(l.maxBatch) * l.topk > 64)
    return "batch x experts per token over 64";
  if (l.hasShared && (!l.sharedSameFormat || l.sharedInter > 2048 ||
                      (l.exl3 && l.sharedInter != l.inter)))
    return "the shared expert differs from the routed ones in format";
  if (l.exl3 && l.inter % 128 != 0)
    return "EXL3 intermediate width not a multiple of 128";
  return "";
}

/// A prefill chunk's grouped MoE layer (moe_group.cuh): rows per GEMM
/// item, 128 once experts average that many rows of the chunk (uniform
/// routing), 96 from an average of 48 (an expert's ~64 +- 8 rows of a
/// 2048-token chunk in one item: each weight tile decoded once, where 64
/// splits half the experts into a full item and a nearly empty one that
/// decodes every tile again; docs/perf.md, session 22), else 64.
inline int64_t moeGroupedRows(int64_t tokens, int64_t topk, int64_t experts) {
  return tokens * topk >= 128 * experts  ? 128
         : tokens * topk >= 48 * experts ? 96
                                         : 64;
}
/// Threads of the grouped down GEMM's blocks (BN = threads outputs): 256,
/// or 128 at 96 rows an item (a step's 96 x 32 inputs in whole 8-value
/// chunks a thread; the bench measures 128 and 256 alike).
inline int64_t moeGroupedDownThreads(int64_t bm) { return bm == 96 ? 128 : 256; }
/// Item slots per (projection, half) for `entries` sorted entries of
/// `experts` experts (routed + shared) in items of `bm` rows.
inline int64_t moeGroupedSlots(int64_t entries, int64_t bm, int64_t experts) {
  return (entries + bm - 1) / bm + experts;
}

} // namespace glm::codegen
