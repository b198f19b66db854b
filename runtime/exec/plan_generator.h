//===- plan_generator.h - a Generator that runs the plan ------------------===//
//
// glm-engine's --backend cpu and cuda: each decode position is one step of
// the plan's batch-1 decode graph (PlanExecutor), the host samples from the
// logits the graph leaves in io.logits. One sequence at a time (KV slot 0);
// generate() calls are serialised.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/generator.h"
#include "runtime/exec/plan_executor.h"

#include <memory>
#include <string>

namespace glm::rt::exec {

/// `executor` must be loaded. `backend` names it in backendName().
std::unique_ptr<Generator>
makePlanGenerator(std::unique_ptr<PlanExecutor> executor,
                  const ModelConfig &config, int64_t maxContext,
                  std::string backend);

} // namespace glm::rt::exec
