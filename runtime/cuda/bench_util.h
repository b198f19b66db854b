//===- bench_util.h - launch helpers shared by the bench suites -----------===//
//
// Kernel parameters by value and a captured-graph owner, used by the copy /
// expert / moe-layer suites (bench.cpp) and the dense suite
// (bench_dense.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/cuda_api.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace glm::rt::cuda {

/// Kernel parameters by value (scalars and CUdeviceptr, in order).
class Params {
public:
  template <class T> Params &operator<<(T v) {
    static_assert(sizeof(T) <= 8, "scalar parameters");
    uint64_t s = 0;
    std::memcpy(&s, &v, sizeof v);
    slots_.push_back(s);
    return *this;
  }
  void launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx,
              CUstream stream, unsigned smem = 0) {
    cuda::checkParamCount(f, slots_.size());
    std::vector<void *> p;
    for (auto &s : slots_)
      p.push_back(&s);
    cuda::launch(f, gx, gy, 1, bx, smem, stream, p.data());
  }

private:
  std::vector<uint64_t> slots_;
};

/// A non-blocking stream destroyed with the owner.
class OwnedStream {
public:
  OwnedStream() { GLM_CU(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING)); }
  ~OwnedStream() { cuStreamDestroy(s_); }
  OwnedStream(const OwnedStream &) = delete;
  OwnedStream &operator=(const OwnedStream &) = delete;
  CUstream get() const { return s_; }

private:
  CUstream s_ = nullptr;
};

/// A graph captured from one stream, instantiated once, replayed.
class Graph {
public:
  Graph() = default;
  ~Graph() {
    if (exec_)
      cuGraphExecDestroy(exec_);
    if (graph_)
      cuGraphDestroy(graph_);
  }
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  template <class F> void capture(CUstream s, F body) {
    GLM_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    body();
    GLM_CU(cuStreamEndCapture(s, &graph_));
    GLM_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0));
  }
  void launch(CUstream s) { GLM_CU(cuGraphLaunch(exec_, s)); }

private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

} // namespace glm::rt::cuda
