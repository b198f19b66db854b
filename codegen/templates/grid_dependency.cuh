// grid_dependency.cuh - the first statement of every plan kernel: the
// programmatic dependent launch protocol (docs/passes.md, "Programmatic
// launch").
//
// A launch the plan marks `programmatic_launch` may be scheduled while the
// kernel before it in the stream still runs; the two instructions below
// make that safe and useful:
//   launch_dependents  this block lets the next kernel of the stream be
//                      scheduled (it only starts once every block of this
//                      grid has said so, i.e. this grid is wholly resident
//                      or done), so its launch and block placement overlap
//                      this kernel's work instead of following it;
//   wait               blocks until the previous kernel has completed and
//                      its memory is visible. Nothing is read or written
//                      before it, so no ordering of the stream is lost: a
//                      kernel two launches back completed before the one
//                      in between passed its own wait.
// Without a programmatic launch (and below sm_90, where the instructions do
// not exist) both are no-ops, so every kernel runs either way.
#pragma once

namespace glm {

__device__ __forceinline__ void programmaticEntry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

} // namespace glm
