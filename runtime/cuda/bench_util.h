//===- bench_util.h - launch helpers shared by the bench suites -----------===//
//
// Kernel parameters by value and a captured-graph owner, used by the copy /
// expert / moe-layer suites (bench.cpp) and the dense suite
// (bench_dense.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <string>
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

/// Per kernel name: the summed time of its launches in each repetition
/// of a profiled graph (op by op, events around each launch).
struct KernelTimes {
  std::map<std::string, std::vector<double>> msOf;
  std::map<std::string, int> launches;
  double totalMs = 0; // median over repetitions of the sum of all launches

  /// One line per kernel, slowest first; returns the launches.
  /// At most `top` lines (0: all).
  int printTo(std::ostream &log, const char *prefix, size_t top = 0) const {
    std::vector<std::pair<double, std::string>> order;
    for (auto &[k, v] : msOf)
      order.push_back({median(v), k});
    std::sort(order.rbegin(), order.rend());
    int n = 0;
    for (auto &[k, c] : launches)
      n += c;
    if (top && order.size() > top)
      order.resize(top);
    for (auto &[ms, k] : order) {
      char row[320];
      std::snprintf(row, sizeof row,
                    "%s %-58s %5d x %9.2f us = %8.3f ms  %5.1f%%\n", prefix,
                    k.c_str(), launches.at(k), ms * 1e3 / launches.at(k), ms,
                    100.0 * ms / std::max(1e-9, totalMs));
      log << row;
    }
    return n;
  }
};

template <class Profile>
KernelTimes timeKernels(Profile profile, int reps) {
  KernelTimes t;
  std::vector<double> sums;
  for (int rep = 0; rep < reps; ++rep) {
    std::map<std::string, double> ms;
    std::map<std::string, int> count;
    double sum = 0;
    for (const auto &l : profile()) {
      ms[l.kernel] += l.ms;
      ++count[l.kernel];
      sum += l.ms;
    }
    for (auto &[k, v] : ms)
      t.msOf[k].push_back(v);
    t.launches = count;
    sums.push_back(sum);
  }
  t.totalMs = median(sums);
  return t;
}

} // namespace glm::rt::cuda
