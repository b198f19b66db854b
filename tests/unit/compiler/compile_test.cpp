//===- compile_test.cpp - importer and plan invariants on synthetic packs -===//
//
// Compiles index-only synthetic packs (tiny and full-size GLM-5.3 exlr8)
// through the whole pipeline and checks the plan: every weight byte range
// of the pack bound (experts' halves on exactly one rank, replicated tensors
// on every rank), expert bytes per token balanced across ranks, bytes per
// token summed over ranks equal to the model's active bytes computed here
// from the pack alone, and identical bytes for identical inputs.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Import.h"
#include "compiler/mlir/Passes.h"
#include "compiler/packtools/packtools.h"
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/formats/pack.h"
#include "runtime/model/config.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

namespace fs = std::filesystem;
using glm::rt::Pack;

namespace {

using Range = std::tuple<std::string, uint64_t, uint64_t>;

/// An index-only exlr8 pack of `preset`, written once per test binary run.
std::string exlr8Pack(const std::string &preset) {
  static std::map<std::string, std::string> made;
  auto it = made.find(preset);
  if (it != made.end())
    return it->second;
  fs::path dir = fs::temp_directory_path() /
                 ("glmc-compile-test-" + preset + "-" +
                  std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  glmc::writeRandomHfModel(preset, 1, dir.string(), /*indexOnly=*/true);
  glm::rt::ModelConfig cfg = glm::rt::loadModelConfig(dir.string());
  glmc::QuantizeOptions q;
  q.indexOnly = true;
  glmc::quantizeToExlr8(cfg, nullptr, dir.string(), q);
  return made[preset] = dir.string();
}

struct Compiled {
  glm::plan::Plan plan;
  std::vector<uint8_t> bytes;
};

Compiled compile(const std::string &dir, int ranks, int width) {
  mlir::DialectRegistry registry;
  glmc::registerGlmDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.disableMultithreading();
  glmc::ImportOptions io;
  io.width = width;
  auto module = glmc::importPack(ctx, dir, io);
  if (!module)
    throw glm::rt::Error("import failed");
  fs::path out = fs::path(dir) / ("test-" + std::to_string(ranks) + ".plan");
  glmc::PipelineOptions opt;
  opt.ranks = ranks;
  opt.memoryPerSpark = 0;
  opt.maxContext = 4096;
  opt.output = out.string();
  mlir::PassManager pm(&ctx);
  glmc::buildPipeline(pm, opt);
  if (mlir::failed(pm.run(*module)))
    throw glm::rt::Error("pipeline failed");
  Compiled c;
  c.plan = glm::plan::readPlan(out.string());
  c.bytes = glm::plan::serializePlan(c.plan);
  return c;
}

/// The model's weight bytes per decoded token, from the pack alone: every
/// non-expert weight of a decoder layer, the final norm and LM head (not the
/// embedding: one row per token), and per MoE layer top_k / E of the routed
/// experts' bytes plus the shared experts' bytes (side ranges counted once,
/// with the shared experts when a shared expert reads them).
uint64_t activeBytes(const Pack &pack) {
  const glm::rt::ModelConfig &cfg = *pack.config();
  uint64_t dense = 0;
  std::map<int, std::set<Range>> routed, shared;
  for (const glm::rt::WeightInfo &w : pack.weights()) {
    bool expert = w.expert >= 0 || w.shared;
    if (!expert) {
      if (w.name != "model.embed_tokens.weight" && w.layer < cfg.numLayers)
        dense += w.bytes();
      continue;
    }
    auto &set = (w.shared ? shared : routed)[w.layer];
    for (const glm::rt::TrellisPart &p : w.parts) {
      set.insert({p.trellisBytes.file, p.trellisBytes.offset,
                  p.trellisBytes.length});
      for (const glm::rt::ByteRange &s : p.sideBytes)
        set.insert({s.file, s.offset, s.length});
    }
    if (w.parts.empty())
      for (const glm::rt::ByteRange &r : w.ranges)
        set.insert({r.file, r.offset, r.length});
  }
  uint64_t total = dense;
  for (auto &[layer, set] : routed) {
    if (layer >= cfg.numLayers)
      continue;
    uint64_t r = 0, s = 0;
    for (const Range &x : shared[layer])
      s += std::get<2>(x);
    for (const Range &x : set)
      if (!shared[layer].count(x))
        r += std::get<2>(x);
    total += static_cast<uint64_t>((unsigned __int128)r *
                                   cfg.numExpertsPerTok /
                                   cfg.numRoutedExperts) +
             s;
  }
  return total;
}

/// Checks every pack range is bound, halves on exactly one rank, dense
/// tensors of decoder layers on every rank; returns nothing, fails the test.
void checkBindings(const Pack &pack, const glm::plan::Plan &plan) {
  std::map<Range, std::set<uint32_t>> ranksOf;
  for (const glm::plan::RankPlan &r : plan.ranks)
    for (const glm::plan::WeightBinding &b : r.weights) {
      bool fresh = ranksOf[{b.file, b.offset, b.length}].insert(r.rank).second;
      EXPECT_TRUE(fresh) << b.file << "@" << b.offset
                         << " bound twice on rank " << r.rank;
    }
  std::set<Range> packRanges;
  const int n = plan.numRanks;
  for (const glm::rt::WeightInfo &w : pack.weights()) {
    for (const glm::rt::ByteRange &x : w.ranges)
      packRanges.insert({x.file, x.offset, x.length});
    for (const glm::rt::TrellisPart &p : w.parts) {
      Range t{p.trellisBytes.file, p.trellisBytes.offset,
              p.trellisBytes.length};
      packRanges.insert(t);
      for (const glm::rt::ByteRange &s : p.sideBytes)
        packRanges.insert({s.file, s.offset, s.length});
      if (p.half >= 0 && (w.expert >= 0 || w.shared)) {
        ASSERT_TRUE(ranksOf.count(t)) << w.name << " half " << p.half;
        EXPECT_EQ(ranksOf[t].size(), 1u) << w.name << " half " << p.half;
      }
    }
    bool expert = w.expert >= 0 || w.shared;
    if (!expert && w.layer < pack.config()->numLayers)
      for (const glm::rt::ByteRange &x : w.ranges) {
        size_t bound = ranksOf[Range(x.file, x.offset, x.length)].size();
        EXPECT_EQ(bound, (size_t)n)
            << w.name << " is replicated and must be bound on every rank";
      }
  }
  // Coverage by bytes: a part's slice may lie inside a bound tensor range.
  std::map<std::string, std::map<uint64_t, uint64_t>> bound; // file → begin→end
  for (auto &[r, ranks] : ranksOf) {
    uint64_t &end = bound[std::get<0>(r)][std::get<1>(r)];
    end = std::max(end, std::get<1>(r) + std::get<2>(r));
  }
  auto covered = [&](const Range &r) {
    auto &iv = bound[std::get<0>(r)];
    auto it = iv.upper_bound(std::get<1>(r));
    if (it == iv.begin())
      return false;
    --it;
    return it->second >= std::get<1>(r) + std::get<2>(r);
  };
  for (const Range &r : packRanges)
    EXPECT_TRUE(covered(r)) << "pack range " << std::get<0>(r) << "@"
                            << std::get<1>(r) << " is not bound";
  for (auto &[r, ranks] : ranksOf)
    EXPECT_TRUE(packRanges.count(r)) << "binding " << std::get<0>(r) << "@"
                                     << std::get<1>(r)
                                     << " is no byte range of the pack";
}

uint64_t expertBytesPerToken(const glm::plan::RankPlan &r) {
  uint64_t sum = 0;
  for (const glm::plan::OpDef &op : r.graphs.at(0).ops)
    if (op.kind == glm::plan::OpKind::ExpertGemv)
      sum += op.bytesRead;
  return sum;
}

} // namespace

TEST(Compile, TinyExlr8BindsEveryRangeForAnyRankCount) {
  std::string dir = exlr8Pack("tiny");
  glm::rt::PackOpenOptions po;
  po.indexOnly = true;
  po.width = 3;
  auto pack = Pack::open(dir, po);
  uint64_t active = activeBytes(*pack);
  for (int n : {1, 2, 3, 4, 5, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    Compiled c = compile(dir, n, 3);
    ASSERT_EQ(c.plan.ranks.size(), (size_t)n);
    checkBindings(*pack, c.plan);
    uint64_t sum = 0;
    for (const glm::plan::RankPlan &r : c.plan.ranks)
      sum += r.bytesPerToken;
    EXPECT_EQ(sum, active);
    EXPECT_EQ(c.plan.model.activeWeightBytes, active);
  }
}

TEST(Compile, TinyPlanIsDeterministic) {
  std::string dir = exlr8Pack("tiny");
  Compiled a = compile(dir, 3, 3), b = compile(dir, 3, 3);
  EXPECT_EQ(a.bytes, b.bytes);
}

TEST(Compile, FullSizeExpertBytesBalancedAtThreeAndFourRanks) {
  std::string dir = exlr8Pack("glm53");
  glm::rt::PackOpenOptions po;
  po.indexOnly = true;
  po.width = 3;
  auto pack = Pack::open(dir, po);
  uint64_t active = activeBytes(*pack);
  for (int n : {3, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    Compiled c = compile(dir, n, 3);
    checkBindings(*pack, c.plan);
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    for (const glm::plan::RankPlan &r : c.plan.ranks) {
      uint64_t e = expertBytesPerToken(r);
      lo = std::min(lo, e);
      hi = std::max(hi, e);
      sum += r.bytesPerToken;
    }
    ASSERT_GT(lo, 0u);
    EXPECT_LE(double(hi) / double(lo), 1.10) << "max " << hi << " min " << lo;
    EXPECT_EQ(sum, active);
    // Experts are the bulk of the model: each rank holds about 1/N of them.
    EXPECT_GT(c.plan.ranks[0].weightBytes, 0u);
  }
}

TEST(Compile, ImportErrorNamesConfigAndSaysWhatToDo) {
  fs::path dir = fs::temp_directory_path() /
                 ("glmc-compile-test-bad-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  mlir::MLIRContext ctx;
  std::string diag;
  ctx.getDiagEngine().registerHandler([&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(diag);
    os << d.getLocation() << ": " << d << "\n";
    for (mlir::Diagnostic &note : d.getNotes())
      os << "note: " << note << "\n";
  });
  auto module = glmc::importPack(ctx, dir.string());
  EXPECT_FALSE(module);
  EXPECT_NE(diag.find("config.json"), std::string::npos) << diag;
  EXPECT_NE(diag.find("glmc verify"), std::string::npos) << diag;
  fs::remove_all(dir);
}
