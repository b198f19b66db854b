//===- plan_exec_test.cpp - the plan run on the CPU against the oracle ----===//
//
// "The plan is the program": compiles packs through the whole pipeline and
// runs the plan's decode graphs through the CPU twins of its kernels
// (runtime/exec), then holds the result to
//  - the transformers goldens (tests/oracle/goldens, float64 logits): every
//    position within 1e-4 relative (max |Δ| ÷ max |logit|) and the same
//    greedy tokens;
//  - the hand-written reference forward (runtime/cpu/forward.cpp) on the
//    same pack, position by position;
//  - its own plan: the trace of one decode step equals the plan's batch-1
//    graph op for op;
//  - itself on other rank counts: the logits of 1..4 ranks are the same
//    bits.
//
//===----------------------------------------------------------------------===//
#include "plan_test_util.h"
#include "codegen/tuning.h"
#include "plans/plan.h"
#include "plans/plan_inspect.h"
#include "runtime/base/error.h"
#include "runtime/base/numeric.h"
#include "runtime/cpu/generator.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/exec/cpu_backend.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/exec/plan_generator.h"
#include "runtime/formats/pack.h"

#include <cstring>
#include "runtime/formats/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace glm::rt;
using plan_test::compilePlan;
using plan_test::cpuExecutor;
using plan_test::tinyPack;

namespace {

const char *kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

std::vector<int64_t> readI64(const SafetensorsFile &f, const std::string &n) {
  const TensorView &t = f.get(n);
  std::vector<int64_t> v(t.numel());
  std::memcpy(v.data(), t.data, t.byteSize);
  return v;
}

/// Worst per-position relative error of `got` against `want` ([rows, V]).
double worstRelative(const std::vector<double> &want,
                     const std::vector<float> &got, int64_t V) {
  double worst = 0;
  for (size_t p = 0; p * V < want.size(); ++p) {
    double maxAbs = 0, maxDiff = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double w = want[p * V + v], g = got[p * V + v];
      maxAbs = std::max(maxAbs, std::fabs(w));
      maxDiff = std::max(maxDiff, std::fabs(w - g));
    }
    worst = std::max(worst, maxDiff / std::max(maxAbs, 1e-30));
  }
  return worst;
}

void checkGolden(const std::string &name, int ranks, double tol = 1e-4) {
  const fs::path dir = fs::path(kGoldens) / name;
  auto golden = SafetensorsFile::open((dir / "golden.safetensors").string());
  const std::vector<int64_t> prompt = readI64(*golden, "prompt");
  const std::vector<int64_t> generated = readI64(*golden, "generated");
  const TensorView &lt = golden->get("logits");
  std::vector<double> want(lt.numel());
  if (lt.dtype == DType::F64) {
    std::memcpy(want.data(), lt.data, lt.byteSize);
  } else {
    std::vector<float> f = lt.toFloat();
    want.assign(f.begin(), f.end());
  }
  auto pack = Pack::open(dir.string());
  const ModelConfig &cfg = *pack->config();

  auto plan = compilePlan(dir.string(), ranks);
  auto gen = exec::makePlanGenerator(cpuExecutor(plan, dir.string()), cfg,
                                     256, "cpu");
  SamplingParams sp; // greedy
  sp.maxNew = int64_t(generated.size());
  sp.stopIds = cfg.eosTokenIds;
  std::vector<float> rows;
  GenerationResult r = gen->generate(prompt, sp, {}, &rows);
  EXPECT_EQ(r.tokens, generated) << name << " at " << ranks << " ranks";
  ASSERT_EQ(rows.size(), want.size());
  const double worst = worstRelative(want, rows, cfg.vocabSize);
  std::printf("[ plan-exec ] %s, %d rank(s): %zu positions, worst relative "
              "error vs transformers %.2e\n",
              name.c_str(), ranks, want.size() / cfg.vocabSize, worst);
  EXPECT_LE(worst, tol) << name;
}

TEST(PlanExecCpu, GlmDsaAMatchesTransformers) { checkGolden("glm_dsa_a", 1); }
TEST(PlanExecCpu, GlmDsaBMatchesTransformers) { checkGolden("glm_dsa_b", 1); }
// Tensor parallelism through the plan: heads, dense chunks, expert halves
// and vocabulary slices on 2 and 4 ranks (the same bits as one rank: see
// the byte-identity tests below).
TEST(PlanExecCpu, GlmDsaAOnTwoRanks) { checkGolden("glm_dsa_a", 2); }
TEST(PlanExecCpu, GlmDsaBOnFourRanks) { checkGolden("glm_dsa_b", 4); }

// GLM-5.3-Flash (KDA, mHC streams, the k-pool indexer, clamped SwiGLU)
// through its decode graphs, prompts token by token (a Flash plan has no
// prefill graphs): within 1e-5 of transformers at 1 and 3 ranks.
TEST(PlanExecCpu, GlmFlashAMatchesTransformers) {
  checkGolden("glm_flash_a", 1, 1e-5);
  checkGolden("glm_flash_a", 3, 1e-5);
}
TEST(PlanExecCpu, GlmFlashBMatchesTransformers) {
  checkGolden("glm_flash_b", 1, 1e-5);
  checkGolden("glm_flash_b", 3, 1e-5); // 2 KDA heads: rank 0 has none
}

/// A Flash plan without prefill graphs (none asked for: its prompts go token
/// by token), its per-sequence state in KvCache buffers (the KDA state and
/// conv inputs of the rank's heads, the k-pool ring and pooled keys).
TEST(PlanExecCpu, FlashPlanHasStateBuffersAndNoPrefillGraphs) {
  const fs::path dir = fs::path(kGoldens) / "glm_flash_a";
  auto plan = compilePlan(dir.string(), 3, "", {1}, "", {0});
  for (const glm::plan::RankPlan &rp : plan->ranks) {
    for (const glm::plan::GraphDef &g : rp.graphs)
      EXPECT_NE(g.kind, glm::plan::GraphKind::Prefill);
    std::map<std::string, uint64_t> kv;
    for (const glm::plan::BufferDef &b : rp.buffers)
      if (b.kind == glm::plan::BufferKind::KvCache)
        kv[b.name] = b.bytes;
    // 4 heads of 16 over 3 ranks: 1, 1, 2 heads of 16·16 fp32 (256-aligned).
    const uint64_t heads = rp.rank == 2 ? 2 : 1;
    EXPECT_EQ(kv["kda_state.0"], heads * 16 * 16 * 4) << rp.rank;
    EXPECT_EQ(kv["kda_conv.0"], (heads * 3 * 16 * 3 * 4 + 255) / 256 * 256);
    // Layer 3 (MLA): pooled keys of 256 / 4 pools and a ring of 2·4 rows.
    EXPECT_EQ(kv["index_keys.3"], 256u / 4 * 16 * 4);
    EXPECT_EQ(kv["kpool_ring.3"], 2u * 4 * 16 * 4);
  }
}

/// One decode step's trace is the plan's batch-1 decode graph, op for op.
TEST(PlanExecCpu, TraceEqualsPlanGraph) {
  const fs::path dir = fs::path(kGoldens) / "glm_dsa_a";
  auto plan = compilePlan(dir.string(), 1);
  auto e = cpuExecutor(plan, dir.string());
  std::vector<exec::TraceEvent> trace;
  e->setTrace([&](const exec::TraceEvent &t) { trace.push_back(t); });
  e->step({3}, {0}, {0});
  const glm::plan::GraphDef *g = nullptr;
  for (const glm::plan::GraphDef &x : plan->ranks[0].graphs)
    if (x.kind == glm::plan::GraphKind::Decode && x.size == 1)
      g = &x;
  ASSERT_NE(g, nullptr);
  std::vector<std::string> want, got;
  for (const glm::plan::OpDef &op : g->ops)
    for (uint32_t j = 0; j < op.repeat; ++j)
      want.push_back(op.name + " " +
                     (op.kernel >= 0 ? plan->kernels[op.kernel].name
                                     : glm::plan::collectiveKindName(
                                           plan->ranks[0]
                                               .collectives[op.collective]
                                               .kind)));
  for (const exec::TraceEvent &t : trace) {
    EXPECT_EQ(t.graph, "decode.1");
    got.push_back(t.op + " " + t.kernel);
  }
  EXPECT_EQ(got, want);
  EXPECT_GT(want.size(), 20u);
}

/// The plan run on the CPU against the reference forward on the same pack:
/// greedy tokens identical, every position within `tol` relative.
void checkDirAgainstReference(const std::string &dir, const std::string &layout,
                              int ranks, double tol,
                              const std::string &denseTuning = "") {
  const std::string manifest = layout == "exlr8" ? "mixed" : "";
  PackOpenOptions po;
  po.manifest = manifest;
  auto pack = Pack::open(dir, po);
  const ModelConfig &cfg = *pack->config();
  auto weights = cpu::ModelWeights::load(cfg, *cpu::packWeightSource(*pack));
  auto ref = makeCpuGenerator(weights, cpu::TpLayout::fromRule(cfg, 1), 256);
  auto plan = compilePlan(dir, ranks, manifest, {1}, denseTuning);
  if (!denseTuning.empty()) {
    // The tuning is what the plan records and what its dense_trellis
    // kernels were built with.
    EXPECT_EQ(plan->compileOptions.at("dense_trellis_tuning"), denseTuning);
    const auto t = glm::codegen::parseDenseTrellisTuning(denseTuning);
    size_t tuned = 0;
    for (const glm::plan::KernelDef &k : plan->kernels)
      if (k.templateName == "dense_trellis") {
        EXPECT_EQ(k.templateArgs.at("threads"), std::to_string(t.threads));
        ++tuned;
      }
    EXPECT_GT(tuned, 0u) << "the plan runs no dense_trellis";
  }
  auto gen =
      exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 256, "cpu");
  const std::vector<int64_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
  SamplingParams sp; // greedy
  sp.maxNew = 6;
  std::vector<float> want, got;
  GenerationResult a = ref->generate(prompt, sp, {}, &want);
  GenerationResult b = gen->generate(prompt, sp, {}, &got);
  EXPECT_EQ(b.tokens, a.tokens) << layout << " at " << ranks << " ranks";
  ASSERT_EQ(got.size(), want.size());
  const std::vector<double> wantD(want.begin(), want.end());
  const double worst = worstRelative(wantD, got, cfg.vocabSize);
  std::printf("[ plan-exec ] %s, %d rank(s): worst relative error vs "
              "the reference forward %.2e\n",
              fs::path(dir).filename().c_str(), ranks, worst);
  EXPECT_LE(worst, tol) << layout;
}

void checkAgainstReference(const std::string &layout, int ranks, double tol,
                           const std::string &denseTuning = "") {
  checkDirAgainstReference(tinyPack(layout), layout, ranks, tol, denseTuning);
}

/// GLM-5.3-Flash stored in bf16 (a copy of glm_flash_a): the 16-bit paths
/// (dense_gemv for the mHC fn, the vectors and KDA taps widened at load)
/// against the reference forward on the same pack.
TEST(PlanExecCpu, FlashBf16MatchesReference) {
  const fs::path src = fs::path(kGoldens) / "glm_flash_a";
  const fs::path dir =
      fs::temp_directory_path() /
      ("glm-plan-exec-flash-bf16-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  auto in = SafetensorsFile::open((src / "model.safetensors").string());
  SafetensorsWriter w;
  for (const TensorView &t : in->tensors())
    w.addBF16(t.name, t.shape, t.toFloat());
  w.write((dir / "model.safetensors").string());
  checkDirAgainstReference(dir.string(), "hf", 1, 1e-5);
  checkDirAgainstReference(dir.string(), "hf", 3, 1e-5);
  fs::remove_all(dir);
}

TEST(PlanExecCpu, TinyHfMatchesReference) { checkAgainstReference("hf", 1, 1e-4); }
/// A non-default dense_trellis tuning (glmc compile --dense-trellis-tuning:
/// 64-thread blocks, registers instead of the cp.async ring, smaller split)
/// is a different program of the same numbers.
TEST(PlanExecCpu, TinyExlr8WithADenseTuningMatchesReference) {
  checkAgainstReference("exlr8", 2, 1e-4, "8:1:64:64:0:0:2");
}
TEST(PlanExecCpu, TinyExl3MatchesReference) {
  checkAgainstReference("exl3", 1, 1e-4);
}
TEST(PlanExecCpu, TinyExlr8MatchesReference) {
  checkAgainstReference("exlr8", 1, 1e-4);
}
TEST(PlanExecCpu, TinyExlr8OnThreeRanks) {
  checkAgainstReference("exlr8", 3, 1e-4);
}
TEST(PlanExecCpu, TinyExl3OnTwoRanks) { checkAgainstReference("exl3", 2, 1e-4); }

/// The MTP layer (layer num_hidden_layers) of every layout: the executor
/// uploads its bindings like any weight's, so the bytes at each binding's
/// place in the weights buffer are the pack file's (raw copies byte for
/// byte, widened vectors as their stored floats), on every rank.
TEST(PlanExecCpu, MtpLayerWeightsAreLoadedOnEveryRank) {
  for (const char *layout : {"hf", "exl3", "exlr8"})
    for (int ranks : {1, 2}) {
      SCOPED_TRACE(std::string(layout) + ", " + std::to_string(ranks) +
                   " rank(s)");
      const std::string dir = tinyPack(layout);
      auto plan = compilePlan(dir, ranks, layout == std::string("exlr8")
                                              ? "mixed"
                                              : "");
      auto e = cpuExecutor(plan, dir);
      const int64_t mtp = plan->model.numLayers;
      for (uint32_t r = 0; r < plan->numRanks; ++r) {
        const glm::plan::RankPlan &rp = plan->ranks[r];
        size_t raw = 0, widened = 0, caches = 0;
        std::map<uint32_t, std::vector<uint8_t>> buffers;
        for (const glm::plan::WeightBinding &w : rp.weights) {
          if (w.layer != mtp)
            continue;
          if (!buffers.count(w.buffer))
            buffers[w.buffer] = e->readBuffer(r, w.buffer);
          const std::vector<uint8_t> &got = buffers[w.buffer];
          std::ifstream in(dir + "/" + w.file, std::ios::binary);
          std::vector<uint8_t> want(w.length);
          in.seekg(std::streamoff(w.offset));
          in.read(reinterpret_cast<char *>(want.data()),
                  std::streamsize(w.length));
          ASSERT_EQ(in.gcount(), std::streamsize(w.length)) << w.tensor;
          if (w.transform == glm::plan::WeightTransform::RawCopy) {
            ASSERT_LE(w.bufferOffset + w.length, got.size()) << w.tensor;
            EXPECT_EQ(std::memcmp(got.data() + w.bufferOffset, want.data(),
                                  w.length),
                      0)
                << w.tensor << " is not the pack's bytes on rank " << r;
            ++raw;
          } else if (w.transform == glm::plan::WeightTransform::Bf16ToF32) {
            for (uint64_t i = 0; i < w.length / 2; ++i) {
              uint16_t h;
              float f;
              std::memcpy(&h, want.data() + 2 * i, 2);
              std::memcpy(&f, got.data() + w.bufferOffset + 4 * i, 4);
              ASSERT_EQ(f, bf16ToFloat(h)) << w.tensor << " element " << i;
            }
            ++widened;
          } else {
            ++widened; // F16 / stored-dtype widening: checked by their tests
          }
        }
        for (const glm::plan::BufferDef &b : rp.buffers)
          caches += b.kind == glm::plan::BufferKind::KvCache && b.layer == mtp;
        EXPECT_GT(raw, 0u) << "rank " << r;
        EXPECT_GT(widened, 0u) << "rank " << r; // norms
        EXPECT_EQ(caches, 2u) << "rank " << r;  // kv.2, index_keys.2
      }
    }
}

/// Logits of every position of a greedy run of the plan for `ranks` ranks.
std::vector<float> planLogits(const std::string &dir, int ranks,
                              const std::string &manifest,
                              const std::vector<int64_t> &batches = {1}) {
  PackOpenOptions po;
  po.manifest = manifest;
  auto pack = Pack::open(dir, po);
  const ModelConfig &cfg = *pack->config();
  auto gen = exec::makePlanGenerator(
      cpuExecutor(compilePlan(dir, ranks, manifest, batches), dir), cfg, 256,
      "cpu");
  SamplingParams sp; // greedy
  sp.maxNew = 6;
  std::vector<float> rows;
  gen->generate({1, 5, 9, 2, 7, 3, 11, 4}, sp, {}, &rows);
  return rows;
}

/// The same plan compiled for 1..4 ranks gives the same logits, bit for
/// bit: every sum over units the ranks own (o_proj's heads, a dense MLP's
/// 128-channel chunks, the experts' halves) is an exact int64 sum of
/// fixed-point unit partials (codegen/templates/fixed_point.cuh).
void checkByteIdenticalAcrossRanks(const std::string &dir,
                                   const std::string &manifest,
                                   std::vector<int> rankCounts) {
  const std::vector<float> one = planLogits(dir, 1, manifest);
  ASSERT_FALSE(one.empty());
  for (int n : rankCounts) {
    const std::vector<float> many = planLogits(dir, n, manifest);
    ASSERT_EQ(many.size(), one.size()) << n << " ranks";
    size_t differ = 0;
    for (size_t i = 0; i < one.size(); ++i)
      differ += std::memcmp(&one[i], &many[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << fs::path(dir).filename() << ": " << differ
                          << " of " << one.size() << " logits differ at " << n
                          << " ranks from 1 rank";
  }
}

TEST(PlanExecCpu, GoldenAIsTheSameBitsOnOneTwoAndFourRanks) {
  checkByteIdenticalAcrossRanks(
      (fs::path(kGoldens) / "glm_dsa_a").string(), "", {2, 4});
}
TEST(PlanExecCpu, GoldenBIsTheSameBitsOnOneAndThreeRanks) {
  checkByteIdenticalAcrossRanks(
      (fs::path(kGoldens) / "glm_dsa_b").string(), "", {3});
}
TEST(PlanExecCpu, FlashIsTheSameBitsOnOneToFourRanks) {
  checkByteIdenticalAcrossRanks((fs::path(kGoldens) / "glm_flash_a").string(),
                                "", {2, 3, 4});
  checkByteIdenticalAcrossRanks((fs::path(kGoldens) / "glm_flash_b").string(),
                                "", {3});
}

TEST(PlanExecCpu, TinyHfIsTheSameBitsOnOneToFourRanks) {
  checkByteIdenticalAcrossRanks(tinyPack("hf"), "", {2, 3, 4});
}
TEST(PlanExecCpu, TinyExl3IsTheSameBitsOnOneToFourRanks) {
  checkByteIdenticalAcrossRanks(tinyPack("exl3"), "", {2, 3, 4});
}
TEST(PlanExecCpu, TinyExlr8IsTheSameBitsOnOneToFourRanks) {
  checkByteIdenticalAcrossRanks(tinyPack("exlr8"), "mixed", {2, 3, 4});
}

/// Random-weights mode, the step benchmark's: an index-only exlr8 pack (no
/// weight bytes at all) runs, the same seed gives the same bits, another seed
/// other logits, every logit is finite (the fill mask keeps fp8/bf16/f16/fp32
/// finite), and a profiled step times each launch of the decode graph.
TEST(PlanExecCpu, RandomWeightsRunAnIndexOnlyPack) {
  const fs::path root = fs::temp_directory_path() /
                        ("glm-plan-exec-random-" + std::to_string(::getpid()));
  const fs::path hf = root / "hf", dir = root / "exlr8";
  glmc::writeRandomHfModel("tiny", 1, hf.string(), /*indexOnly=*/true);
  fs::create_directories(dir);
  glmc::QuantizeOptions q;
  q.indexOnly = true;
  const ModelConfig cfg =
      parseModelConfig(glmc::presetConfigJson("tiny"), "tiny config.json");
  glmc::quantizeToExlr8(cfg, nullptr, dir.string(), q);
  glmc::copyModelSideFiles(hf.string(), dir.string());
  auto plan = compilePlan(dir.string(), 2, "mixed");
  auto a = cpuExecutor(plan, dir.string(), 7);
  auto b = cpuExecutor(plan, dir.string(), 7);
  auto c = cpuExecutor(plan, dir.string(), 8);
  const std::vector<float> la = a->step({3}, {0}, {0});
  const std::vector<float> lb = b->step({3}, {0}, {0});
  const std::vector<float> lc = c->step({3}, {0}, {0});
  ASSERT_EQ(la.size(), size_t(cfg.vocabSize));
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
  EXPECT_NE(0, std::memcmp(la.data(), lc.data(), la.size() * 4));
  size_t finite = 0;
  for (float v : la)
    finite += std::isfinite(v);
  EXPECT_EQ(finite, la.size());

  // Profiled: one timed launch per kernel launch of rank 0's graph, in order.
  const glm::plan::GraphDef *g = nullptr;
  for (const glm::plan::GraphDef &x : plan->ranks[0].graphs)
    if (x.kind == glm::plan::GraphKind::Decode && x.size == 1)
      g = &x;
  ASSERT_NE(g, nullptr);
  std::vector<std::string> want;
  uint64_t bytes = 0;
  for (const glm::plan::OpDef &op : g->ops) {
    bytes += op.bytesRead;
    if (op.kernel >= 0)
      for (uint32_t j = 0; j < op.repeat; ++j)
        want.push_back(op.name + " " + plan->kernels[op.kernel].name);
  }
  std::vector<std::string> got;
  for (const auto &t : a->profileDecode(1)) {
    got.push_back(t.op + " " + t.kernel);
    EXPECT_GE(t.ms, 0.0);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(a->decodeWeightBytes(1), bytes);
  EXPECT_GT(bytes, 0u);
  // Op by op on what the Io buffers hold: the step's logits again.
  a->runDecode(1, /*graph=*/false);
  uint32_t logits = 0;
  for (uint32_t i = 0; i < plan->ranks[0].buffers.size(); ++i)
    if (plan->ranks[0].buffers[i].name == "io.logits")
      logits = i;
  const std::vector<uint8_t> again = a->readBuffer(0, logits);
  EXPECT_EQ(0, std::memcmp(again.data(), la.data(), la.size() * 4));
  fs::remove_all(root);
}

} // namespace

namespace {

/// Per row of [rows, V]: the largest relative error and whether the
/// argmax (the greedy token) agrees.
void compareRows(const std::vector<float> &want, const std::vector<float> &got,
                 int64_t V, double tol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t r = 0; r * V < want.size(); ++r) {
    const auto w0 = want.begin() + r * V, g0 = got.begin() + r * V;
    worst = std::max(worst, worstRelative(std::vector<double>(w0, w0 + V),
                                          std::vector<float>(g0, g0 + V), V));
    EXPECT_EQ(std::max_element(w0, w0 + V) - w0,
              std::max_element(g0, g0 + V) - g0)
        << what << ": greedy token of row " << r;
  }
  std::printf("[ prefill ] %s: worst relative %.2e\n", what.c_str(), worst);
  EXPECT_LE(worst, tol) << what;
}

/// A 12-token prompt through the plan's prefill graphs (one 16-token chunk:
/// four padding rows and two 8-row blocks of the batch-8 decode kernels;
/// then two 8-token chunks) against the same plan token by token: the
/// logits of every prompt row and of the decode step after it.
void checkPrefillAgainstTokens(const std::string &dir,
                               const std::string &manifest, double tol) {
  PackOpenOptions po;
  po.manifest = manifest;
  auto pack = Pack::open(dir, po);
  const int64_t V = pack->config()->vocabSize;
  auto plan = compilePlan(dir, 1, manifest, {1}, "", {8, 16});
  // The indexer scores a chunk on indexer_scores_mma (the tiny indexer's 2
  // heads of 64 dims), a decode step on the fp64 indexer_scores_ctx. Its
  // scores differ by ~1e-7 relative; only the top-8 selection they feed
  // reaches the logits, and it is the same here.
  for (const glm::plan::GraphDef &g : plan->ranks[0].graphs) {
    if (g.kind != glm::plan::GraphKind::Prefill &&
        g.kind != glm::plan::GraphKind::Decode)
      continue;
    std::set<std::string> scores;
    for (const glm::plan::OpDef &op : g.ops)
      if (op.kernel >= 0 &&
          plan->kernels[op.kernel].templateName.rfind("indexer_scores", 0) == 0)
        scores.insert(plan->kernels[op.kernel].templateName);
    EXPECT_EQ(scores,
              (std::set<std::string>{g.kind == glm::plan::GraphKind::Prefill
                                         ? "indexer_scores_mma"
                                         : "indexer_scores_ctx"}))
        << int(g.kind) << "." << g.size;
  }
  // A prefill chunk's LM head on gemm_dense takes the runtime's row
  // window (io.logit_rows): only the rows whose logits come back.
  int heads = 0;
  for (const glm::plan::GraphDef &g : plan->ranks[0].graphs)
    for (const glm::plan::OpDef &op : g.ops) {
      if (op.kernel < 0 ||
          plan->kernels[op.kernel].templateName != "gemm_dense")
        continue;
      const glm::plan::ArgDef &w = op.args.back();
      const bool head = op.name.find("lm_head") != std::string::npos;
      EXPECT_EQ(w.kind == glm::plan::ArgKind::Buffer &&
                    plan->ranks[0].buffers[w.buffer].name == "io.logit_rows",
                head && g.kind == glm::plan::GraphKind::Prefill)
          << op.name;
      heads += head;
    }
  EXPECT_GE(heads, 1);
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
  auto tokens = cpuExecutor(plan, dir);
  std::vector<float> want;
  for (size_t i = 0; i < prompt.size(); ++i) {
    std::vector<float> l = tokens->step({prompt[i]}, {int32_t(i)}, {0});
    want.insert(want.end(), l.begin(), l.end());
  }
  const std::vector<float> next = tokens->step({13}, {12}, {0});
  const std::string name = fs::path(dir).filename().string();

  auto one = cpuExecutor(plan, dir);
  EXPECT_EQ(one->prefillChunks(), (std::vector<uint32_t>{8, 16}));
  compareRows(want, one->prefill(prompt, 0, 0), V, tol,
              name + ", one 16-token chunk");
  // Run again on the rows it left (the benchmark's unit): the same cache.
  one->runPrefill(16);
  compareRows(next, one->step({13}, {12}, {0}), V, tol,
              name + ", the step after it");

  auto two = cpuExecutor(plan, dir);
  std::vector<float> got =
      two->prefill({prompt.begin(), prompt.begin() + 8}, 0, 0);
  const std::vector<float> rest =
      two->prefill({prompt.begin() + 8, prompt.end()}, 8, 0);
  got.insert(got.end(), rest.begin(), rest.end());
  compareRows(want, got, V, tol, name + ", chunks of 8 and 4");
  compareRows(next, two->step({13}, {12}, {0}), V, tol,
              name + ", the step after them");

  // What sampling reads: only the chunk's last row, the same bits as that
  // row of the full read.
  auto last = cpuExecutor(plan, dir);
  const std::vector<float> lastRow =
      last->prefill({prompt.begin(), prompt.begin() + 5}, 0, 0, true);
  const std::vector<float> all =
      last->prefill({prompt.begin(), prompt.begin() + 5}, 0, 0);
  ASSERT_EQ(lastRow.size(), size_t(V));
  ASSERT_EQ(all.size(), size_t(5 * V));
  EXPECT_TRUE(std::equal(lastRow.begin(), lastRow.end(), all.end() - V));

  // A chunk that would pass the KV cache is refused, naming the sizes.
  const std::string m = [&] {
    try {
      two->prefill(prompt, int32_t(plan->model.maxContext) - 8, 0);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(m.find("16-token prefill chunk at position"), std::string::npos)
      << m;
}

} // namespace

/// Several Flash sequences in one decode batch (a plan of 3 KV slots): each
/// row reads and writes its own slot's KDA state, conv inputs, k-pool ring, pooled keys and MLA
/// cache, so two sequences decoded together (batch 2, slots 0 and 2, at
/// different positions) give each sequence's logits as decoding it alone
/// does, at 1 and 3 ranks.
TEST(PlanExecCpu, FlashSequencesShareADecodeBatchWithoutMixing) {
  const fs::path dir = fs::path(kGoldens) / "glm_flash_a";
  auto pack = Pack::open(dir.string());
  const int64_t V = pack->config()->vocabSize;
  const std::vector<int32_t> a = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8};
  const std::vector<int32_t> b = {12, 3, 3, 40, 7, 1, 9, 14, 2, 5, 6, 11, 8};
  const size_t lead = b.size() - a.size(); // b runs `lead` tokens ahead
  for (int ranks : {1, 3}) {
    auto plan = compilePlan(dir.string(), ranks, "", {1, 2, 3}, "", {0}, 3);
    // Alone: each sequence through batch-1 steps on its own slot.
    auto alone = cpuExecutor(plan, dir.string());
    std::vector<std::vector<float>> wantA, wantB;
    for (size_t i = 0; i < a.size(); ++i)
      wantA.push_back(alone->step({a[i]}, {int32_t(i)}, {0}));
    for (size_t i = 0; i < b.size(); ++i)
      wantB.push_back(alone->step({b[i]}, {int32_t(i)}, {2}));
    // Together: b's first tokens alone, then both in batch-2 steps.
    auto both = cpuExecutor(plan, dir.string());
    for (size_t i = 0; i < lead; ++i)
      both->step({b[i]}, {int32_t(i)}, {2});
    for (size_t i = 0; i < a.size(); ++i) {
      const std::vector<float> rows = both->step(
          {a[i], b[lead + i]}, {int32_t(i), int32_t(lead + i)}, {0, 2});
      ASSERT_EQ(rows.size(), size_t(2 * V));
      const std::string at =
          std::to_string(ranks) + " rank(s), step " + std::to_string(i);
      compareRows(wantA[i], {rows.begin(), rows.begin() + V}, V, 1e-6,
                  "flash batch 2, sequence a, " + at);
      compareRows(wantB[lead + i], {rows.begin() + V, rows.end()}, V, 1e-6,
                  "flash batch 2, sequence b, " + at);
    }
    // A slot past the plan's three is refused, not written past the cache.
    EXPECT_THROW(both->step({1}, {0}, {3}), Error);
  }
  // The default plan holds one sequence: slot 1 is refused by name.
  auto one = cpuExecutor(compilePlan(dir.string(), 1), dir.string());
  try {
    one->step({1}, {0}, {1});
    ADD_FAILURE() << "slot 1 of a 1-slot plan accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("--kv-slots"), std::string::npos)
        << e.what();
  }
}

/// BF16 weights: the prefill graphs' dense projections run on gemm_dense
/// (bf16 x planes that hold x exactly; its twin within 2e-7 of
/// dense_gemv's), the attention on tensor cores (mla_prefill: fp16 q, keys
/// and probabilities, about 4e-4 of its output; 3.3e-4 of the logits
/// measured, as before gemm_dense took bf16).
TEST(PlanExecCpu, PrefillChunksOfTinyHfMatchTokenByToken) {
  checkPrefillAgainstTokens(tinyPack("hf"), "", 1e-3);
}
/// exlr8: the dense trellis GEMMs of a chunk run on gemm_trellis (fp16
/// tensor-core inputs in CUDA, the twin rounds the same), about 3e-4.
TEST(PlanExecCpu, PrefillChunksOfTinyExlr8MatchTokenByToken) {
  checkPrefillAgainstTokens(tinyPack("exlr8"), "mixed", 1e-3);
}
/// EXL3: every projection is trellis, including outputs that are not whole
/// 128-blocks (kv_a's 160, the indexer key's 64): computed and rotated
/// padded, then their valid columns copied out (vocab_gather).
TEST(PlanExecCpu, PrefillChunksOfTinyExl3MatchTokenByToken) {
  checkPrefillAgainstTokens(tinyPack("exl3"), "", 1e-3);
}

/// GLM-5.3-Flash at 1 and 3 ranks: each KDA layer's chunk through kda_prep +
/// kda_chunk (3xTF32 WY chunks, a rank's heads into its columns), the k-pool ring filled row by row, mHC and
/// the NoPE MLA over the chunk's rows. A 12-token prompt as chunks of 8 + 4
/// and of 4 + 4 + 4 gives token by token's logits (within the chunked
/// form's rounding), and the decode step after it continues from the state
/// the chunks left. A chunk with padding rows is refused: the KDA state
/// would take them as tokens.
TEST(PlanExecCpu, PrefillChunksOfFlashMatchTokenByToken) {
  // glm_flash_b's KDA heads of 20 are outside kda_chunk's shapes (dk a
  // multiple of 8, dv of 16): its plan keeps prompts token by token.
  const std::string b = std::string(kGoldens) + "/glm_flash_b";
  EXPECT_TRUE(cpuExecutor(compilePlan(b, 1, "", {1}, "", {4, 8}), b)
                  ->prefillChunks()
                  .empty());
  for (int ranks : {1, 3}) {
    const char *name = "glm_flash_a";
    const std::string dir = std::string(kGoldens) + "/" + name;
    auto pack = Pack::open(dir);
    const int64_t V = pack->config()->vocabSize;
    auto plan = compilePlan(dir, ranks, "", {1}, "", {4, 8});
    const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12};
    auto tokens = cpuExecutor(plan, dir);
    EXPECT_TRUE(tokens->recurrentState());
    std::vector<float> want;
    for (size_t i = 0; i < prompt.size(); ++i) {
      std::vector<float> l = tokens->step({prompt[i]}, {int32_t(i)}, {0});
      want.insert(want.end(), l.begin(), l.end());
    }
    const std::vector<float> next = tokens->step({13}, {12}, {0});
    for (const std::vector<size_t> &cuts :
         {std::vector<size_t>{8, 4}, std::vector<size_t>{4, 4, 4}}) {
      auto e = cpuExecutor(plan, dir);
      std::vector<float> got;
      size_t at = 0;
      for (size_t c : cuts) {
        const std::vector<float> l = e->prefill(
            {prompt.begin() + at, prompt.begin() + at + c}, int32_t(at), 0);
        got.insert(got.end(), l.begin(), l.end());
        at += c;
      }
      const std::string what = std::string(name) + ", " +
                               std::to_string(ranks) + " rank(s), chunks of " +
                               std::to_string(cuts[0]) + " x " +
                               std::to_string(cuts.size());
      // KDA's 3xTF32 chunks are within 5e-6; the MLA layers' tensor-core
      // attention (mla_prefill, fp16 inputs) 1.3e-4 of the logits.
      compareRows(want, got, V, 5e-4, what);
      compareRows(next, e->step({13}, {12}, {0}), V, 1e-4,
                  what + ", the step after them");
    }
    // Three tokens would run in the 4-token graph with a padding row.
    auto e = cpuExecutor(plan, dir);
    try {
      e->prefill({1, 5, 9}, 0, 0);
      ADD_FAILURE() << "a padded chunk of a KDA plan ran";
    } catch (const Error &x) {
      EXPECT_NE(std::string(x.what()).find("padding rows"), std::string::npos)
          << x.what();
    }
  }
}

/// The rule that picks a prefill chunk: a graph that holds the rest when
/// half of it is prompt, whole chunks of the largest graph that fits
/// the cache, token by token otherwise.
TEST(PlanExecCpu, PrefillChunkChoice) {
  const std::vector<uint32_t> c = {512, 2048};
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 3, 8192), 0u);     // 3 of 512
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 255, 8192), 0u);
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 256, 8192), 256u); // half
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 600, 8192), 512u); // 600 < 1024
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 1024, 8192), 1024u); // in 2048
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 5000, 8192), 2048u);
  EXPECT_EQ(exec::choosePrefillChunk(c, 7000, 1000, 8192), 512u); // 2048 passes
  EXPECT_EQ(exec::choosePrefillChunk(c, 7800, 200, 8192), 0u);    // none fits
  EXPECT_EQ(exec::choosePrefillChunk({}, 0, 100, 8192), 0u);
  // exact (KDA state): whole chunks only, never padding rows.
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 1024, 8192, true), 512u);
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 5000, 8192, true), 2048u);
  EXPECT_EQ(exec::choosePrefillChunk(c, 0, 511, 8192, true), 0u);
  EXPECT_EQ(exec::choosePrefillChunk(c, 7000, 2048, 8192, true), 512u);
}

/// glm-engine's default: the generator feeds the prompt through the prefill
/// graphs; greedy tokens equal the token-by-token generator's on the same
/// plan, every logits row within the prefill kernels' tolerance.
TEST(PlanExecCpu, ChunkedPrefillGeneratesTheTokensOfTokenByToken) {
  const std::string dir = tinyPack("exl3");
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  auto plan = compilePlan(dir, 1, "", {1}, "", {8, 16});
  const std::vector<int64_t> prompt = {1,  5,  9,  2,  7,  3,  11,
                                       4,  6,  8,  10, 12, 14, 13,
                                       15, 16, 17, 18, 19, 20};
  SamplingParams sp; // greedy
  sp.maxNew = 6;
  std::vector<float> want, got;
  GenerationResult a =
      exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 256, "cpu", false)
          ->generate(prompt, sp, {}, &want);
  // 20 tokens: a whole 16-token chunk, then 4 (half of the 8 graph)
  GenerationResult b =
      exec::makePlanGenerator(cpuExecutor(plan, dir), cfg, 256, "cpu", true)
          ->generate(prompt, sp, {}, &got);
  EXPECT_EQ(b.tokens, a.tokens);
  compareRows(want, got, cfg.vocabSize, 1e-3, "exl3 generator, chunked");
}

/// The inspector's data edges (glmc inspect's dot/html graphs) are real data
/// dependencies: the tiny plan's decode step runs op by op on the CPU, each
/// op's written bytes observed (buffers before and after it), and for every
/// edge writer -> reader the writer changed bytes the reader's footprint
/// reads. Edges by whole buffers include writers whose bytes the reader
/// never touches (scratch shared by unrelated ops): the footprint edges
/// must differ from them.
TEST(PlanExecCpu, InspectorEdgesAreRealDataDependencies) {
  const std::string dir = tinyPack("hf");
  auto plan = compilePlan(dir, 1);
  auto e = cpuExecutor(plan, dir);
  const glm::plan::RankPlan &rp = plan->ranks[0];
  const glm::plan::GraphDef *g = nullptr;
  for (const glm::plan::GraphDef &x : rp.graphs)
    if (x.kind == glm::plan::GraphKind::Decode && x.size == 1)
      g = &x;
  ASSERT_NE(g, nullptr);
  // Snapshots of every non-weight buffer after each op of the second step.
  auto snapshot = [&] {
    std::vector<std::vector<uint8_t>> s(rp.buffers.size());
    for (uint32_t b = 0; b < rp.buffers.size(); ++b)
      if (rp.buffers[b].kind != glm::plan::BufferKind::Weight)
        s[b] = e->readBuffer(0, b);
    return s;
  };
  e->step({3}, {0}, {0});
  std::vector<std::vector<std::vector<uint8_t>>> after;
  std::vector<std::vector<uint8_t>> before = snapshot();
  e->setTrace([&](const exec::TraceEvent &t) {
    if (t.graph == "decode.1")
      after.push_back(snapshot());
  });
  e->step({7}, {1}, {0});
  e->setTrace(nullptr);
  ASSERT_EQ(after.size(), g->ops.size());
  // written[op][buffer]: the byte offsets the op changed.
  auto changed = [&](size_t op, uint32_t b) {
    const std::vector<uint8_t> &x = op ? after[op - 1][b] : before[b];
    const std::vector<uint8_t> &y = after[op][b];
    std::vector<uint64_t> at;
    for (size_t i = 0; i < y.size(); ++i)
      if (x[i] != y[i])
        at.push_back(i);
    return at;
  };
  glm::plan::InspectOptions opt;
  opt.regions = [&](const glm::plan::RankPlan &r,
                    const glm::plan::GraphDef &gg) {
    std::vector<std::vector<glm::plan::InspectRegion>> out;
    for (const auto &op : exec::opRegions(*plan, r, gg)) {
      out.emplace_back();
      for (const auto &x : op)
        out.back().push_back({x.buffer, x.begin, x.end});
    }
    return out;
  };
  const auto regions = opt.regions(rp, *g);
  const auto edges = glm::plan::dataEdges(rp, *g, opt);
  const auto byName = glm::plan::dataEdges(rp, *g, {});
  ASSERT_GT(edges.size(), g->ops.size() / 2);
  size_t real = 0;
  for (const auto &[from, to] : edges) {
    bool found = false;
    // An all-reduce works in place and is the identity on one rank: its
    // edge carries the bytes its own writers left in the reader's range.
    std::vector<size_t> writers = {from};
    if (g->ops[from].kernel < 0) {
      writers.clear();
      for (const auto &[w, c] : edges)
        if (c == from && g->ops[w].kernel >= 0)
          writers.push_back(w);
    }
    // The reader's read regions, in arena bytes (buffers may alias).
    auto arena = [&](uint32_t b) { return rp.buffers[b].arenaOffset; };
    std::vector<std::pair<uint64_t, uint64_t>> reads;
    const auto &ins = g->ops[to].inputs;
    for (const auto &x : regions[to])
      if (std::find(ins.begin(), ins.end(), x.buffer) != ins.end())
        reads.push_back({arena(x.buffer) + x.begin, arena(x.buffer) + x.end});
    for (size_t w : writers)
      for (uint32_t b : g->ops[w].outputs)
        for (uint64_t at : changed(w, b))
          for (const auto &[lo, hi] : reads)
            found |= lo <= arena(b) + at && arena(b) + at < hi;
    real += found;
    EXPECT_TRUE(found) << "edge " << g->ops[from].name << " -> "
                       << g->ops[to].name
                       << ": the writer changed no byte the reader reads";
  }
  size_t dropped = 0, added = 0;
  for (const auto &x : byName)
    dropped += !std::binary_search(edges.begin(), edges.end(), x);
  for (const auto &x : edges)
    added += !std::binary_search(byName.begin(), byName.end(), x);
  std::printf("[ inspect ] %zu footprint edges, each a write the reader "
              "reads; by whole buffers %zu (%zu of them not real, %zu "
              "missed)\n",
              real, byName.size(), dropped, added);
  EXPECT_GT(dropped + added, 0u);
}
