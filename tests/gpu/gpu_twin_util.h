//===- gpu_twin_util.h - CUDA launches against their CPU twins ------------===//
//
// The GPU tests hold each family's CUDA launch to its twin (runtime/twins):
// the same KernelSpec (its args are the plan's template arguments), grid,
// block and dynamic shared memory, with host pointers to the host copies of
// the launch's inputs. Each twin states the tolerance its arithmetic gives
// against CUDA; the cases quote it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "gpu_test_util.h"
#include "runtime/twins/twin.h"

namespace glm::gputest {

using TwinArg = glm::rt::twins::Arg;

inline TwinArg hp(const void *p) {
  TwinArg a;
  a.p = const_cast<void *>(p);
  return a;
}
inline TwinArg hi(int64_t v) {
  TwinArg a;
  a.i = v;
  return a;
}
inline TwinArg hf(double v) {
  TwinArg a;
  a.f = v;
  return a;
}

/// Runs the twin of `s` over grid (gx, gy) x block bx.
inline void runTwin(const KernelSpec &s, unsigned gx, unsigned gy, unsigned bx,
                    unsigned smem, std::vector<TwinArg> args) {
  glm::rt::twins::Launch l;
  l.family = s.family;
  l.templateArgs = &s.args;
  l.grid[0] = gx, l.grid[1] = gy;
  l.block[0] = bx;
  l.smemBytes = smem;
  l.args = std::move(args);
  const glm::rt::twins::TwinFn fn = glm::rt::twins::findTwin(s.family);
  if (!fn)
    glm::rt::fail("no twin of kernel family ", s.family);
  fn(l);
}

/// Error of CUDA's result against the twin's.
inline Err vsTwin(const std::vector<float> &gpu, const std::vector<float> &twin,
                  size_t n = size_t(-1)) {
  Err e;
  n = std::min({n, gpu.size(), twin.size()});
  for (size_t i = 0; i < n; ++i)
    e.add(gpu[i], twin[i]);
  return e;
}

} // namespace glm::gputest
