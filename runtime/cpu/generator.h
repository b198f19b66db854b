//===- generator.h - the reference forward as a Generator -----------------===//
//
// `--backend reference`: the hand-written fp32/fp64 forward of
// runtime/cpu/forward.h behind the Generator interface (runtime/gen), the
// oracle the plan's runs are checked against.
//
// Thread-safety: generate() may be called concurrently from several threads;
// each call owns its own KV cache (only the immutable weights are shared).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/tp.h"
#include "runtime/gen/generator.h"

#include <memory>

namespace glm::rt {
namespace cpu {
struct ModelWeights;
}
namespace dist {
class HostComm;
}

/// The reference executor: every rank of `tp` computed in this process, or
/// with `comm` (not owned; tp.ranks processes joined) only comm->rank()'s
/// units, combined through the comm (then generate() calls must not overlap).
std::unique_ptr<Generator>
makeCpuGenerator(std::shared_ptr<const cpu::ModelWeights> weights,
                 cpu::TpLayout tp, int64_t maxContext = 4096,
                 dist::HostComm *comm = nullptr);

} // namespace glm::rt
