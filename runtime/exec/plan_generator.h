//===- plan_generator.h - a Generator that runs the plan ------------------===//
//
// glm-engine's --backend cpu and cuda: each decode position is one step of
// the plan's batch-1 decode graph (PlanExecutor), the host samples from the
// logits the graph leaves in io.logits; with drafting, a round is k MTP
// draft graphs and one decode graph of k + 1 rows. One sequence at a time
// (KV slot 0); generate() calls are serialised.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/generator.h"
#include "runtime/exec/plan_executor.h"

#include <memory>
#include <string>

namespace glm::rt::exec {

/// `executor` must be loaded. `backend` names it in backendName().
/// `chunkedPrefill`: prompts go through the plan's prefill graphs where
/// that pays (choosePrefillChunk), else token by token.
/// `draftTokens` > 0 (--draft mtp --draft-tokens k): each round drafts k
/// tokens with the plan's MTP draft graph and verifies them in its decode
/// graph of k + 1 rows (both must exist: glmc compile --draft mtp
/// --decode-batches including k + 1); the prompt's rows also fill the MTP
/// layer's caches. A plan with recurrent state (GLM-5.3-Flash's KDA) is
/// refused: rejected rows would advance that state.
std::unique_ptr<Generator>
makePlanGenerator(std::unique_ptr<PlanExecutor> executor,
                  const ModelConfig &config, int64_t maxContext,
                  std::string backend, bool chunkedPrefill = false,
                  int draftTokens = 0);

/// How many of `remaining` prompt tokens at `position` the next prefill
/// chunk takes, given the plan's chunk sizes (ascending) and KV context:
/// all of them when a graph that fits the cache holds them at least half
/// full, else a whole chunk of the largest smaller graph that fits; 0
/// (token by token) when there is none: no graph fits, or fewer than half
/// of the smallest holding graph's rows would be prompt
/// tokens (padding rows cost as much as real ones: on the H200 a 512-token
/// chunk of the 36-layer model took as long as 183 decode steps,
/// docs/perf.md "Session 10"). `exact` (a plan with recurrent state,
/// GLM-5.3-Flash's KDA, which padding rows would advance): only whole
/// chunks, the largest that fits the rest and the cache.
uint32_t choosePrefillChunk(const std::vector<uint32_t> &chunks,
                            int64_t position, int64_t remaining,
                            int64_t maxContext, bool exact = false);

} // namespace glm::rt::exec
