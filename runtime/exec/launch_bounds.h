//===- launch_bounds.h - every launch of a plan stays inside its buffers --===//
//
// A plan is checksummed, but a re-signed plan with damaged kernel arguments
// (an int raised, an offset moved, a buffer index swapped) would make a
// twin or a CUDA kernel read or write outside the arena. Before the
// executor allocates anything it checks each kernel launch of each graph
// of each rank: the arguments' kinds match the family's parameters, the
// family's footprint (runtime/twins/footprint.h) accepts the integers, and
// every pointer's [offset + j * rows * rowBytes, + footprint) lies inside
// its buffer for every repeat j, null only where the family allows it.
// Where a kernel indexes by the plan's own tables (buffer init bytes and
// relocations), the footprint checks each entry it reads against what it
// assumed (footprint.h), and such a table must be written by nothing else:
// no other launch argument, weight binding, collective or Io row, no
// buffer sharing its arena bytes. Where it indexes by the runtime's Io
// rows (KV slots, positions, token ids, draft rows), the footprint covers
// every value below the runtime's bound (IoBounds), the argument must be
// that Io buffer, and nothing else may write it either.
//
// Thread-safety: a pure function of the plan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"

#include <cstdint>
#include <vector>

namespace glm::rt::exec {

/// What the runtime lets into its Io index rows before a step: each value
/// is in [0, bound). PlanExecutor enforces these (writeIoRows, draft());
/// the footprints cover them.
struct IoBounds {
  int64_t slots = 1;     // io.slots: the compile option kv_slots (else 1)
  int64_t positions = 0; // io.positions: the model's max context
  int64_t tokens = 0;    // io.tokens: the vocabulary
  int64_t draftRows = 0; // io.draft_rows: hidden rows of the step before a
                         // draft, at most the largest graph's rows
  int64_t pages = 0;      // io.pages: the compile option kv_pages (paged KV)
  int64_t pageTokens = 0; // rows a page (kv_page_tokens); 0 = unpaged
};

/// The plan's IoBounds; throws Error when its kv_slots option is not a
/// slot count.
IoBounds ioBounds(const plan::Plan &plan);

/// Throws Error naming the rank, graph, op, kernel, argument and buffer
/// (and table entry) of the first launch that could step outside its
/// buffers.
void checkLaunchBounds(const plan::Plan &plan);

/// Bytes [begin, end) of one buffer an op may touch.
struct ByteRegion {
  uint32_t buffer = 0;
  uint64_t begin = 0, end = 0;
};

/// Per op of graph `g` of rank plan `rp` (checked as checkLaunchBounds
/// does): the bytes each launch's pointer arguments may touch, over all its
/// repeats, from the family footprints; an argument indexed by data (a KV
/// slot, a token id) counts up to its buffer's end. A collective touches
/// its buffer whole. The inspector draws data edges where a writer's
/// regions meet a reader's.
std::vector<std::vector<ByteRegion>> opRegions(const plan::Plan &plan,
                                               const plan::RankPlan &rp,
                                               const plan::GraphDef &g);

} // namespace glm::rt::exec
