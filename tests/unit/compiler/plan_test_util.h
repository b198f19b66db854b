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
#include "runtime/gen/generator.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace plan_test {

namespace fs = std::filesystem;
using glm::rt::Error;
using glm::rt::Pack;

/// Every scratch buffer of every rank is an argument, input or output of
/// some op, a collective's buffer or a relocation's target: one nobody
/// reads still takes its bytes of the arena (an fp8 LM head once carried a
/// trellis output scratch of rows x vocab floats). Throws naming them.
inline void checkScratchReferenced(const glm::plan::Plan &p,
                                   const std::string &what) {
  for (const glm::plan::RankPlan &r : p.ranks) {
    std::vector<bool> used(r.buffers.size(), false);
    auto mark = [&](int64_t b) {
      if (b >= 0 && size_t(b) < used.size())
        used[size_t(b)] = true;
    };
    for (const glm::plan::GraphDef &g : r.graphs)
      for (const glm::plan::OpDef &op : g.ops) {
        for (const glm::plan::ArgDef &a : op.args)
          if (a.kind == glm::plan::ArgKind::Buffer)
            mark(a.buffer);
        for (uint32_t b : op.inputs)
          mark(b);
        for (uint32_t b : op.outputs)
          mark(b);
      }
    for (const glm::plan::CollectiveDef &c : r.collectives)
      mark(c.buffer);
    for (const glm::plan::BufferDef &b : r.buffers)
      for (const glm::plan::Relocation &rl : b.relocations)
        mark(rl.buffer);
    std::string unused;
    for (size_t i = 0; i < r.buffers.size(); ++i)
      if (r.buffers[i].kind == glm::plan::BufferKind::Scratch && !used[i])
        unused += " " + r.buffers[i].name;
    if (!unused.empty())
      throw Error("plan of " + what + ", rank " + std::to_string(r.rank) +
                  ": scratch buffers no op reads or writes:" + unused);
    // Scratch buffers sharing bytes (the op-local region) are never both
    // used by one op (its consecutive launches).
    auto shares = [&](size_t a, size_t b) {
      const glm::plan::BufferDef &x = r.buffers[a], &y = r.buffers[b];
      return a != b && x.kind == glm::plan::BufferKind::Scratch &&
             y.kind == glm::plan::BufferKind::Scratch &&
             x.arenaOffset < y.arenaOffset + y.bytes &&
             y.arenaOffset < x.arenaOffset + x.bytes;
    };
    auto opOf = [](const std::string &name) { // "l3.moe.2" -> "l3.moe"
      const size_t dot = name.rfind('.');
      return dot != std::string::npos && dot + 1 < name.size() &&
                     name.find_first_not_of("0123456789", dot + 1) ==
                         std::string::npos
                 ? name.substr(0, dot)
                 : name;
    };
    for (const glm::plan::GraphDef &g : r.graphs) {
      std::string current;
      std::set<uint32_t> usedByOp;
      for (const glm::plan::OpDef &op : g.ops) {
        if (opOf(op.name) != current) {
          current = opOf(op.name);
          usedByOp.clear();
        }
        for (const glm::plan::ArgDef &a : op.args) {
          if (a.kind != glm::plan::ArgKind::Buffer || a.buffer < 0)
            continue;
          const uint32_t b = uint32_t(a.buffer);
          for (uint32_t other : usedByOp)
            if (shares(b, other))
              throw Error("plan of " + what + ": op " + current + " uses " +
                          r.buffers[b].name + " and " +
                          r.buffers[other].name + ", which share bytes");
          usedByOp.insert(b);
        }
      }
    }
  }
}

/// Compiles the pack in `dir` for `ranks` ranks into a plan (no NVRTC: the
/// CPU backend runs the twins) with decode graphs of `batches` rows; the
/// KV cache stored as `kvDtype` (glmc compile --kv-dtype).
inline std::shared_ptr<glm::plan::Plan>
compilePlan(const std::string &dir, int ranks, const std::string &manifest = "",
            const std::vector<int64_t> &batches = {1},
            const std::string &denseTrellisTuning = "",
            const std::vector<int64_t> &prefillChunks = {0},
            int64_t kvSlots = 1, bool draft = false,
            const std::string &kvDtype = "f32", int64_t kvPageTokens = 0,
            int64_t kvPages = 0) {
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
  fs::path out =
      fs::temp_directory_path() /
      ("glm-plan-exec-" + std::to_string(::getpid()) + "-" +
       fs::path(dir).filename().string() + "-" + std::to_string(ranks) +
       (draft ? "-draft" : "") + "-" + kvDtype + "-p" +
       std::to_string(kvPageTokens) + ".glmplan");
  glmc::PipelineOptions opt;
  opt.ranks = ranks;
  opt.memoryPerSpark = 0;
  opt.maxContext = 256;
  opt.kvSlots = kvSlots;
  opt.kvDtype = kvDtype;
  opt.kvPageTokens = kvPageTokens;
  opt.kvPages = kvPages;
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
  checkScratchReferenced(*p, dir);
  return p;
}

/// A tiny random GLM-5.3 pack of `layout` (hf, exl3, exlr8), made once per
/// build of the test binary: ctest runs each test in its own process, and
/// quantizing the packs takes most of a test's time, so they are kept under
/// a folder named by this executable's path and modification time (a
/// relinked binary makes new ones). Each is written beside and renamed into
/// place, so processes running at once never see half a pack.
inline std::string tinyPack(const std::string &layout) {
  static std::map<std::string, std::string> made;
  auto it = made.find(layout);
  if (it != made.end())
    return it->second;
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const auto stamp = fs::last_write_time(exe).time_since_epoch().count();
  const fs::path root =
      fs::temp_directory_path() /
      ("glm-plan-exec-tiny-" +
       std::to_string(std::hash<std::string>()(exe.string() + "@" +
                                               std::to_string(stamp))));
  const fs::path dir = root / layout;
  if (!fs::exists(dir / "config.json")) {
    const std::string hf = layout == "hf" ? "" : tinyPack("hf");
    const fs::path tmp =
        root / (layout + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    if (layout == "hf") {
      glmc::writeRandomHfModel("tiny", 1, tmp.string(), /*indexOnly=*/false);
    } else {
      auto src = Pack::open(hf);
      glmc::QuantizeOptions q;
      if (layout == "exl3")
        glmc::quantizeToExl3(*src->config(), src.get(), tmp.string(), q);
      else
        glmc::quantizeToExlr8(*src->config(), src.get(), tmp.string(), q);
    }
    std::error_code ec;
    fs::rename(tmp, dir, ec); // fails when another process was first
    if (ec)
      fs::remove_all(tmp);
  }
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

/// Counter or gauge `name` of the generator's /metrics text; -1 without it.
inline int64_t metric(const glm::rt::Generator &g, const std::string &name) {
  std::smatch m;
  const std::string text = g.metricsText();
  if (!std::regex_search(text, m, std::regex("\n" + name + " (\\d+)")))
    return -1;
  return std::stoll(m[1]);
}

} // namespace plan_test
