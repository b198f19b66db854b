//===- budget_hints_test.cpp - honest memory budgets and pasteable hints --===//
//
// The budget check runs on the final plan (the arena glmc inspect shows,
// scratch included) and records its figures; the plan records the command
// that made it; re-plan commands keep what the user chose and change only
// what they must; piped progress lines are rate-limited and carry an ETA.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Import.h"
#include "compiler/mlir/Passes.h"
#include "compiler/packtools/packtools.h"
#include "plans/plan.h"
#include "runtime/base/command_line.h"
#include "runtime/base/error.h"
#include "runtime/base/progress.h"
#include "runtime/model/config.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;
using glm::rt::shellJoin;
using glm::rt::shellSplit;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(CommandLine, QuotesOnlyWhatTheShellWouldSplit) {
  EXPECT_EQ(shellJoin({"glmc", "compile", "tiny", "--arch", "sm_121,sm_90"}),
            "glmc compile tiny --arch sm_121,sm_90");
  EXPECT_EQ(shellJoin({"glmc", "compile", "my pack", "-o", "it's.glmplan"}),
            "glmc compile 'my pack' -o 'it'\\''s.glmplan'");
  const std::vector<std::string> words = {"a b", "it's", "$HOME", "", "x"};
  EXPECT_EQ(shellSplit(shellJoin(words)), words);
  EXPECT_EQ(shellSplit("glmc \"a b\" c\\ d"),
            (std::vector<std::string>{"glmc", "a b", "c d"}));
}

TEST(CommandLine, WithOptionReplacesEveryForm) {
  std::vector<std::string> w = {"glmc",   "compile",    "tiny", "--max-context",
                                "300000", "--sparks=2", "-o",   "p.glmplan"};
  EXPECT_EQ(shellJoin(glm::rt::withOption(w, {"--max-context"}, "4096")),
            "glmc compile tiny --sparks=2 -o p.glmplan --max-context 4096");
  EXPECT_EQ(shellJoin(glm::rt::withOption(w, {"--sparks"}, "4")),
            "glmc compile tiny --max-context 300000 -o p.glmplan --sparks 4");
  EXPECT_EQ(shellJoin(glm::rt::withOption(w, {"--allow-context-beyond-model"},
                                          "", /*takesValue=*/false)),
            "glmc compile tiny --max-context 300000 --sparks=2 -o p.glmplan "
            "--allow-context-beyond-model");
}

TEST(Replan, KeepsTheRecordedChoices) {
  glm::plan::KeyValues opts = {
      {"command", "build/bin/glmc compile --no-nvrtc --manifest mixed /p/tiny "
                  "--arch sm_121,sm_90 --width 3 -o a.glmplan"}};
  EXPECT_EQ(glm::plan::replanCommand(opts, {}, 2, "tiny", "b.glmplan",
                                     {{"--sparks", "4"}}),
            "build/bin/glmc compile --no-nvrtc --manifest mixed tiny --arch "
            "sm_121,sm_90 --width 3 -o b.glmplan --sparks 4");
  // Without a pack or plan path the recorded ones stay.
  EXPECT_EQ(glm::plan::replanCommand(opts, {}, 2, "", "",
                                     {{"--max-context", "9000"}}),
            "build/bin/glmc compile --no-nvrtc --manifest mixed /p/tiny "
            "--arch sm_121,sm_90 --width 3 -o a.glmplan --max-context 9000");
}

TEST(Replan, PlansWithoutACommandUseTheirOptions) {
  glm::plan::KeyValues opts = {
      {"manifest", "k3"}, {"max_context", "2048"}, {"kv_dtype", "bf16"}};
  EXPECT_EQ(glm::plan::replanCommand(opts, {"sm_121", "sm_90"}, 2, "tiny",
                                     "p.glmplan"),
            "glmc compile tiny --sparks 2 --manifest k3 --max-context 2048 "
            "--arch sm_121,sm_90 -o p.glmplan");
}

TEST(Progress, PipedLinesAreRateLimited) {
  using glm::rt::progressLineDue;
  // Nothing for the first 2 s: short runs stay silent.
  EXPECT_FALSE(progressLineDue(1.0, 1.0, false, 2.0, 5, 0, true));
  EXPECT_TRUE(progressLineDue(2.5, 2.5, false, 2.0, 1, 0, false));
  // Then at most once a second, for a new tenth or stage, or every 5 s.
  EXPECT_FALSE(progressLineDue(3.0, 0.5, true, 2.0, 9, 1, true));
  EXPECT_FALSE(progressLineDue(4.0, 2.0, true, 2.0, 1, 1, false));
  EXPECT_TRUE(progressLineDue(4.0, 2.0, true, 2.0, 2, 1, false));
  EXPECT_TRUE(progressLineDue(4.0, 2.0, true, 2.0, 1, 1, true));
  EXPECT_TRUE(progressLineDue(9.0, 5.0, true, 2.0, 1, 1, false));
  EXPECT_EQ(
      glm::rt::progressLine("compile", "stages", "glm-fuse", 2, 7, 4.0, false),
      "compile: 2/7 stages (glm-fuse), 4.0 s, about 10.0 s left");
  EXPECT_EQ(glm::rt::progressLine("verify", "objects", "", 10, 10, 125.0, true),
            "verify: done, 10/10 objects in 2 min 5 s");
}

/// An index-only tiny exlr8 pack, made once.
std::string tinyPack() {
  static std::string dir;
  if (!dir.empty())
    return dir;
  fs::path d = fs::temp_directory_path() /
               ("glmc-budget-test-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  glmc::writeRandomHfModel("tiny", 1, d.string(), /*indexOnly=*/true);
  glm::rt::ModelConfig cfg = glm::rt::loadModelConfig(d.string());
  glmc::QuantizeOptions q;
  q.indexOnly = true;
  glmc::quantizeToExlr8(cfg, nullptr, d.string(), q);
  return dir = d.string();
}

struct Outcome {
  bool ok = false;
  std::vector<uint64_t> totals; // glm.final_memory per rank
  uint64_t budget = 0;
};

Outcome compileWithBudget(double gib, const std::string &out,
                          const std::string &command = "") {
  mlir::DialectRegistry registry;
  glmc::registerGlmDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading();
  ctx.getDiagEngine().registerHandler([](mlir::Diagnostic &) {});
  glmc::ImportOptions io;
  io.width = 3;
  auto module = glmc::importPack(ctx, tinyPack(), io);
  if (!module)
    throw glm::rt::Error("import failed");
  glmc::PipelineOptions opt;
  opt.ranks = 2;
  opt.maxContext = 4096;
  opt.memoryPerSpark = gib;
  opt.output = out;
  opt.command = command;
  mlir::PassManager pm(&ctx);
  glmc::buildPipeline(pm, opt);
  Outcome o;
  o.ok = mlir::succeeded(pm.run(*module));
  auto fm = (*module)->getAttrOfType<mlir::DictionaryAttr>("glm.final_memory");
  if (!fm)
    throw glm::rt::Error("no glm.final_memory");
  o.budget = uint64_t(fm.getAs<mlir::IntegerAttr>("budget").getInt());
  for (mlir::Attribute r : fm.getAs<mlir::ArrayAttr>("ranks"))
    o.totals.push_back(uint64_t(llvm::cast<mlir::DictionaryAttr>(r)
                                    .getAs<mlir::IntegerAttr>("total")
                                    .getInt()));
  return o;
}

TEST(Budget, IsCheckedOnTheFinalPlan) {
  const std::string out = tinyPack() + "/budget.glmplan";
  Outcome free = compileWithBudget(0, out, "glmc compile tiny -o x.glmplan");
  ASSERT_TRUE(free.ok);
  glm::plan::Plan plan = glm::plan::readPlan(out);
  ASSERT_EQ(plan.ranks.size(), free.totals.size());
  uint64_t largest = 0;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    // The figure checked is the arena the runtime allocates and inspect
    // shows, scratch included.
    EXPECT_EQ(free.totals[r], plan.ranks[r].arenaBytes);
    largest = std::max(largest, free.totals[r]);
  }
  EXPECT_EQ(plan.compileOptions.at("command"),
            "glmc compile tiny -o x.glmplan");

  // A byte under the largest rank's arena is refused, and no plan written.
  fs::remove(out);
  Outcome under = compileWithBudget(double(largest - 4096) / kGiB, out);
  EXPECT_FALSE(under.ok);
  EXPECT_FALSE(fs::exists(out));
  Outcome fits = compileWithBudget(double(largest + 4096) / kGiB, out);
  EXPECT_TRUE(fits.ok);
  EXPECT_EQ(glm::plan::readPlan(out).memoryPerRank, fits.budget);
}

} // namespace
