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
#include "runtime/model/hf_names.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
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

Compiled compile(const std::string &dir, int ranks, int width,
                 bool programmaticLaunch = true) {
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
  opt.programmaticLaunch = programmaticLaunch;
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
      // Bindings into other buffers than the weight buffer (0) are copies
      // the executor's tables take of ranges already bound (side vectors
      // widened into the expert tables).
      if (b.buffer != 0)
        continue;
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
    // Decoder layers and the MTP layers (bound like a decoder layer's).
    const glm::rt::ModelConfig &cfg = *pack.config();
    if (!expert && w.layer < cfg.numLayers + cfg.numNextnPredictLayers)
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

namespace {

/// The tiny exlr8 index-only pack without its MTP layer: config.json with
/// `num_nextn_predict_layers` = 0 for the writer, then `keepInConfig` (the
/// pack leaves out a layer its config names) or 0 written back.
std::string exlr8PackWithoutMtp(int keepInConfig) {
  fs::path dir = fs::temp_directory_path() /
                 ("glmc-compile-test-nomtp" + std::to_string(keepInConfig) +
                  "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  glmc::writeRandomHfModel("tiny", 1, dir.string(), /*indexOnly=*/true);
  auto setNextn = [&](int n) {
    fs::path p = dir / "config.json";
    std::ifstream in(p);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string key = "\"num_nextn_predict_layers\": ";
    size_t at = text.find(key);
    EXPECT_NE(at, std::string::npos);
    text.replace(at + key.size(), 1, std::to_string(n));
    std::ofstream(p) << text;
  };
  setNextn(0);
  glm::rt::ModelConfig cfg = glm::rt::loadModelConfig(dir.string());
  glmc::QuantizeOptions q;
  q.indexOnly = true;
  glmc::quantizeToExlr8(cfg, nullptr, dir.string(), q);
  setNextn(keepInConfig);
  return dir.string();
}

} // namespace

/// The MTP layer (layer num_hidden_layers) is a weight set of the plan: its
/// tensors bound with the pack's byte ranges (dense ones on every rank,
/// expert halves by the rule), its latent cache and index keys planned as
/// KV buffers, and nothing of it read per decoded token.
TEST(Compile, TinyMtpLayerIsBoundAndPlannedButNotReadPerToken) {
  const std::string dir = exlr8Pack("tiny");
  glm::rt::PackOpenOptions po;
  po.indexOnly = true;
  po.width = 3;
  auto pack = Pack::open(dir, po);
  const glm::rt::ModelConfig &cfg = *pack->config();
  ASSERT_EQ(cfg.numNextnPredictLayers, 1);
  const int mtp = (int)cfg.numLayers;
  // Every byte range of the MTP layer's tensors, from the pack.
  std::set<Range> mtpRanges;
  std::set<std::string> mtpDense;
  for (const glm::rt::WeightInfo &w : pack->weights()) {
    if (w.layer != mtp)
      continue;
    for (const glm::rt::ByteRange &x : w.ranges)
      mtpRanges.insert({x.file, x.offset, x.length});
    for (const glm::rt::TrellisPart &p : w.parts) {
      mtpRanges.insert(
          {p.trellisBytes.file, p.trellisBytes.offset, p.trellisBytes.length});
      for (const glm::rt::ByteRange &x : p.sideBytes)
        mtpRanges.insert({x.file, x.offset, x.length});
    }
    if (w.expert < 0 && !w.shared)
      mtpDense.insert(w.name);
  }
  for (const glm::rt::HfTensorSpec &s : glm::rt::expectedMtpTensors(cfg))
    if (s.expert < 0 && !s.shared)
      EXPECT_TRUE(mtpDense.count(s.name)) << s.name << " is not in the pack";
  ASSERT_FALSE(mtpRanges.empty());

  const std::string bare = exlr8PackWithoutMtp(0);
  const uint64_t active = activeBytes(*pack);
  for (int n : {1, 2}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    Compiled c = compile(dir, n, 3), without = compile(bare, n, 3);
    checkBindings(*pack, c.plan);
    std::set<Range> bound;
    for (const glm::plan::RankPlan &r : c.plan.ranks) {
      const glm::plan::RankPlan &w = without.plan.ranks.at(r.rank);
      std::set<std::string> dense;
      uint64_t mtpKv = 0, mtpWeights = 0;
      for (const glm::plan::WeightBinding &b : r.weights) {
        if (b.layer != mtp)
          continue;
        Range x{b.file, b.offset, b.length};
        EXPECT_TRUE(mtpRanges.count(x))
            << b.tensor << " " << b.file << "@" << b.offset
            << " is no byte range of an MTP tensor";
        bound.insert(x);
        mtpWeights += b.length;
        if (b.expert == -1 && b.tag != glm::plan::WeightTag::SideVector)
          dense.insert(b.tensor);
      }
      // Attention, indexer, router, norms, eh_proj on every rank.
      EXPECT_EQ(dense, mtpDense);
      std::set<std::string> caches;
      for (const glm::plan::BufferDef &b : r.buffers)
        if (b.kind == glm::plan::BufferKind::KvCache && b.layer == mtp) {
          caches.insert(b.name);
          mtpKv += b.bytes;
        }
      const std::string L = std::to_string(mtp);
      EXPECT_EQ(caches, (std::set<std::string>{"kv." + L, "index_keys." + L}));
      // fp32 rows: max_context x (kv_lora + rope), max_context x index dim.
      EXPECT_EQ(mtpKv,
                4096u * 4 * uint64_t(cfg.kvLoraRank + cfg.qkRopeHeadDim) +
                    4096u * 4 * uint64_t(cfg.indexHeadDim));
      // The memory plan holds them; the decode step reads none of them.
      EXPECT_EQ(r.kvBytes, w.kvBytes + mtpKv);
      EXPECT_GE(r.weightBytes, w.weightBytes + mtpWeights);
      EXPECT_GE(r.arenaBytes, w.arenaBytes + mtpWeights + mtpKv);
      EXPECT_EQ(r.bytesPerToken, w.bytesPerToken);
      EXPECT_EQ(r.layers.size(), w.layers.size());
      for (const glm::plan::GraphDef &g : r.graphs)
        for (const glm::plan::OpDef &op : g.ops)
          for (const glm::plan::ArgDef &a : op.args)
            if (a.kind == glm::plan::ArgKind::Buffer && a.buffer >= 0)
              EXPECT_NE(r.buffers.at(a.buffer).layer == mtp &&
                            r.buffers.at(a.buffer).kind ==
                                glm::plan::BufferKind::KvCache,
                        true)
                  << op.name << " reads an MTP cache";
    }
    // Every range of the layer bound somewhere (a trellis part's slice
    // inside its bound tensor range).
    for (const Range &x : mtpRanges)
      EXPECT_TRUE(std::any_of(bound.begin(), bound.end(),
                              [&](const Range &b) {
                                return std::get<0>(b) == std::get<0>(x) &&
                                       std::get<1>(b) <= std::get<1>(x) &&
                                       std::get<1>(x) + std::get<2>(x) <=
                                           std::get<1>(b) + std::get<2>(b);
                              }))
          << std::get<0>(x) << "@" << std::get<1>(x) << " is not bound";
    EXPECT_EQ(c.plan.model.activeWeightBytes, active);
    EXPECT_EQ(c.plan.model.activeWeightBytes,
              without.plan.model.activeWeightBytes);
  }
}

/// A config that names an MTP layer the pack leaves out: a plan without
/// one (glmc verify's rule), not an error.
TEST(Compile, PackWithoutItsMtpLayerPlansNone) {
  const std::string dir = exlr8PackWithoutMtp(1), bare = exlr8PackWithoutMtp(0);
  Compiled c = compile(dir, 2, 3), without = compile(bare, 2, 3);
  for (const glm::plan::RankPlan &r : c.plan.ranks) {
    for (const glm::plan::WeightBinding &b : r.weights)
      EXPECT_LT(b.layer, 2) << b.tensor;
    const glm::plan::RankPlan &w = without.plan.ranks.at(r.rank);
    EXPECT_EQ(r.weightBytes, w.weightBytes);
    EXPECT_EQ(r.kvBytes, w.kvBytes);
    EXPECT_EQ(r.bytesPerToken, w.bytesPerToken);
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
    // 78 layers, 10 graph buckets: kernels per distinct shape and batch,
    // not per layer (14 families x at most 8 batches).
    EXPECT_LT(c.plan.kernels.size(), 64u);
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

//===----------------------------------------------------------------------===//
// Graph buckets, kernel arguments, head layer, plan fields 1.1
//===----------------------------------------------------------------------===//

#include "codegen/dense_trellis_abi.h"
#include "codegen/moe_trellis_abi.h"
#include "compiler/mlir/KernelArgs.h"

namespace {

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const glm::rt::Error &e) {
    return e.what();
  }
  return "";
}

const glm::plan::GraphDef *graphOf(const glm::plan::RankPlan &r,
                                   glm::plan::GraphKind kind, uint32_t size) {
  for (const glm::plan::GraphDef &g : r.graphs)
    if (g.kind == kind && g.size == size)
      return &g;
  return nullptr;
}

uint64_t expertBytes(const glm::plan::GraphDef &g) {
  uint64_t sum = 0;
  for (const glm::plan::OpDef &op : g.ops)
    if (op.kind == glm::plan::OpKind::ExpertGemv)
      sum += op.bytesRead;
  return sum;
}

} // namespace

TEST(Compile, DecodeAndPrefillGraphsPerBucket) {
  using namespace glm::plan;
  Compiled c = compile(exlr8Pack("tiny"), 2, 3);
  for (const RankPlan &r : c.plan.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    // Decode 1..8 then prefill 512, 2048, sorted by (kind, size).
    ASSERT_EQ(r.graphs.size(), 10u);
    for (uint32_t b = 1; b <= 8; ++b) {
      EXPECT_EQ(r.graphs[b - 1].kind, GraphKind::Decode);
      EXPECT_EQ(r.graphs[b - 1].size, b);
    }
    EXPECT_EQ(r.graphs[8].kind, GraphKind::Prefill);
    EXPECT_EQ(r.graphs[8].size, 512u);
    EXPECT_EQ(r.graphs[9].size, 2048u);
    // Every graph runs the same ops (an op's launches, "NAME.i", may differ:
    // a prefill GEMM rotates its own output, dense_trellis does that
    // inside; a bucket whose sums over rank-owned units are fixed point
    // converts them after the all-reduce, "NAME.fixed_to_f32", where a
    // prefill GEMM sums in fp32); decode B launches batch-B kernels.
    const GraphDef &d1 = r.graphs[0];
    auto opNames = [](const GraphDef &g) {
      std::vector<std::string> names;
      for (const OpDef &op : g.ops) {
        std::string n = op.name;
        if (n.size() > 13 && n.compare(n.size() - 13, 13, ".fixed_to_f32") == 0)
          continue;
        size_t dot = n.find_last_of('.');
        if (dot != std::string::npos &&
            n.find_first_not_of("0123456789", dot + 1) == std::string::npos)
          n.resize(dot);
        if (names.empty() || names.back() != n)
          names.push_back(n);
      }
      return names;
    };
    for (const GraphDef &g : r.graphs) {
      ASSERT_EQ(opNames(g), opNames(d1)) << g.size;
      for (const OpDef &op : g.ops) {
        if (op.kernel < 0)
          continue;
        const KernelDef &k = c.plan.kernels[op.kernel];
        auto b = k.templateArgs.find("batch");
        if (b == k.templateArgs.end())
          continue;
        uint32_t want = g.kind == GraphKind::Decode ? g.size : 8;
        // The batched decode families are instantiated for 1 and 8 rows
        // (decodeKernelBatch, the executor's rule).
        if (k.templateName == "moe_trellis" ||
            k.templateName == "dense_trellis" ||
            k.templateName == "dense_gemv")
          want = uint32_t(glm::codegen::decodeKernelBatch(int(want)));
        EXPECT_EQ(b->second, std::to_string(want)) << op.name;
        // Prefill through an 8-token kernel: ceil(chunk / 8) launches,
        // one op repeated or (launches sharing scratch, moe_trellis gate/up
        // and down) one op per 8-row block, interleaved.
        if (g.kind == GraphKind::Prefill) {
          EXPECT_EQ(op.rowsPerLaunch, 8u) << op.name;
          uint32_t blocks = 0; // ops of one launch per block
          for (const OpDef &o : g.ops)
            blocks += o.name == op.name && o.kernel == op.kernel &&
                      o.repeat == 1;
          EXPECT_TRUE(op.repeat == g.size / 8 ||
                      (op.repeat == 1 && blocks == g.size / 8))
              << op.name << ": repeat " << op.repeat << ", " << blocks
              << " single launches";
        } else {
          EXPECT_EQ(op.repeat, 1u) << op.name;
        }
      }
    }
    // Expected expert bytes grow with the batch (more distinct experts)
    // but less than linearly.
    uint64_t e1 = expertBytes(d1), prev = e1;
    ASSERT_GT(e1, 0u);
    for (uint32_t b = 2; b <= 8; ++b) {
      uint64_t eb = expertBytes(*graphOf(r, GraphKind::Decode, b));
      EXPECT_GE(eb, prev) << "batch " << b;
      EXPECT_LE(eb, e1 * b) << "batch " << b;
      prev = eb;
    }
    uint64_t e8 = expertBytes(*graphOf(r, GraphKind::Decode, 8));
    // A prefill chunk groups its rows by expert (moe_group + the grouped
    // tensor-core GEMMs): each expert's halves are read once per chunk, so
    // 512 and 2048 tokens (every expert routed) read the same bytes, at
    // least the batch-8 step's and far below 64 batch-8 steps'.
    const uint64_t p512 = expertBytes(*graphOf(r, GraphKind::Prefill, 512));
    EXPECT_EQ(p512, expertBytes(*graphOf(r, GraphKind::Prefill, 2048)));
    EXPECT_GE(p512, e8);
    EXPECT_LT(p512, e8 * 8);
    // Trellis ops say how many weights they decode; bf16/fp8 ops do not.
    for (const OpDef &op : d1.ops)
      if (op.kind == OpKind::ExpertGemv && op.bytesRead)
        EXPECT_GT(op.decodedWeights, 0u) << op.name;
  }
}

TEST(Compile, HeadOpsAreTheHeadLayer) {
  using namespace glm::plan;
  Compiled c = compile(exlr8Pack("tiny"), 3, 3);
  const int32_t head = int32_t(c.plan.model.numLayers);
  for (const RankPlan &r : c.plan.ranks) {
    for (const OpDef &op : r.graphs.at(0).ops) {
      if (op.layer < 0)
        EXPECT_EQ(op.kind, OpKind::Embed) << op.name << " is not the embed";
      if (op.kind == OpKind::LmHead || op.kind == OpKind::Argmax ||
          op.kind == OpKind::AllGather)
        EXPECT_EQ(op.layer, head) << op.name;
    }
    ASSERT_FALSE(r.layers.empty());
    EXPECT_EQ(r.layers.back().layer, head);
    EXPECT_EQ(r.layers.back().kind, LayerKind::Head);
    EXPECT_GT(r.layers.back().bytesPerToken, 0u); // the LM head slice
    EXPECT_EQ(r.layers.front().layer, -1);
    EXPECT_EQ(r.layers.front().ops.size(), 1u); // the embedding alone
  }
}

TEST(Compile, TrellisExpertsLaunchLikeTheCudaExecutor) {
  // The executor's moe_trellis path (runtime/cuda/executor.cpp): one input
  // rotation, gate/up, down; grids and split from codegen's shared rule.
  using namespace glm::plan;
  Compiled c = compile(exlr8Pack("tiny"), 1, 3);
  const auto tuning =
      glm::codegen::defaultMoeTrellisTuning(c.plan.model.hiddenSize);
  size_t seen = 0;
  for (const GraphDef &g : c.plan.ranks[0].graphs) {
    if (g.kind != GraphKind::Decode)
      continue;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const OpDef &op = g.ops[i];
      if (op.kernel < 0 ||
          c.plan.kernels[op.kernel].templateName != "moe_trellis")
        continue;
      const KernelDef &k = c.plan.kernels[op.kernel];
      auto arg = [&](const std::string &n) -> int64_t {
        for (const ArgDef &a : op.args)
          if (a.name == n && a.kind == ArgKind::I32)
            return a.i;
        ADD_FAILURE() << op.name << ": no int argument " << n;
        return -1;
      };
      const bool gu = k.templateArgs.at("stage") == "gu";
      // gate/up follows the rotation; down follows gate/up.
      ASSERT_GT(i, 0u);
      const KernelDef &prev = c.plan.kernels[g.ops[i - 1].kernel];
      EXPECT_EQ(prev.templateName, gu ? "hadamard128" : "moe_trellis");
      const glm::codegen::MoeTrellisDims d = glm::codegen::moeTrellisDims(
          tuning, int(g.size), int(arg("topk")), int(arg("n_routed")),
          int(arg("n_shared")), int(arg("hidden")));
      EXPECT_TRUE(d.valid()) << op.name;
      EXPECT_EQ(op.launch.gridX, gu ? d.gridGateUp() : d.gridDown())
          << op.name << " batch " << g.size;
      EXPECT_EQ(op.launch.blockX, uint32_t(tuning.threads));
      EXPECT_EQ(arg("gu_split"), tuning.guSplit);
      EXPECT_EQ(arg("down_group"), tuning.downGroup);
      EXPECT_EQ(k.templateArgs.at("pipe"), std::to_string(tuning.pipe));
      ++seen;
    }
  }
  EXPECT_GT(seen, 0u);
}

TEST(Compile, KernelArgumentsFollowTheFamilyParameterLists) {
  using namespace glm::plan;
  Compiled c = compile(exlr8Pack("tiny"), 2, 3);
  EXPECT_NO_THROW(glmc::checkKernelArgs(c.plan, "tiny.plan"));
  size_t launches = 0;
  for (const RankPlan &r : c.plan.ranks)
    for (const GraphDef &g : r.graphs)
      for (const OpDef &op : g.ops) {
        if (op.kernel < 0)
          continue;
        ++launches;
        const KernelDef &k = c.plan.kernels[op.kernel];
        auto params = glmc::kernelParams(k.templateName);
        ASSERT_EQ(op.args.size(), params.size()) << op.name;
        EXPECT_GT(op.launch.gridX, 0u) << op.name;
        EXPECT_GT(op.launch.blockX, 0u) << op.name;
        for (const ArgDef &a : op.args)
          if (a.kind == ArgKind::Buffer) {
            ASSERT_LT(size_t(a.buffer), r.buffers.size()) << op.name;
            EXPECT_LE(a.offset + (op.repeat - 1) * op.rowsPerLaunch *
                                     a.rowBytes,
                      r.buffers[a.buffer].bytes)
                << op.name << " " << a.name;
          }
      }
  EXPECT_GT(launches, 0u);

  // A drift between the compiler's rules and a template is caught.
  auto firstLaunch = [](Plan &p) -> OpDef & {
    for (OpDef &op : p.ranks[0].graphs[0].ops)
      if (op.kernel >= 0 && op.args.size() > 2)
        return op;
    throw glm::rt::Error("no launch");
  };
  Plan dropped = c.plan;
  firstLaunch(dropped).args.pop_back();
  std::string m = errorOf([&] { glmc::checkKernelArgs(dropped, "p"); });
  EXPECT_NE(m.find("arguments but family"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 decode 1 op '"), std::string::npos) << m;

  Plan kind = c.plan;
  for (ArgDef &a : firstLaunch(kind).args)
    if (a.kind == ArgKind::Buffer) {
      a.kind = ArgKind::F32;
      break;
    }
  m = errorOf([&] { glmc::checkKernelArgs(kind, "p"); });
  EXPECT_NE(m.find("is f32 but parameter"), std::string::npos) << m;
  EXPECT_NE(m.find("is a pointer"), std::string::npos) << m;

  // Two pointer arguments swapped: the kinds agree, the labels do not.
  Plan swapped = c.plan;
  OpDef &op = firstLaunch(swapped);
  std::vector<size_t> ptrs;
  for (size_t i = 0; i < op.args.size(); ++i)
    if (op.args[i].kind == ArgKind::Buffer)
      ptrs.push_back(i);
  ASSERT_GE(ptrs.size(), 2u);
  std::swap(op.args[ptrs[0]], op.args[ptrs[1]]);
  m = errorOf([&] { glmc::checkKernelArgs(swapped, "p"); });
  EXPECT_NE(m.find("is labelled"), std::string::npos) << m;

  EXPECT_NE(errorOf([] { glmc::kernelParams("no_such_family"); })
                .find("unknown kernel family"),
            std::string::npos);
}

TEST(Compile, EveryKernelLaunchIsProgrammaticAndItsKernelWaitsFirst) {
  using namespace glm::plan;
  Compiled on = compile(exlr8Pack("tiny"), 2, 3);
  EXPECT_EQ(on.plan.compileOptions.at("programmatic_launch"), "on");
  size_t launches = 0;
  for (const RankPlan &r : on.plan.ranks)
    for (const GraphDef &g : r.graphs)
      for (const OpDef &op : g.ops) {
        // Collectives are not kernels of the plan: plain stream order.
        EXPECT_EQ(op.programmaticLaunch, op.kernel >= 0) << op.name;
        launches += op.kernel >= 0;
      }
  EXPECT_GT(launches, 20u);
  // The kernel's first statement lets the next launch go and waits for the
  // previous kernel (grid_dependency.cuh), before the family's body.
  for (const KernelDef &k : on.plan.kernels) {
    const size_t entry = k.source.find("glm::programmaticEntry();");
    ASSERT_NE(entry, std::string::npos) << k.name;
    EXPECT_LT(entry, k.source.rfind("glm::")) << k.name; // the family's call
  }
  EXPECT_TRUE(parsePlan(on.bytes.data(), on.bytes.size(), "on.plan") ==
              on.plan);

  // A programmatic launch of a kernel that does not wait is refused at load:
  // it could read its inputs before they are written.
  Plan racy = on.plan;
  OpDef *firstOp = nullptr;
  for (OpDef &op : racy.ranks[0].graphs[0].ops)
    if (!firstOp && op.kernel >= 0)
      firstOp = &op;
  ASSERT_NE(firstOp, nullptr);
  OpDef &first = *firstOp;
  std::string &src = racy.kernels[first.kernel].source;
  src.erase(src.find("glm::programmaticEntry();"), 25);
  std::vector<uint8_t> rb = serializePlan(racy);
  const std::string m =
      errorOf([&] { parsePlan(rb.data(), rb.size(), "racy.plan"); });
  EXPECT_NE(m.find("op '" + first.name + "' is a programmatic launch of "
                   "kernel " + racy.kernels[first.kernel].name),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("does not wait for the previous kernel"),
            std::string::npos)
      << m;

  Compiled off = compile(exlr8Pack("tiny"), 2, 3, false);
  EXPECT_EQ(off.plan.compileOptions.at("programmatic_launch"), "off");
  for (const RankPlan &r : off.plan.ranks)
    for (const GraphDef &g : r.graphs)
      for (const OpDef &op : g.ops)
        EXPECT_FALSE(op.programmaticLaunch) << op.name;
}

TEST(Compile, PlanFieldsOfSchema11RoundTrip) {
  using namespace glm::plan;
  Compiled c = compile(exlr8Pack("tiny"), 2, 3);
  EXPECT_EQ(c.plan.schemaMinor, kPlanSchemaMinor);
  EXPECT_GE(kPlanSchemaMinor, 1u);
  // The compiled plan's new fields survive the bytes. (Its prefill
  // launches each take the whole chunk: the dense GEMMs, bf16 too, run on
  // gemm_dense, so no op repeats; the hand-set values below cover repeat.)
  bool sawRows = false, sawDecoded = false;
  for (const RankPlan &r : c.plan.ranks)
    for (const GraphDef &g : r.graphs)
      for (const OpDef &op : g.ops) {
        sawDecoded |= op.decodedWeights > 0;
        for (const ArgDef &a : op.args)
          sawRows |= a.rowBytes > 0;
      }
  EXPECT_TRUE(sawRows && sawDecoded);
  Plan back = parsePlan(c.bytes.data(), c.bytes.size(), "tiny.plan");
  EXPECT_TRUE(back == c.plan);
  // Hand-set values too (not only what the compiler happens to write).
  Plan p = c.plan;
  OpDef &op = p.ranks[1].graphs.back().ops.back();
  op.decodedWeights = 123456789012ull;
  op.repeat = 7;
  op.rowsPerLaunch = 0;
  ArgDef a;
  a.kind = ArgKind::Runtime;
  a.name = "positions";
  a.rowBytes = 0;
  op.args.push_back(a);
  p.ranks[1].graphs[0].ops[0].args.clear();
  std::vector<uint8_t> bytes = serializePlan(p);
  Plan q = parsePlan(bytes.data(), bytes.size(), "p.plan");
  EXPECT_TRUE(q == p);
  EXPECT_EQ(q.ranks[1].graphs.back().ops.back().decodedWeights,
            123456789012ull);
  EXPECT_EQ(q.ranks[1].graphs.back().ops.back().repeat, 7u);
  // Another major is refused; a newer minor is read.
  Plan major = c.plan;
  major.schemaMajor = kPlanSchemaMajor + 1;
  std::vector<uint8_t> mb = serializePlan(major);
  std::string m = errorOf([&] { parsePlan(mb.data(), mb.size(), "m.plan"); });
  EXPECT_NE(m.find("m.plan: plan schema version " +
                   std::to_string(kPlanSchemaMajor + 1) + "."),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("re-plan with: glmc compile"), std::string::npos) << m;
  Plan minor = c.plan;
  minor.schemaMinor = kPlanSchemaMinor + 5;
  std::vector<uint8_t> nb = serializePlan(minor);
  EXPECT_NO_THROW(parsePlan(nb.data(), nb.size(), "n.plan"));
  // A repeated launch past its buffer is refused at load: a chunk op
  // launched twice over rows of the arena's size.
  Plan over = c.plan;
  bool repeated = false;
  for (OpDef &o : over.ranks[0].graphs.back().ops) {
    for (ArgDef &x : o.args)
      if (x.kind == ArgKind::Buffer && x.rowBytes) {
        x.rowBytes = over.ranks[0].arenaBytes;
        repeated = true;
      }
    if (repeated) {
      o.repeat = 2;
      o.rowsPerLaunch = 1;
      break;
    }
  }
  ASSERT_TRUE(repeated);
  std::vector<uint8_t> ob = serializePlan(over);
  m = errorOf([&] { parsePlan(ob.data(), ob.size(), "o.plan"); });
  EXPECT_NE(m.find("points at buffer"), std::string::npos) << m;
}
