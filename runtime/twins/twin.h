//===- twin.h - CPU twins of the codegen kernel families ------------------===//
//
// Every kernel family in codegen/templates/ has a C++ twin here that computes
// what one CUDA launch of it computes, over the whole grid, with the same
// arithmetic (same roundings, same summation order where the result depends
// on it). The CPU plan executor (--backend cpu) runs a plan's graphs through
// the twins; the GPU tests hold each family's CUDA code to its twin.
//
// A twin receives the launch as the plan resolved it: the kernel's template
// arguments, its grid and block, and its runtime arguments in the family's
// parameter order (codegen FamilyInfo::kernelParams, the PARAMS macro of the
// template): pointers already resolved to host memory, ints and floats as
// immediates. A null device pointer is a null host pointer.
//
// Thread-safety: twins are pure functions of their launch; they may use
// several threads internally (runtime/base/parallel.h) but must give the
// same bits for any thread count.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt::twins {

/// One resolved kernel argument: a host pointer, an integer or a float.
struct Arg {
  void *p = nullptr;
  int64_t i = 0;
  double f = 0.0;
};

/// One launch of a kernel family, as its twin sees it.
struct Launch {
  std::string family;                        // "rms_norm"
  const plan::KeyValues *templateArgs = nullptr; // the kernel's template args
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t smemBytes = 0;
  std::vector<Arg> args;                     // FamilyInfo::kernelParams order

  template <class T> T *ptr(size_t k) const {
    return static_cast<T *>(args.at(k).p);
  }
  int i32(size_t k) const { return static_cast<int>(args.at(k).i); }
  int64_t i64(size_t k) const { return args.at(k).i; }
  float f32(size_t k) const { return static_cast<float>(args.at(k).f); }
  /// Template argument `key` as written in the plan; throws Error when the
  /// kernel has none of that name.
  const std::string &targ(const std::string &key) const;
  /// Template argument `key` as an integer (throws when absent or not one).
  int targInt(const std::string &key) const;
  /// targInt, or `dflt` when the kernel leaves the argument at its default.
  int targIntOr(const std::string &key, int dflt) const;
  /// The `sum` template argument of the GEMV families that take one
  /// (codegen sumParam): 0 f32 (also when absent), 1 fixed, 2 fixed_out.
  int sumMode() const;
  /// The `kv` template argument of the KV cache's writers and readers
  /// (codegen kvParam, templates/kv_cache.cuh): 0 f32 (also when absent),
  /// 1 bf16, 2 e4m3.
  int kvForm() const;
};

using TwinFn = void (*)(const Launch &);

/// One family and its twin.
struct TwinEntry {
  const char *family;
  TwinFn fn;
};

/// The twin of `family`, nullptr when it has none.
TwinFn findTwin(const std::string &family);

/// The tables findTwin searches, one per source file group (so that adding
/// a family touches one table): the twins of the GEMV/trellis/attention
/// families (codegen_twins.cpp) and of the executor's helper families
/// (helper_twins.cpp). Each ends with {nullptr, nullptr}.
extern const TwinEntry kCodegenTwins[];
extern const TwinEntry kHelperTwins[];

} // namespace glm::rt::twins
