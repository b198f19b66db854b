//===- nccl_comm.h - DeviceComm over NCCL, joined through the control plane -===//
//
// One NCCL communicator per process (rank r on one CUDA device). Rank 0's
// unique id travels over the control plane (a HostComm, normally the
// TcpHostComm the ranks joined with). Init is nonblocking
// (ncclCommInitRankConfig, blocking = 0) and polled, so a peer that never
// arrives or dies during init is reported instead of hanging.
//
// A watchdog thread polls ncclCommGetAsyncError and the control plane's
// checkHealthy(); when a peer died or NCCL failed it calls ncclCommAbort, so
// a rank whose stream waits inside a collective for a dead peer returns from
// its synchronisation, and checkHealthy() then throws the message naming the
// rank (the executor calls it after each step's synchronisation). So the
// control plane's checkHealthy must be callable from another thread
// (TcpHostComm's is).
//
// Built with -DGLM_WITH_CUDA=ON when NCCL is found; otherwise
// makeNcclDeviceComm throws Error saying so.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/comm.h"

#include <memory>

namespace glm::rt::dist {

/// True when this build has NCCL.
bool haveNccl();

/// Joins `control.size()` ranks on CUDA device `device` (made current on the
/// calling thread). `timeout`: seconds the init may take. Sets
/// NCCL_NVLS_ENABLE=0 unless the environment sets it (NVLink multicast is
/// off on the machines we test on). Throws Error.
std::unique_ptr<DeviceComm> makeNcclDeviceComm(HostComm &control, int device,
                                               double timeout = 120);

} // namespace glm::rt::dist
