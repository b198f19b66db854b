//===- comm.h - collectives between the ranks of one plan -----------------===//
//
// The contract between the executors (cpu, cuda) and the transport that
// joins their ranks (TCP between processes for the cpu backend, NCCL for the
// cuda backend). An executor of rank r computes the units its TpLayout gives
// it (runtime/cpu/tp.h) and calls these to combine them; with size() == 1
// every call is a no-op copy, so TP=1 needs no transport at all.
//
// Failure: a peer that exits or stalls past the session's timeout makes
// every call (and checkHealthy) throw glm::rt::Error naming the rank and what
// it was doing; a call never blocks forever.
//
// Thread-safety: one thread per rank calls these, in the same order on every
// rank (collectives are matched by order).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace glm::rt::dist {

/// Host-memory collectives (cpu backend ranks; also the control plane).
class HostComm {
public:
  virtual ~HostComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// recv[r*bytes .. (r+1)*bytes) = send of rank r, for every r (recv holds
  /// size()*bytes). Blocking.
  virtual void allGather(const void *send, void *recv, size_t bytes) = 0;
  /// Blocks until every rank arrived.
  virtual void barrier() = 0;
  /// Throws Error when a peer has died or stalled.
  virtual void checkHealthy() = 0;
  /// The decode step (token position) this rank works on, named in the
  /// failure messages peers print; optional for transports.
  virtual void setStep(int64_t /*step*/) {}
};

/// Device-memory collectives (cuda backend ranks). `stream` is a
/// cudaStream_t/CUstream passed as void* so this header needs no CUDA.
/// Calls enqueue work on `stream` and may be captured into a CUDA graph.
class DeviceComm {
public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place fp32 sum of `count` elements across ranks.
  virtual void allReduceSum(float *data, size_t count, void *stream) = 0;
  /// In-place int64 sum (the fixed-point partials of fixed_point.cuh: exact,
  /// so the result does not depend on the transport's order).
  virtual void allReduceSumI64(long long *data, size_t count,
                               void *stream) = 0;
  /// recv[r*count .. (r+1)*count) = send of rank r (fp32 elements).
  virtual void allGather(const float *send, float *recv, size_t count,
                         void *stream) = 0;
  /// Throws Error naming the rank when a peer died or stalled (checked by
  /// the executor after each step's synchronisation).
  virtual void checkHealthy() = 0;
};

} // namespace glm::rt::dist
