//===- cpu_backend.h - the plan's kernels run by their C++ twins ----------===//
//
// --backend cpu: the arena is host memory and each launch runs the twin of
// its kernel's family (runtime/twins) over the resolved arguments, so CI
// runs the very plan a GPU runs. Addresses are host pointers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/exec/plan_executor.h"

namespace glm::rt::exec {

/// A Backend over host memory for the kernels of `plan` (not owned; must
/// outlive the backend).
std::unique_ptr<Backend> makeCpuBackend(const plan::Plan &plan);

} // namespace glm::rt::exec
