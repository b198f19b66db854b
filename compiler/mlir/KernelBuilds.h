//===- KernelBuilds.h - NVRTC builds that overlap the plan's serial passes -*- C++ -*-===//
//
// glm-emit-kernels knows every kernel long before glm-emit-plan has built
// the plan (hundreds of thousands of weight bindings, a flatbuffer of
// ~150 MB), and NVRTC is most of a cold compile's CPU time. With `async`,
// emit-kernels starts the NVRTC builds on background threads and leaves
// them in this analysis; emit-plan builds the plan meanwhile and collects
// the binaries just before it serialises, so both cores work the whole
// time. Results are stored by kernel index, so the plan's bytes do not
// depend on which build finished first.
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_KERNELBUILDS_H
#define GLMC_MLIR_KERNELBUILDS_H

#include "mlir/IR/Operation.h"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace glmc {

/// One kernel's binaries for every arch, or the error that stopped them.
struct KernelBuildResult {
  std::string name;
  std::vector<std::string> archs;
  std::vector<std::string> ptx;   // per arch
  std::vector<std::string> cubin; // per arch (bytes)
  std::string error;              // empty = built
};

/// An MLIR analysis (module-level) holding NVRTC builds in flight: created
/// and started by glm-emit-kernels, preserved to glm-emit-plan, which calls
/// wait(). Destroying it cancels the builds not yet started and joins.
class KernelBuilds {
public:
  explicit KernelBuilds(mlir::Operation *) {}
  KernelBuilds(const KernelBuilds &) = delete;
  KernelBuilds &operator=(const KernelBuilds &) = delete;
  ~KernelBuilds();

  /// Runs jobs[i] (which fills results()[i]) on `threads` background
  /// threads, in index order (put the longest first). Call once.
  void start(std::vector<KernelBuildResult> results,
             std::vector<std::function<void(KernelBuildResult &)>> jobs,
             int threads);
  /// True once start() ran.
  bool started() const { return state != nullptr; }
  /// Blocks until every job has finished; then results() is complete.
  /// `progress` (if set) is called with (finished, total) as builds finish.
  void wait(const std::function<void(size_t, size_t)> &progress = {});
  const std::vector<KernelBuildResult> &results() const;

private:
  struct State {
    std::mutex mu;
    std::condition_variable done;
    std::vector<KernelBuildResult> results;
    std::vector<std::function<void(KernelBuildResult &)>> jobs;
    size_t next = 0, finished = 0;
    bool cancel = false;
  };
  std::shared_ptr<State> state;
  std::vector<std::thread> pool;
};

} // namespace glmc

#endif // GLMC_MLIR_KERNELBUILDS_H
