//===- executor.h - the CUDA backend: one decode step on one GPU ----------===//
//
// The first end-to-end CUDA executor (TP=1). It mirrors the CPU reference
// (runtime/cpu/forward.cpp) step by step on the device: the weights are the
// reference's fp32 matrices (ModelWeights, dequantized on the host by
// Pack::dequantize exactly as --backend cpu does), uploaded once; activations
// are fp32 and every sum is fp64. GEMVs run the codegen family
// dense_gemv_f32 (taken from the plan by kernel name when the plan carries a
// CUBIN for this device, else generated and compiled with NVRTC); the other
// steps run the helper kernels of executor_kernels.cpp. The result: greedy
// tokens equal to --backend cpu and logits equal to fp32 rounding.
//
// Not yet here: quantized weights on the device (trellis / FP8 kernels),
// CUDA graphs, batching, prefill GEMMs and more than one rank.
//
// Thread-safety: a CudaForward holds one sequence's caches; the Generator
// serialises generate() calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"
#include "runtime/cpu/generator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt::cpu {
struct ModelWeights;
}

namespace glm::rt::cuda {

class CudaForward {
public:
  /// Uploads the weights (progress bar on stderr) and builds the kernels.
  /// `planKernels`: the plan's kernels, searched by name first.
  CudaForward(const cpu::ModelWeights &weights, int64_t maxContext,
              const std::vector<plan::KernelDef> &planKernels = {},
              int device = 0);
  ~CudaForward();
  CudaForward(const CudaForward &) = delete;
  CudaForward &operator=(const CudaForward &) = delete;

  /// Starts a new sequence (position 0).
  void reset();
  /// Runs `token` at the current position and returns logits [vocab].
  /// Throws Error on a token outside the vocabulary or a full context.
  std::vector<float> step(int64_t token);
  int64_t length() const;
  const ModelConfig &config() const;
  /// "NVIDIA H200 (sm_90)".
  std::string deviceName() const;
  /// Kernels that came from the plan / were compiled here (for reports).
  int planKernelsUsed() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The CUDA backend's Generator (TP=1: `tp.ranks` must be 1).
std::unique_ptr<Generator>
makeCudaGenerator(std::shared_ptr<const cpu::ModelWeights> weights,
                  const cpu::TpLayout &tp, int64_t maxContext,
                  const std::vector<plan::KernelDef> &planKernels = {});

/// CUDA C++ source of the executor's helper kernels (executor_kernels.cpp).
const char *executorKernelSource();

} // namespace glm::rt::cuda
