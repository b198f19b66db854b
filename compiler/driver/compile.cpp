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
#include "plans/engine_image.h"
#include "plans/plan_inspect.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/command_line.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/progress.h"
#include "runtime/formats/pack.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#ifdef GLM_CODEGEN_AVAILABLE
#include "codegen/codegen.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
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
  std::string kvDtype = "f32";
  std::string moeTrellisTuning, denseTrellisTuning;
  std::string programmaticLaunch = "on";
  double memoryPerSpark = 104;
  std::string emit = "plan";
  std::string dumpIrAfter;
  std::string output;
  bool noKernelCompile = false;
  std::string kernelBinaries = "ptx";
  bool timing = false;
  std::string decodeBatches = "1,2,4,8";
  int64_t kvSlots = 1;
  int64_t kvPageTokens = 0, kvPages = 0;
  std::string draft = "none";
  std::string prefillChunks = "512,2048";
  bool allowContextBeyondModel = false;
  bool maxContextGiven = false; // --max-context on the command line
  bool prefillChunksGiven = false; // --prefill-chunks on the command line
  /// The command line as typed (argv[0] first): recorded in the plan and
  /// the base of every command a refusal prints.
  std::vector<std::string> argv;
};

/// Names each pass as its stage and advances the progress after it.
class ProgressInstrumentation : public mlir::PassInstrumentation {
public:
  explicit ProgressInstrumentation(glm::rt::Progress &p) : progress(p) {}
  void runBeforePass(mlir::Pass *pass, mlir::Operation *) override {
    progress.stage(pass->getArgument().str());
  }
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

constexpr double kGiB = 1024.0 * 1024 * 1024;

/// "104", "0.5": a GiB figure as a person types it.
static std::string gibText(double gib) {
  std::ostringstream os;
  os << gib;
  return os.str();
}

/// A context size people pick: a multiple of 1024 (of 256 below 4096).
static int64_t roundContext(int64_t tokens) {
  const int64_t step = tokens >= 4096 ? 1024 : 256;
  return tokens / step * step;
}

/// The command line with `overrides` applied, quoted for pasting.
static std::string commandWith(
    const CompileArgs &a,
    std::initializer_list<std::pair<const char *, std::string>> overrides) {
  std::vector<std::string> words = a.argv;
  for (const auto &[flag, value] : overrides)
    words = glm::rt::withOption(std::move(words), {flag}, value);
  return glm::rt::shellJoin(words);
}

static int64_t intOf(mlir::DictionaryAttr d, llvm::StringRef k) {
  auto v = d.getAs<mlir::IntegerAttr>(k);
  return v ? v.getInt() : 0;
}

/// One rank's final memory, from glm-emit-plan's `glm.final_memory`.
struct RankMemory {
  int64_t rank = 0;
  uint64_t total = 0, weights = 0, kv = 0, context = 0;
  uint64_t mtp = 0;    // of weights + kv: the MTP layers'
  uint64_t kvRows = 0; // of kv: latent rows and index keys (--kv-dtype's)
  uint64_t stepRows = 0; // sized by the largest step's rows
};

/// One rank's final memory per glm-emit-plan's `glm.final_memory`, whose
/// budget check filled it (empty: it failed before).
static std::vector<RankMemory> finalMemory(mlir::DictionaryAttr fm) {
  std::vector<RankMemory> ranks;
  if (!fm)
    return ranks;
  for (mlir::Attribute r : fm.getAs<mlir::ArrayAttr>("ranks")) {
    auto d = llvm::cast<mlir::DictionaryAttr>(r);
    ranks.push_back({intOf(d, "rank"), uint64_t(intOf(d, "total")),
                     uint64_t(intOf(d, "weights")), uint64_t(intOf(d, "kv")),
                     uint64_t(intOf(d, "context")), uint64_t(intOf(d, "mtp")),
                     uint64_t(intOf(d, "kv_rows")),
                     uint64_t(intOf(d, "step_rows"))});
  }
  return ranks;
}

/// The --prefill-chunks value (the given chunks less the largest ones, "0"
/// when none is left) that fits the budget by this plan's figures; none
/// when no smaller set fits. The activations and the row-sized scratch are
/// sized by the largest step's rows, so a smaller largest chunk scales them
/// (the decode batches stay). An estimate: the compile that uses it checks.
static std::optional<std::string>
fittingChunks(const CompileArgs &a, mlir::DictionaryAttr fm,
              const std::vector<RankMemory> &ranks) {
  const uint64_t budget = uint64_t(intOf(fm, "budget"));
  const int64_t maxTokens = intOf(fm, "max_tokens");
  std::vector<int64_t> chunks = intList(a.prefillChunks, "--prefill-chunks");
  const std::vector<int64_t> batches =
      intList(a.decodeBatches, "--decode-batches");
  std::sort(chunks.begin(), chunks.end());
  const int64_t batchRows = *std::max_element(batches.begin(), batches.end());
  while (budget > 0 && maxTokens > 0 && !chunks.empty() &&
         chunks.back() > 0) {
    chunks.pop_back();
    const bool none = chunks.empty() || chunks.back() <= 0;
    const int64_t rows = std::max<int64_t>(batchRows, none ? 0 : chunks.back());
    bool fits = rows < maxTokens;
    for (const RankMemory &r : ranks)
      fits &= double(r.total) - double(r.stepRows) *
                                    (1.0 - double(rows) / double(maxTokens)) <=
              double(budget);
    if (!fits)
      continue;
    std::string list;
    for (int64_t c : chunks)
      list += (list.empty() ? "" : ",") + std::to_string(c);
    return none ? std::string("0") : list;
  }
  return std::nullopt;
}

/// The "rank r: X of Y GiB" lines: the arena of the final plan per rank,
/// the figure `glmc inspect` shows; then, for a plan over the budget, what
/// would fit, each as a command that works when pasted. Returns false when
/// glm-emit-plan recorded nothing (it failed before its budget check).
static bool reportMemory(const CompileArgs &a, mlir::ModuleOp module,
                         bool over) {
  auto fm = module->getAttrOfType<mlir::DictionaryAttr>("glm.final_memory");
  if (!fm)
    return false;
  const uint64_t budget = uint64_t(intOf(fm, "budget"));
  const int64_t context = intOf(fm, "max_context");
  const std::vector<RankMemory> ranks = finalMemory(fm);
  auto &os = llvm::errs();
  os << "glmc: memory per rank (weights + KV + activations and scratch: the "
        "arena glmc inspect shows)\n";
  for (const RankMemory &r : ranks) {
    os << "  rank " << r.rank << ": "
       << llvm::format(r.total >= kGiB ? "%.2f" : "%.4f", r.total / kGiB);
    if (budget)
      os << " of " << gibText(a.memoryPerSpark) << " GiB";
    else
      os << " GiB (no limit)";
    os << " (" << glm::plan::humanBytes(r.total) << ": weights "
       << glm::plan::humanBytes(r.weights) << ", KV "
       << glm::plan::humanBytes(r.kv) << ", activations and scratch "
       << glm::plan::humanBytes(r.total - r.weights - r.kv);
    if (r.mtp)
      os << "; the MTP layer's weights and KV " << glm::plan::humanBytes(r.mtp)
         << " of it";
    os << ")" << (budget && r.total > budget ? "  OVER" : "") << "\n";
  }
  bool anyOver = false;
  for (const RankMemory &r : ranks)
    anyOver |= budget && r.total > budget;
  if (!over || !anyOver)
    return true;

  // What would fit. Estimates from this plan's figures: the context-sized
  // bytes (KV cache, selection and score rows) scale with --max-context,
  // weights spread over more ranks (replicated tensors do not shrink, so a
  // suggested rank count may in turn be refused: the refusal then says by
  // how much).
  os << "glmc: to fit " << gibText(a.memoryPerSpark) << " GiB per Spark:\n";
  bool any = false;
  int64_t fitContext = context;
  for (const RankMemory &r : ranks) {
    const uint64_t fixed = r.total - r.context;
    if (fixed >= budget || r.context == 0) {
      fitContext = 0;
      break;
    }
    const double perToken = double(r.context) / double(context);
    fitContext = std::min<int64_t>(fitContext,
                                   int64_t(double(budget - fixed) / perToken));
  }
  fitContext = roundContext(fitContext);
  if (fitContext >= 256 && fitContext < context) {
    os << "  a shorter context (" << fitContext << " tokens):\n    "
       << commandWith(a, {{"--max-context", std::to_string(fitContext)}})
       << "\n";
    any = true;
  }
  // A smaller KV storage form: bf16 rows are half of f32's, fp8 rows
  // (E4M3 and a 4-byte scale) at most (n + 4) / 4n of them, 0.258 for the
  // narrowest rows a model has (index keys of 128 values).
  const double toBf16 = a.kvDtype == "f32" ? 0.5 : 1.0,
               toFp8 = a.kvDtype == "f32" ? 0.258 : 0.516;
  for (const auto &[dtype, ratio] :
       {std::pair<const char *, double>{"bf16", toBf16}, {"fp8", toFp8}}) {
    if (ratio >= 1.0 || a.kvDtype == "fp8")
      continue;
    bool fits = true;
    for (const RankMemory &r : ranks)
      fits &=
          double(r.total) - double(r.kvRows) * (1.0 - ratio) <= double(budget);
    if (!fits)
      continue;
    os << "  the KV cache stored as " << dtype
       << (std::string(dtype) == "bf16"
               ? " (half the bytes, values rounded to bf16)"
               : " (E4M3 with a scale per row: about a quarter of f32's "
                 "bytes)")
       << ":\n    " << commandWith(a, {{"--kv-dtype", dtype}}) << "\n";
    any = true;
    break;
  }
  if (std::optional<std::string> list = fittingChunks(a, fm, ranks)) {
    std::vector<int64_t> chunks = intList(*list, "--prefill-chunks");
    const bool none = chunks.size() == 1 && chunks[0] == 0;
    os << "  smaller prefill chunks ("
       << (none ? "none: prompts go token by token"
                : "at most " + std::to_string(chunks.back()) +
                      " tokens a chunk")
       << "):\n    " << commandWith(a, {{"--prefill-chunks", *list}}) << "\n";
    any = true;
  }
  uint64_t maxWeights = 0, maxRest = 0;
  for (const RankMemory &r : ranks) {
    maxWeights = std::max(maxWeights, r.weights);
    maxRest = std::max(maxRest, r.total - r.weights);
  }
  for (int64_t n = a.sparks + 1; n <= 64 && maxRest < budget; ++n)
    if (maxRest + maxWeights * uint64_t(a.sparks) / uint64_t(n) <= budget) {
      os << "  more Sparks (about " << n << "; weights spread, the KV cache "
         << "is on every rank):\n    "
         << commandWith(a, {{"--sparks", std::to_string(n)}}) << "\n";
      any = true;
      break;
    }
  if (!any)
    os << "  neither a shorter --max-context, a smaller --kv-dtype, smaller "
          "--prefill-chunks nor more --sparks alone fits by this plan's "
          "figures: combine them, give fewer --decode-batches, or use a "
          "smaller manifest\n";
  return true;
}

static int runCompile(const CompileArgs &a) {
  Stage stop = a.emit == "model"    ? Stage::Model
               : a.emit == "kernel" ? Stage::Kernel
               : a.emit == "cuda"   ? Stage::Cuda
                                    : Stage::Plan;
  glm::rt::check(stop != Stage::Plan || !a.output.empty(),
                 "glmc compile: --emit=", a.emit, " needs -o ",
                 a.emit == "engine" ? "ENGINE (the executable to write)"
                                    : "PLAN (the plan file)");
  // --emit engine: the plan goes to a temporary file, then into a copy of
  // the glm-engine installed beside glmc (plans/engine_image.h).
  const bool engine = a.emit == "engine";
  std::string runtime;
  if (engine) {
    std::error_code ec;
    const std::filesystem::path self =
        std::filesystem::read_symlink("/proc/self/exe", ec);
    runtime = (self.parent_path() / "glm-engine").string();
    glm::rt::check(!ec && std::filesystem::is_regular_file(runtime),
                   "glmc compile --emit engine: the runtime glm-engine is not "
                   "beside glmc (looked for ", runtime,
                   "); install glmc and glm-engine from the same build");
  }
  const std::string planOut = engine ? a.output + ".plan.tmp" : a.output;
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
  progress.stage("import");
  ImportOptions io;
  io.manifest = a.manifest;
  io.width = a.width;
  io.draft = a.draft == "mtp";
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
  // The context the model was trained for bounds --max-context: positions
  // past it are extrapolation (and every rank pays KV for them).
  int64_t maxContext = a.maxContext;
  if (module && pack && pack->config() &&
      pack->config()->maxPositionEmbeddings > 0) {
    const int64_t modelContext = pack->config()->maxPositionEmbeddings;
    if (!a.maxContextGiven && maxContext > modelContext) {
      maxContext = modelContext; // the default is 8192 or the model's
    } else if (maxContext > modelContext && !a.allowContextBeyondModel) {
      progress.finish();
      llvm::errs() << "glmc: error: --max-context " << maxContext
                   << " is more than the " << modelContext
                   << " tokens the model was trained for "
                      "(max_position_embeddings in "
                   << a.pack << "/config.json); compile for the model's "
                   << "context:\n  "
                   << commandWith(
                          a, {{"--max-context", std::to_string(modelContext)}})
                   << "\nor, to size the KV cache beyond it anyway, add "
                      "--allow-context-beyond-model:\n  "
                   << glm::rt::shellJoin(glm::rt::withOption(
                          a.argv, {"--allow-context-beyond-model"}, "",
                          /*takesValue=*/false))
                   << "\n";
      return 1;
    }
  }
  // The passes need the module only. The pack's index is ~10^6 small
  // allocations (~0.3 s of CPU to free) and the process ends when the plan
  // is written, so it is left to the OS rather than freed on a core that
  // NVRTC needs (as clang's -disable-free does).
  (void)pack.release();
  if (!module)
    return 1;

  PipelineOptions opt;
  opt.ranks = a.sparks;
  opt.maxContext = maxContext;
  opt.command = glm::rt::shellJoin(a.argv);
  opt.kvDtype = a.kvDtype;
  opt.memoryPerSpark = a.memoryPerSpark;
  opt.archs = splitList(a.arch);
  glm::rt::check(!opt.archs.empty(), "glmc compile: --arch lists no arch");
#ifdef GLM_CODEGEN_AVAILABLE
  opt.compileKernels = !a.noKernelCompile && glm::codegen::nvrtcAvailable();
#endif
  opt.cubin = a.kernelBinaries == "cubin";
  opt.output = stop == Stage::Plan ? planOut : "";
  opt.moeTrellisTuning = a.moeTrellisTuning;
  opt.denseTrellisTuning = a.denseTrellisTuning;
  opt.programmaticLaunch = a.programmaticLaunch == "on";
  glm::rt::check(a.kvSlots >= 1 && a.kvSlots <= 256,
                 "glmc compile: --kv-slots ", a.kvSlots,
                 " is out of range (1..256 sequences)");
  opt.kvSlots = a.kvSlots;
  glm::rt::check(a.kvPageTokens == 0 ||
                     (a.kvPageTokens >= 64 && a.kvPageTokens <= (1 << 20) &&
                      (a.kvPageTokens & (a.kvPageTokens - 1)) == 0),
                 "glmc compile: --kv-page-tokens ", a.kvPageTokens,
                 " is not a power of two from 64 (the indexer's key tile) "
                 "to 2^20");
  glm::rt::check(a.kvPages == 0 ||
                     (a.kvPages >= 2 && a.kvPages <= (int64_t(1) << 30)),
                 "glmc compile: --kv-pages ", a.kvPages,
                 " is out of range (0 = the default, else 2 (a page and the "
                 "sink) to 2^30)");
  glm::rt::check(a.kvPages == 0 || a.kvPageTokens > 0,
                 "glmc compile: --kv-pages needs --kv-page-tokens");
  opt.kvPageTokens = a.kvPageTokens;
  opt.kvPages = a.kvPages;
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
  // With the default prefill chunks an over-budget plan is compiled again
  // with fewer: its diagnostics are held until that is decided.
  std::vector<mlir::Diagnostic> held;
  std::optional<mlir::ScopedDiagnosticHandler> hold;
  if (!a.prefillChunksGiven && stop == Stage::Plan)
    hold.emplace(&ctx, [&](mlir::Diagnostic &d) {
      held.push_back(std::move(d));
      return mlir::success();
    });
  const bool passed = mlir::succeeded(pm.run(*module));
  hold.reset();
  auto replayHeld = [&] {
    for (mlir::Diagnostic &d : held)
      ctx.getDiagEngine().emit(std::move(d));
    held.clear();
  };
  if (!passed) {
    progress.finish();
    if (engine)
      std::filesystem::remove(planOut);
    if (stop != Stage::Plan)
      return 1;
    // Over the budget with the default prefill chunks: the largest ones
    // that fit are the default for this plan (the same command makes the
    // same decision, so the plan stays reproducible from its command).
    auto fm = (*module)->getAttrOfType<mlir::DictionaryAttr>("glm.final_memory");
    const std::vector<RankMemory> ranks = finalMemory(fm);
    const bool over = std::any_of(ranks.begin(), ranks.end(), [&](auto &r) {
      return r.total > uint64_t(intOf(fm, "budget"));
    });
    if (!a.prefillChunksGiven && over) {
      std::optional<std::string> fit = fittingChunks(a, fm, ranks);
      if (fit && *fit != "0") {
        llvm::errs() << "glmc: the default prefill chunks " << a.prefillChunks
                     << " do not fit " << gibText(a.memoryPerSpark)
                     << " GiB per Spark; compiling with --prefill-chunks "
                     << *fit << " (give --prefill-chunks to choose)\n";
        CompileArgs smaller = a;
        smaller.prefillChunks = *fit;
        smaller.prefillChunksGiven = true;
        return runCompile(smaller);
      }
    }
    replayHeld();
    reportMemory(a, *module, /*over=*/true);
    return 1;
  }
  replayHeld();
  progress.finish();
  if (engine) {
    const std::string bytes = glm::rt::readFileBounded(
        planOut, glm::rt::kMaxPlanBytes, "the plan just written");
    std::filesystem::remove(planOut);
    glm::plan::writeEngineImage(
        runtime, std::vector<uint8_t>(bytes.begin(), bytes.end()), a.output);
    llvm::errs() << "glmc: wrote " << a.output << " (" << runtime
                 << " with the plan inside: " << a.output
                 << " run|serve|bench --pack DIR) for " << a.sparks
                 << (a.sparks == 1 ? " Spark\n" : " Sparks\n");
    reportMemory(a, *module, /*over=*/false);
    return 0;
  }
  if (stop == Stage::Plan) {
    llvm::errs() << "glmc: wrote " << a.output << " for " << a.sparks
                 << (a.sparks == 1 ? " Spark\n" : " Sparks\n");
    reportMemory(a, *module, /*over=*/false);
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

void addCompileCommand(CLI::App &app, int &rc,
                       const std::vector<std::string> &argv) {
  auto args = std::make_shared<CompileArgs>();
  args->argv = argv;
  CLI::App *cmd = app.add_subcommand(
      "compile",
      "Compile a pack into a plan for N Sparks. Reads config.json, the\n"
      "manifest and the pack index only (no weight bytes), shards experts\n"
      "by the exlr8 rule (half h of expert e in layer L on rank\n"
      "(16e + h + L) mod N), attention by heads and the LM head by\n"
      "vocabulary, fuses the model into kernels, plans each rank's memory,\n"
      "compiles the kernels with NVRTC for every --arch and writes the plan\n"
      "if every rank's final arena fits --memory-per-spark. The plan records\n"
      "this command line: the same command gives byte-identical plans.");
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
  CLI::Option *maxContext =
      cmd->add_option("--max-context", args->maxContext,
                      "tokens the KV cache holds per sequence (default 8192, "
                      "or the model's max_position_embeddings when smaller; "
                      "more than max_position_embeddings is refused unless "
                      "--allow-context-beyond-model)")
          ->default_val(8192)
          ->check(glm::rt::cliInt(1, glm::rt::kMaxContextTokens));
  cmd->add_flag("--allow-context-beyond-model", args->allowContextBeyondModel,
                "accept a --max-context above config.json's "
                "max_position_embeddings");
  cmd->add_option("--kv-dtype", args->kvDtype,
                  "how the KV cache (MLA latent rows and DSA index keys) is "
                  "stored: f32 (4 bytes a value, the computed values), bf16 "
                  "(2: rounded to nearest even), fp8 (1: E4M3 with an fp32 "
                  "scale per cached row, amax/448)")
      ->default_val("f32")
      ->check(CLI::Validator(
          [](std::string &v) -> std::string {
            if (v == "f32" || v == "bf16" || v == "fp8")
              return "";
            return "'" + v +
                   "' is no KV cache storage: give f32 (4 bytes a value), "
                   "bf16 (2) or fp8 (E4M3, 1 and a 4-byte scale per row)";
          },
          "f32|bf16|fp8"));
  cmd->add_option("--memory-per-spark", args->memoryPerSpark,
                  "GiB each rank may use (weights + KV + activations and "
                  "scratch: the final plan's arena, as glmc inspect shows "
                  "it); 0 = no limit. Every compile prints 'rank r: X of Y "
                  "GiB'; a plan over it is refused naming each rank over "
                  "it, with commands that fit")
      ->default_val(104)
      ->check(glm::rt::cliNumber(0, 1 << 20));
  cmd->add_option("--emit", args->emit,
                  "stop after a stage: model (sharded model-level IR), kernel "
                  "(fused kernel-level IR with memory plan), cuda (kernel "
                  "sources), plan (the plan file), engine (one executable: "
                  "the glm-engine beside glmc with the plan inside, run as "
                  "ENGINE run|serve|bench --pack DIR; glmc inspect reads it)")
      ->default_val("plan")
      ->check(CLI::IsMember({"model", "kernel", "cuda", "plan", "engine"}));
  cmd->add_option("--dump-ir-after", args->dumpIrAfter,
                  "print the IR after a pass (shard-tp, select-width, fuse, "
                  "emit-kernels, plan-memory, emit-plan) to stderr");
  cmd->add_option("--kv-slots", args->kvSlots,
                  "sequences the plan holds at once: each has its own KV "
                  "cache, index keys and (GLM-5.3-Flash) KDA state, so "
                  "memory grows with it; the rows of a decode batch name "
                  "their slots")
      ->capture_default_str();
  cmd->add_option("--kv-page-tokens", args->kvPageTokens,
                  "paged KV cache: the latent caches and index keys are "
                  "pages of this many tokens (a power of two from 64 that "
                  "divides --max-context), which sequences sharing a "
                  "prompt prefix share (glm-engine serve reuses them and "
                  "skips their prefill); 0 = one --max-context block per "
                  "slot. GLM-5.3 only: Flash's KDA state and k-pool are "
                  "per sequence")
      ->capture_default_str();
  cmd->add_option("--kv-pages", args->kvPages,
                  "with --kv-page-tokens: pages the caches hold (their "
                  "memory), one of them a sink for padding rows, at least "
                  "--max-context / --kv-page-tokens + 1; 0 = "
                  "--kv-slots x --max-context / --kv-page-tokens + 1, the "
                  "unpaged bytes. More slots than the pages cover lets more "
                  "short sequences run at once; requests wait when the pages "
                  "run out")
      ->capture_default_str();
  cmd->add_option("--draft", args->draft,
                  "mtp: also compile the MTP draft graph (the pack's "
                  "nextn layer drafts a token per row for glm-engine run/"
                  "serve --draft mtp; the verify step is a decode batch); "
                  "none: no draft graph")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "mtp"}));
  cmd->add_option("--decode-batches", args->decodeBatches,
                  "decode graph buckets: batch sizes 1..8, comma-separated "
                  "(kernels are instantiated per batch; a step of a batch "
                  "between buckets runs in the next larger one)")
      ->capture_default_str();
  CLI::Option *prefillChunks = cmd->add_option(
      "--prefill-chunks", args->prefillChunks,
      "prefill graph buckets: chunk sizes in tokens, comma-separated; 0 = no "
      "prefill graphs (the activation arena is sized for the largest). "
      "Without this option, a plan over --memory-per-spark with the default "
      "drops the default's largest chunks until it fits");
  prefillChunks->capture_default_str();
  cmd->add_option("--programmatic-launch", args->programmaticLaunch,
                  "on: each kernel launch may be scheduled while the one "
                  "before it runs (CUDA programmatic dependent launch, "
                  "sm_90 and later; the kernel waits for its predecessor "
                  "before touching memory), hiding launch latency; off: "
                  "plain stream order. Recorded in the plan")
      ->check(CLI::IsMember({"on", "off"}))
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
                  "plan file (--emit=plan), executable (--emit=engine), else "
                  "IR/source output (default stdout)");
  cmd->callback([args, maxContext, prefillChunks, &rc] {
    args->maxContextGiven = maxContext->count() > 0;
    args->prefillChunksGiven = prefillChunks->count() > 0;
    rc = runCompile(*args);
  });
}

} // namespace glmc
