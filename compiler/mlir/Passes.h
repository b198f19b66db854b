//===- Passes.h - the glmc passes and pipeline ------------------*- C++ -*-===//
//
// Declarations generated from Passes.td (create functions and options) plus
// the pipeline that `glmc compile` runs (Pipeline.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_PASSES_H
#define GLMC_MLIR_PASSES_H

#include "glm/GlmDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace glmc {

#define GEN_PASS_DECL
#include "compiler/mlir/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/mlir/Passes.h.inc"

/// Everything `glmc compile` decides, in pass-option form.
struct PipelineOptions {
  int64_t ranks = 1;
  int64_t maxContext = 8192;
  /// Sequences the plan holds at once: KV cache, index keys and recurrent
  /// (KDA) state per slot; a decode batch's rows name their slots.
  int64_t kvSlots = 1;
  /// Paged KV (glmc compile --kv-page-tokens / --kv-pages): rows a page
  /// (0 = unpaged) and pages the caches hold (0 = slots × context / page).
  int64_t kvPageTokens = 0, kvPages = 0;
  /// KV cache storage (latent cache and index keys): f32 | bf16 | fp8
  /// (templates/kv_cache.cuh).
  std::string kvDtype = "f32";
  double memoryPerSpark = 0; // GiB; 0 = no limit
  std::vector<std::string> archs = {"sm_121"};
  bool compileKernels = false;
  bool cubin = true; // with compileKernels: CUBIN beside the PTX
  /// Graph buckets: decode batch sizes (1..8) and prefill chunk sizes in
  /// tokens ({0} = no prefill graphs); empty = the defaults (1..8; 512,
  /// 2048). The activation arena is sized for the largest.
  std::vector<int64_t> decodeBatches;
  std::vector<int64_t> prefillChunks;
  std::string output; // plan file; empty = none
  std::string command; // the glmc compile command line the plan records
  /// Launch tunings (codegen/tuning.h text forms; "" = the defaults).
  std::string moeTrellisTuning, denseTrellisTuning;
  /// Launches marked programmatic (OpDef::programmaticLaunch).
  bool programmaticLaunch = true;
};

/// The stages `glmc compile --emit=` can stop after.
enum class Stage { Model, Kernel, Cuda, Plan };

/// Adds the passes of `glmc compile` up to and including `stop`:
/// shard-tp, select-width | fuse, plan-memory | emit-kernels | emit-plan.
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &opt,
                   Stage stop = Stage::Plan);

/// Registers every glm pass and the `glm-compile` pipeline with MLIR's
/// registry (for glmc-opt).
void registerAllGlmPasses();

/// Registers the dialects a glm module uses.
void registerGlmDialects(mlir::DialectRegistry &registry);

} // namespace glmc

#endif // GLMC_MLIR_PASSES_H
