// grid_dependency.cuh - the first statement of every plan kernel: the
// programmatic dependent launch protocol (docs/passes.md, "Programmatic
// launch").
//
// A launch the plan marks `programmatic_launch` may be scheduled as soon as
// every block of the kernel before it in the stream has exited, before
// that grid has completed and flushed its memory; the launch and block
// placement of this kernel overlap that completion instead of following
// it. `wait` blocks until the previous kernel has completed and its memory
// is visible. Nothing is read or written before it, so no ordering of the
// stream is lost: a kernel two launches back completed before the one in
// between passed its own wait.
//
// No block calls `launch_dependents` (an earlier trigger): measured on the
// H200 (docs/perf.md, "Session 10"), triggering at entry let the blocks of
// the next kernels pile onto the SMs while a GEMV ran, and the 36-layer
// step took 12.71 ms against 12.48 in plain stream order.
// Without a programmatic launch (and below sm_90, where the instruction
// does not exist) the wait is a no-op, so every kernel runs either way.
#pragma once

namespace glm {

__device__ __forceinline__ void programmaticEntry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

} // namespace glm
