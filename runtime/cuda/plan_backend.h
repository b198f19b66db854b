//===- plan_backend.h - the plan's kernels on a CUDA device ---------------===//
//
// --backend cuda of the plan executor (runtime/exec/plan_executor.h): the
// arena is one device allocation; kernels load plan CUBIN → plan PTX through
// the driver JIT → the on-disk kernel cache → NVRTC of KernelDef::source
// (the same NVRTC wrapper and cache key glmc uses); launches go to one
// stream. Collectives between processes go through a DeviceComm (NCCL).
//
// Thread-safety: a backend belongs to the thread that made its device
// current.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/cuda_api.h"
#include "runtime/dist/comm.h"
#include "runtime/exec/plan_executor.h"

#include <string>

namespace glm::rt::cuda {

/// Where each prepared kernel's code came from, for `run` and tests.
struct KernelLoadCounts {
  int planCubin = 0, planPtx = 0, cache = 0, nvrtc = 0;
  std::string summary() const;
};

class PlanCudaBackend;

/// A Backend on `device` (not owned) for the kernels of `plan` (not owned).
std::unique_ptr<exec::Backend> makeCudaBackend(const plan::Plan &plan,
                                               const CudaDevice &device);
/// The load counts of a backend made by makeCudaBackend.
KernelLoadCounts kernelLoadCounts(const exec::Backend &b);
/// The stream a backend made by makeCudaBackend launches on.
CUstream backendStream(const exec::Backend &b);

/// Collectives through `comm` (not owned) for one local rank per process:
/// all-reduce is comm->allReduceSum in place, all-gather gathers each
/// rank's slice of the buffer in place.
std::unique_ptr<exec::Collectives> deviceCollectives(dist::DeviceComm *comm);

} // namespace glm::rt::cuda
