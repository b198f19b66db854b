//===- compile.cpp - glmc compile: pack → plan for N Sparks ---------------===//
//
// Imports a pack's config, manifest and index (no weight bytes), runs the
// glm pass pipeline (shard-tp → select-width → fuse → plan-memory →
// emit-kernels → emit-plan) and writes the plan, or stops at any stage with
// --emit=model|kernel|cuda. Diagnostics point into config.json / the
// manifest; the same inputs give the same plan bytes.
//
//===----------------------------------------------------------------------===//
#include "codegen/tuning.h"
#include "compiler/driver/commands.h"
#include "compiler/mlir/Import.h"
#include "compiler/mlir/Passes.h"
#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/progress.h"
#include "runtime/formats/pack.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#ifdef GLM_CODEGEN_AVAILABLE
#include "codegen/codegen.h"
#endif

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <memory>
#include <sstream>

namespace glmc {
namespace {

struct CompileArgs {
  std::string pack;
  int64_t sparks = 1;
  std::string manifest;
  int width = 0;
  std::string arch = "sm_121";
  int64_t maxContext = 8192;
  std::string kvDtype = "bf16";
  std::string moeTrellisTuning, denseTrellisTuning;
  double memoryPerSpark = 104;
  std::string emit = "plan";
  std::string dumpIrAfter;
  std::string output;
  bool noKernelCompile = false;
  std::string kernelBinaries = "ptx";
  bool timing = false;
  std::string decodeBatches = "1,2,4,8";
  std::string prefillChunks = "512,2048";
};

/// Advances the progress bar after every pass.
class ProgressInstrumentation : public mlir::PassInstrumentation {
public:
  explicit ProgressInstrumentation(glm::rt::Progress &p) : progress(p) {}
  void runAfterPass(mlir::Pass *, mlir::Operation *) override {
    progress.advance();
  }
  void runAfterPassFailed(mlir::Pass *, mlir::Operation *) override {
    progress.advance();
  }

private:
  glm::rt::Progress &progress;
};

static std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// "1,2,4" → {1, 2, 4}; throws naming the option on anything else.
static std::vector<int64_t> intList(const std::string &s,
                                    const std::string &option) {
  std::vector<int64_t> out;
  for (const std::string &item : splitList(s)) {
    std::optional<int64_t> v = glm::rt::parseInt64(item);
    glm::rt::check(v.has_value(), "glmc compile: ", option, " '", s, "': '",
                   item, "' is not a whole number (give a comma-separated "
                   "list, e.g. 1,2,4,8)");
    out.push_back(*v);
  }
  glm::rt::check(!out.empty(), "glmc compile: ", option, " lists nothing");
  return out;
}

static int runCompile(const CompileArgs &a) {
  Stage stop = a.emit == "model"    ? Stage::Model
               : a.emit == "kernel" ? Stage::Kernel
               : a.emit == "cuda"   ? Stage::Cuda
                                    : Stage::Plan;
  glm::rt::check(stop != Stage::Plan || !a.output.empty(),
                 "glmc compile: --emit=plan needs -o PLAN (the plan file)");
  mlir::DialectRegistry registry;
  registerGlmDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading(); // deterministic diagnostics, 2-core machines
  ctx.printOpOnDiagnostic(false); // a full-size module is megabytes of IR
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diag(sourceMgr, &ctx, llvm::errs());

  int stages = stop == Stage::Model ? 3 : stop == Stage::Kernel ? 5
               : stop == Stage::Cuda ? 6 : 7;
  glm::rt::Progress progress("compile", stages, "stages");
  ImportOptions io;
  io.manifest = a.manifest;
  io.width = a.width;
  std::unique_ptr<glm::rt::Pack> pack;
  io.keepPack = &pack;
  // --timing: wall time per pass (and the import) on stderr.
  mlir::DefaultTimingManager tm;
  tm.setEnabled(a.timing);
  mlir::TimingScope root = tm.getRootScope();
  mlir::TimingScope importTimer = root.nest("import");
  mlir::OwningOpRef<mlir::ModuleOp> module = importPack(ctx, a.pack, io);
  importTimer.stop();
  progress.advance();
  // The passes need the module only. The pack's index is ~10^6 small
  // allocations (~0.3 s of CPU to free) and the process ends when the plan
  // is written, so it is left to the OS rather than freed on a core that
  // NVRTC needs (as clang's -disable-free does).
  (void)pack.release();
  if (!module)
    return 1;

  PipelineOptions opt;
  opt.ranks = a.sparks;
  opt.maxContext = a.maxContext;
  opt.kvDtype = a.kvDtype;
  opt.memoryPerSpark = a.memoryPerSpark;
  opt.archs = splitList(a.arch);
  glm::rt::check(!opt.archs.empty(), "glmc compile: --arch lists no arch");
#ifdef GLM_CODEGEN_AVAILABLE
  opt.compileKernels = !a.noKernelCompile && glm::codegen::nvrtcAvailable();
#endif
  opt.cubin = a.kernelBinaries == "cubin";
  opt.output = stop == Stage::Plan ? a.output : "";
  opt.moeTrellisTuning = a.moeTrellisTuning;
  opt.denseTrellisTuning = a.denseTrellisTuning;
  opt.decodeBatches = intList(a.decodeBatches, "--decode-batches");
  for (int64_t b : opt.decodeBatches)
    glm::rt::check(b >= 1 && b <= 8, "glmc compile: --decode-batches: batch ",
                   b, " is out of range (the decode kernels take 1..8)");
  opt.prefillChunks = intList(a.prefillChunks, "--prefill-chunks");
  for (int64_t c : opt.prefillChunks)
    glm::rt::check(c >= 0 && c <= (int64_t(1) << 20) &&
                       (c > 0 || opt.prefillChunks.size() == 1),
                   "glmc compile: --prefill-chunks: chunk ", c,
                   " is out of range (1..1048576 tokens, or 0 alone for no "
                   "prefill graphs)");

  mlir::PassManager pm(&ctx);
  buildPipeline(pm, opt, stop);
  pm.addInstrumentation(std::make_unique<ProgressInstrumentation>(progress));
  if (a.timing)
    pm.enableTiming(root);
  if (!a.dumpIrAfter.empty()) {
    std::string want = a.dumpIrAfter;
    if (want.rfind("glm-", 0) != 0)
      want = "glm-" + want;
    bool known = false;
    for (mlir::Pass &p : pm.getPasses())
      known |= p.getArgument() == want;
    glm::rt::check(known, "glmc compile: --dump-ir-after ", a.dumpIrAfter,
                   " names no pass of this pipeline (glm-shard-tp, "
                   "glm-select-width, glm-fuse, glm-plan-memory, "
                   "glm-emit-kernels, glm-emit-plan)");
    pm.enableIRPrinting(
        [](mlir::Pass *, mlir::Operation *) { return false; },
        [want](mlir::Pass *p, mlir::Operation *) {
          return p->getArgument() == want;
        },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, llvm::errs());
  }
  if (mlir::failed(pm.run(*module)))
    return 1;
  progress.finish();
  if (stop == Stage::Plan) {
    llvm::errs() << "glmc: wrote " << a.output << " for " << a.sparks
                 << (a.sparks == 1 ? " Spark\n" : " Sparks\n");
    return 0;
  }
  std::string err;
  auto out = mlir::openOutputFile(a.output.empty() ? "-" : a.output, &err);
  glm::rt::check(out != nullptr, "glmc compile: cannot write ", a.output, ": ",
                 err);
  if (stop == Stage::Cuda) {
    auto specs = (*module)->getAttrOfType<mlir::ArrayAttr>("glm.kernel_specs");
    for (mlir::Attribute s : specs) {
      auto d = llvm::cast<mlir::DictionaryAttr>(s);
      out->os() << "// ===== " << d.getAs<mlir::StringAttr>("name").getValue()
                << " =====\n";
      if (auto src = d.getAs<mlir::StringAttr>("source"))
        out->os() << src.getValue() << "\n";
      else
        out->os() << "// (no source: this build has no codegen)\n";
    }
  } else {
    module->print(out->os());
  }
  out->keep();
  return 0;
}

} // namespace

/// A CLI11 validator: the parser's Error text when `parse` refuses the value.
template <class Parse> static auto parsesAs(Parse parse) {
  return [parse](const std::string &v) {
    try {
      parse(v);
      return std::string();
    } catch (const std::exception &e) {
      return std::string(e.what());
    }
  };
}

void addCompileCommand(CLI::App &app, int &rc) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile",
      "Compile a pack into a plan for N Sparks. Reads config.json, the\n"
      "manifest and the pack index only (no weight bytes), shards experts\n"
      "by the exlr8 rule (half h of expert e in layer L on rank\n"
      "(16e + h + L) mod N), attention by heads and the LM head by\n"
      "vocabulary, fuses the model into kernels, plans each rank's memory\n"
      "(refusing plans that do not fit --memory-per-spark), compiles the\n"
      "kernels with NVRTC for every --arch and writes the plan.\n"
      "Same inputs give byte-identical plans.");
  cmd->add_option("PACK", args->pack, "pack directory (hf, exl3 or exlr8)")
      ->required();
  cmd->add_option("--sparks", args->sparks,
                  "number of Sparks (tensor-parallel ranks), 1..64")
      ->default_val(1)
      ->check(glm::rt::cliInt(1, 64));
  cmd->add_option("--manifest", args->manifest,
                  "exlr8 manifest NAME (manifests/exlr8-manifest-NAME.json) "
                  "or FILE; default: the pack's only manifest");
  cmd->add_option("--width", args->width,
                  "exlr8: one width K for every half (overrides the manifest)")
      ->check(glm::rt::cliInt(1, 8));
  cmd->add_option("--arch", args->arch,
                  "target archs, comma-separated (sm_121 = Spark, sm_90 = "
                  "Hopper)")
      ->default_val("sm_121");
  cmd->add_option("--max-context", args->maxContext,
                  "tokens the KV cache holds per sequence")
      ->default_val(8192)
      ->check(glm::rt::cliInt(1, glm::rt::kMaxContextTokens));
  cmd->add_option("--kv-dtype", args->kvDtype, "KV cache element type")
      ->default_val("bf16")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_option("--memory-per-spark", args->memoryPerSpark,
                  "GiB each rank may use (weights + KV + activations); 0 = "
                  "no limit. A plan over it is refused with a per-rank table")
      ->default_val(104)
      ->check(glm::rt::cliNumber(0, 1 << 20));
  cmd->add_option("--emit", args->emit,
                  "stop after a stage: model (sharded model-level IR), kernel "
                  "(fused kernel-level IR with memory plan), cuda (kernel "
                  "sources), plan (the plan file)")
      ->default_val("plan")
      ->check(CLI::IsMember({"model", "kernel", "cuda", "plan"}));
  cmd->add_option("--dump-ir-after", args->dumpIrAfter,
                  "print the IR after a pass (shard-tp, select-width, fuse, "
                  "emit-kernels, plan-memory, emit-plan) to stderr");
  cmd->add_option("--decode-batches", args->decodeBatches,
                  "decode graph buckets: batch sizes 1..8, comma-separated "
                  "(kernels are instantiated per batch; a step of a batch "
                  "between buckets runs in the next larger one)")
      ->capture_default_str();
  cmd->add_option("--prefill-chunks", args->prefillChunks,
                  "prefill graph buckets: chunk sizes in tokens, "
                  "comma-separated; 0 = no prefill graphs (the activation "
                  "arena is sized for the largest)")
      ->capture_default_str();
  cmd->add_option("--moe-trellis-tuning", args->moeTrellisTuning,
                  "launch tuning of the moe_trellis expert kernels, "
                  "guSplit:downGroup:threads:pipe:minBlocks (default: "
                  "codegen's for the model, 24:2:128:4:4 at GLM-5.3's "
                  "width); recorded in the plan, shown by glmc inspect; "
                  "time the result with glm-engine bench --plan")
      ->check(parsesAs(glm::codegen::parseMoeTrellisTuning));
  cmd->add_option("--dense-trellis-tuning", args->denseTrellisTuning,
                  "launch tuning of the dense_trellis GEMVs, warpsPerSm:"
                  "minRows:maxSplit:threads:pipe:pipeBatched:minBlocks "
                  "(default 16:2:128:128:2:2:4); recorded in the plan")
      ->check(parsesAs(glm::codegen::parseDenseTrellisTuning));
  cmd->add_flag("--no-nvrtc", args->noKernelCompile,
                "generate kernel sources but do not compile them");
  cmd->add_option("--kernel-binaries", args->kernelBinaries,
                  "what NVRTC puts in the plan per arch: ptx = PTX only "
                  "(no ptxas: about half the NVRTC time of a cold compile), "
                  "which glm-engine JITs on all its cores at its first start "
                  "and keeps in its kernel cache; cubin = PTX and SASS, "
                  "launched as is (no JIT at any start)")
      ->check(CLI::IsMember({"cubin", "ptx"}))
      ->capture_default_str();
  cmd->add_flag("--timing", args->timing,
                "print the wall time of the import and of every pass");
  cmd->add_option("-o,--output", args->output,
                  "plan file (--emit=plan), else IR/source output (default "
                  "stdout)");
  cmd->callback([args, &rc] { rc = runCompile(*args); });
}

} // namespace glmc
