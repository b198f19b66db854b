//===- Pipeline.cpp - the glmc pass pipeline ------------------------------===//
//
// The one place that orders the passes: shard-tp → select-width → fuse →
// plan-memory → emit-kernels → emit-plan. glmc compile and glmc-opt's
// `glm-compile` pipeline both build it here.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"

#include <algorithm>

using namespace mlir;

namespace glmc {

void buildPipeline(OpPassManager &pm, const PipelineOptions &opt,
                   Stage stop) {
  pm.addPass(createGlmShardTp(GlmShardTpOptions{opt.ranks}));
  pm.addPass(createGlmSelectWidth());
  if (stop == Stage::Model)
    return;
  pm.addPass(createGlmFuse());
  GlmPlanMemoryOptions mem;
  mem.maxContext = opt.maxContext;
  mem.kvDtype = opt.kvDtype;
  // A whole compile checks the budget once, on the final plan (scratch
  // included: glm-emit-plan); the stages before it check plan-memory's
  // figures, which have no scratch yet.
  mem.memoryPerSpark = stop == Stage::Plan ? 0 : opt.memoryPerSpark;
  // The arena holds the largest step: the largest prefill chunk (default
  // 2048 tokens) or decode batch.
  int64_t tokens = 0;
  for (int64_t v : opt.decodeBatches)
    tokens = std::max(tokens, v);
  for (int64_t v : opt.prefillChunks)
    tokens = std::max(tokens, v);
  if (opt.decodeBatches.empty())
    tokens = std::max<int64_t>(tokens, 8);
  if (opt.prefillChunks.empty())
    tokens = std::max<int64_t>(tokens, 2048);
  mem.maxTokens = tokens;
  // Each KV slot (sequence) keeps its own cache and KDA state.
  mem.maxSequences = opt.kvSlots;
  mem.pageTokens = opt.kvPageTokens;
  mem.pages = opt.kvPages;
  if (stop == Stage::Kernel) {
    pm.addPass(createGlmPlanMemory(mem));
    return;
  }
  // Kernels are chosen from the fused ops alone, so glm-emit-kernels runs
  // before glm-plan-memory: NVRTC (most of a cold compile's CPU time) then
  // runs on the other cores while the memory plan, the bindings and the
  // plan itself are built.
  GlmEmitKernelsOptions kernels;
  kernels.archs.assign(opt.archs.begin(), opt.archs.end());
  kernels.compile = opt.compileKernels;
  kernels.cubin = opt.cubin;
  kernels.async = opt.compileKernels && stop == Stage::Plan;
  kernels.kvDtype = opt.kvDtype;
  kernels.moeTrellisTuning = opt.moeTrellisTuning;
  kernels.denseTrellisTuning = opt.denseTrellisTuning;
  kernels.decodeBatches.assign(opt.decodeBatches.begin(),
                               opt.decodeBatches.end());
  kernels.prefillChunks.assign(opt.prefillChunks.begin(),
                               opt.prefillChunks.end());
  pm.addPass(createGlmEmitKernels(kernels));
  pm.addPass(createGlmPlanMemory(mem));
  if (stop == Stage::Cuda)
    return;
  GlmEmitPlanOptions emit;
  emit.output = opt.output;
  emit.memoryPerSpark = opt.memoryPerSpark;
  emit.command = opt.command;
  emit.programmaticLaunch = opt.programmaticLaunch;
  pm.addPass(createGlmEmitPlan(emit));
}

namespace {
/// Options of the registered `glm-compile` pipeline.
struct CompilePipelineOptions
    : public PassPipelineOptions<CompilePipelineOptions> {
  Option<int64_t> ranks{*this, "ranks", llvm::cl::desc("ranks"),
                        llvm::cl::init(1)};
  Option<int64_t> maxContext{*this, "max-context",
                             llvm::cl::desc("KV cache tokens"),
                             llvm::cl::init(8192)};
  Option<std::string> kvDtype{*this, "kv-dtype",
                              llvm::cl::desc("f32, bf16 or fp8"),
                              llvm::cl::init("f32")};
  Option<double> memoryPerSpark{*this, "memory-per-spark",
                                llvm::cl::desc("GiB per rank, 0 = no limit"),
                                llvm::cl::init(0)};
  Option<std::string> output{*this, "output", llvm::cl::desc("plan file"),
                             llvm::cl::init("")};
};
} // namespace

void registerAllGlmPasses() {
  registerGlmcPasses();
  PassPipelineRegistration<CompilePipelineOptions>(
      "glm-compile", "the whole glmc compile pipeline",
      [](OpPassManager &pm, const CompilePipelineOptions &o) {
        PipelineOptions opt;
        opt.ranks = o.ranks;
        opt.maxContext = o.maxContext;
        opt.kvDtype = o.kvDtype;
        opt.memoryPerSpark = o.memoryPerSpark;
        opt.output = o.output;
        buildPipeline(pm, opt);
      });
}

void registerGlmDialects(DialectRegistry &registry) {
  registry.insert<glm::GlmDialect, func::FuncDialect>();
}

} // namespace glmc
