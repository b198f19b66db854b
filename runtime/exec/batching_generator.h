//===- batching_generator.h - concurrent generations in shared steps -----===//
//
// glm-engine serve --max-batch B. generate() may be called from many threads
// at once; each call holds one KV slot of the plan (glmc compile --kv-slots)
// for its sequence, and one scheduler thread runs the plan for all of them:
//  - every decode step carries the next row of each sequence waiting for
//    one, through the smallest decode graph (--decode-batches) that holds
//    them; its spare rows repeat the first row (the same KV written twice),
//    or, in a plan with recurrent state (GLM-5.3-Flash's KDA, which a
//    repeated row would advance twice), run in the plan's last slot, kept
//    for them;
//  - between two steps, one prefill chunk of a sequence still reading its
//    prompt (choosePrefillChunk), so long prompts do not stall the others.
// The scheduler waits for the row of every running sequence, at most
// kGatherMs after the first (a slow client only delays batching, never
// blocks it). The plan's decode graphs are batch-invariant (a row's bits do
// not depend on the other rows: BatchInvariance.*), so every sequence gets
// the tokens and logits it gets alone.
//
// Prefix reuse: a slot keeps the tokens whose KV it holds after its
// sequence ends. A new prompt takes the free slot sharing its longest
// prefix (the least recently used on a tie, and when none shares any) and
// starts after that prefix: its KV, index keys and MTP rows are already in
// the slot. With recurrent state only a slot all of whose tokens begin the
// prompt is reused (the state holds its whole sequence and cannot rewind).
// A reused prefix's KV came from the run that wrote it (chunked or token by
// token): the same bits as a cold run when both paths agree bit for bit
// (bf16/fp32 weights), within the prefill tolerance otherwise.
//
// Thread-safety: generate() from any threads; requests beyond the slots
// (and B) wait for one to free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/exec/plan_executor.h"
#include "runtime/gen/generator.h"

#include <memory>
#include <string>

namespace glm::rt::exec {

/// `executor` must be loaded. maxBatch >= 1 sequences run at once, at most
/// the plan's usable slots and largest decode graph (the constructor says
/// so on stderr when it lowers it). `chunkedPrefill` as for
/// makePlanGenerator.
std::unique_ptr<Generator>
makeBatchingGenerator(std::unique_ptr<PlanExecutor> executor,
                      const ModelConfig &config, int64_t maxContext,
                      std::string backend, int maxBatch, bool chunkedPrefill);

} // namespace glm::rt::exec
