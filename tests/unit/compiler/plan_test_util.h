//===- plan_test_util.h - plans compiled for the executor tests -----------===//
//
// The compiled plans the plan-executor tests run (plan_exec_test.cpp) and
// check (launch_bounds_test.cpp): a pack through the whole pipeline, no
// NVRTC, the tiny random packs of the three layouts, made once, and the
// executor over every rank of a plan on CPU backends.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/mlir/Import.h"
#include "compiler/mlir/Passes.h"
#include "compiler/packtools/packtools.h"
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/exec/cpu_backend.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace plan_test {

namespace fs = std::filesystem;
using glm::rt::Error;
using glm::rt::Pack;

/// Compiles the pack in `dir` for `ranks` ranks into a plan (no NVRTC: the
/// CPU backend runs the twins) with decode graphs of `batches` rows.
inline std::shared_ptr<glm::plan::Plan>
compilePlan(const std::string &dir, int ranks, const std::string &manifest = "",
            const std::vector<int64_t> &batches = {1},
            const std::string &denseTrellisTuning = "",
            const std::vector<int64_t> &prefillChunks = {0},
            int64_t kvSlots = 1, bool draft = false) {
  mlir::DialectRegistry registry;
  glmc::registerGlmDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading();
  glmc::ImportOptions io;
  io.manifest = manifest;
  io.draft = draft;
  auto module = glmc::importPack(ctx, dir, io);
  if (!module)
    throw Error("import of " + dir + " failed");
  fs::path out = fs::temp_directory_path() /
                 ("glm-plan-exec-" + std::to_string(::getpid()) + "-" +
                  fs::path(dir).filename().string() + "-" +
                  std::to_string(ranks) + (draft ? "-draft" : "") +
                  ".glmplan");
  glmc::PipelineOptions opt;
  opt.ranks = ranks;
  opt.memoryPerSpark = 0;
  opt.maxContext = 256;
  opt.kvSlots = kvSlots;
  opt.decodeBatches = batches;
  opt.prefillChunks = prefillChunks;
  opt.denseTrellisTuning = denseTrellisTuning;
  opt.output = out.string();
  mlir::PassManager pm(&ctx);
  glmc::buildPipeline(pm, opt);
  if (mlir::failed(pm.run(*module)))
    throw Error("pipeline failed for " + dir);
  auto p = std::make_shared<glm::plan::Plan>(glm::plan::readPlan(out.string()));
  fs::remove(out);
  return p;
}

/// A tiny random GLM-5.3 pack of `layout` (hf, exl3, exlr8), made once.
inline std::string tinyPack(const std::string &layout) {
  static std::map<std::string, std::string> made;
  auto it = made.find(layout);
  if (it != made.end())
    return it->second;
  const fs::path root = fs::temp_directory_path() /
                        ("glm-plan-exec-tiny-" + std::to_string(::getpid()));
  const fs::path hf = root / "hf";
  if (!fs::exists(hf / "config.json")) {
    fs::create_directories(hf);
    glmc::writeRandomHfModel("tiny", 1, hf.string(), /*indexOnly=*/false);
  }
  if (layout == "hf")
    return made[layout] = hf.string();
  const fs::path dir = root / layout;
  fs::create_directories(dir);
  auto src = Pack::open(hf.string());
  glmc::QuantizeOptions q;
  if (layout == "exl3")
    glmc::quantizeToExl3(*src->config(), src.get(), dir.string(), q);
  else
    glmc::quantizeToExlr8(*src->config(), src.get(), dir.string(), q);
  return made[layout] = dir.string();
}

/// The plan executor over every rank of `plan`, CPU backends, loaded
/// (random weights when `randomSeed` is not 0).
inline std::unique_ptr<glm::rt::exec::PlanExecutor>
cpuExecutor(std::shared_ptr<glm::plan::Plan> plan, const std::string &dir,
            uint64_t randomSeed = 0) {
  namespace exec = glm::rt::exec;
  std::vector<uint32_t> ranks;
  std::vector<std::unique_ptr<exec::Backend>> backends;
  for (uint32_t r = 0; r < plan->numRanks; ++r) {
    ranks.push_back(r);
    backends.push_back(exec::makeCpuBackend(*plan));
  }
  auto e = std::make_unique<exec::PlanExecutor>(
      plan, dir, std::move(ranks), std::move(backends),
      exec::inProcessCollectives());
  if (randomSeed)
    e->useRandomWeights(randomSeed);
  e->load();
  return e;
}

} // namespace plan_test
