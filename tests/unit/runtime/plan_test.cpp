//===- plan_test.cpp - plan round trip, determinism, refusals, inspect ----===//
#include "plans/engine_image.h"
#include "plans/plan.h"
#include "plans/plan_inspect.h"
#include "runtime/base/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

using namespace glm::plan;

namespace {

/// A two-rank plan of a 2-layer model (layer 0 dense, layer 1 MoE) with an
/// embedding (layer -1) and head (layer 2), one decode and one prefill
/// bucket, weights bound per rank and one all-reduce per layer.
Plan smallPlan() {
  Plan p;
  p.compilerVersion = "glmc test";
  p.configHash = "00000000000000c1";
  p.manifestHash = "00000000000000a1";
  p.indexHash = "00000000000000b1";
  p.targetArchs = {"sm_121", "sm_90"};
  p.model.modelType = "glm_moe_dsa";
  p.model.architecture = "GlmMoeDsaForCausalLM";
  p.model.layout = "exlr8";
  p.model.manifest = "home";
  p.model.hiddenSize = 256;
  p.model.numLayers = 2;
  p.model.vocabSize = 1024;
  p.model.eosTokenIds = {1000, 1001};
  p.model.padTokenId = 1000;
  p.model.chatTemplateFile = "chat_template.jinja";
  p.model.temperature = 0.6f;
  p.model.topP = 0.95f;
  p.model.maxContext = 4096;
  p.model.kvDtype = DType::BF16;
  p.memoryPerRank = 104ull << 30;
  p.compileOptions = {{"sparks", "2"}, {"arch", "sm_121,sm_90"}};

  KernelDef norm;
  norm.name = "glm_rms_norm_wbf16_t256";
  norm.templateName = "rms_norm";
  norm.templateArgs = {{"wt", "bf16"}, {"threads", "256"}};
  norm.source = "// norm\n";
  norm.sourceHash = "1111111111111111";
  norm.nvrtcOptions = {"--std=c++17"};
  norm.binaries = {{"sm_121", ".version 8.8", {0x7F, 'E', 'L', 'F'}},
                   {"sm_90", ".version 8.8", {0x7F, 'E', 'L', 'F', 1}}};
  norm.launch.blockX = 256;
  KernelDef gemv = norm;
  gemv.name = "glm_dense_gemv_bf16_snone_b1_t256";
  gemv.templateName = "dense_gemv";
  gemv.sourceHash = "2222222222222222";
  KernelDef expert = norm;
  expert.name = "glm_expert_gemv_trellis_k34_mcg_e4m3_b1_svf16_t256";
  expert.templateName = "expert_gemv_trellis";
  expert.sourceHash = "3333333333333333";
  EXPECT_EQ(addKernel(p, norm), 0);
  EXPECT_EQ(addKernel(p, gemv), 1);
  EXPECT_EQ(addKernel(p, expert), 2);
  EXPECT_EQ(addKernel(p, norm), 0); // dedup

  for (uint32_t r = 0; r < 2; ++r) {
    RankPlan rp;
    rp.rank = r;
    rp.buffers = {
        {"w.embed", 1000, 0, BufferKind::Weight, DType::BF16, -1},
        {"w.l0", 4000 + 100 * r, 1024, BufferKind::Weight, DType::U8, 0},
        {"w.l1.experts", 9000, 5376, BufferKind::Weight, DType::U8, 1},
        {"act.x", 1024, 14592, BufferKind::Activation, DType::F32, -1},
        {"act.h", 1024, 15616, BufferKind::Activation, DType::F32, -1},
        {"kv.l0", 2048, 16640, BufferKind::KvCache, DType::BF16, 0},
    };
    WeightBinding w;
    w.file = "experts/exlr8-layer-001.k3.safetensors";
    w.offset = 4096 + 9000 * r;
    w.length = 9000;
    w.buffer = 2;
    w.tag = WeightTag::TrellisHalf;
    w.tensor = "model.layers.1.mlp.experts.0.gate_proj.weight";
    w.layer = 1;
    w.expert = 0;
    w.projection = Projection::Gate;
    w.half = int32_t(r);
    w.widthX2 = 6;
    rp.weights.push_back(w);
    rp.collectives = {{CollectiveKind::AllReduce, DType::F32, 256, 0,
                       "rank-order fp32 sum", 3},
                      {CollectiveKind::AllReduce, DType::F32, 256, 1,
                       "rank-order fp32 sum", 3}};
    auto op = [](OpKind k, std::string name, int32_t kernel, int32_t layer,
                 uint64_t bytes, std::vector<uint32_t> in,
                 std::vector<uint32_t> out) {
      OpDef o;
      o.kind = k;
      o.name = std::move(name);
      o.kernel = kernel;
      o.layer = layer;
      o.bytesRead = bytes;
      o.inputs = std::move(in);
      o.outputs = std::move(out);
      return o;
    };
    GraphDef decode;
    decode.kind = GraphKind::Decode;
    decode.size = 1;
    decode.ops = {
        op(OpKind::Embed, "embed", 1, -1, 512, {0}, {3}),
        op(OpKind::RmsNorm, "l0.norm", 0, 0, 512, {3}, {4}),
        op(OpKind::DenseGemv, "l0.mlp", 1, 0, 3000 + 100 * r, {4, 1}, {4}),
        op(OpKind::AllReduce, "l0.allreduce", -1, 0, 0, {4}, {4}),
        op(OpKind::ExpertGemv, "l1.experts", 2, 1, 6000, {4, 2}, {3}),
        op(OpKind::AllReduce, "l1.allreduce", -1, 1, 0, {3}, {3}),
        op(OpKind::DenseGemv, "lm_head", 1, 2, 2000, {3}, {4}),
    };
    decode.ops[3].collective = 0;
    decode.ops[5].collective = 1;
    decode.ops[2].args = {{ArgKind::Buffer, 4, 0, 0, 0.0f, "x"},
                          {ArgKind::Buffer, 1, 0, 0, 0.0f, "w"},
                          {ArgKind::I32, -1, 0, 256, 0.0f, "in"},
                          {ArgKind::F32, -1, 0, 0, 1e-5f, "eps"},
                          {ArgKind::Runtime, -1, 0, 0, 0.0f, "batch"}};
    decode.ops[2].launch = {16, 1, 1, 256, 1, 1, 0};
    GraphDef prefill = decode;
    prefill.kind = GraphKind::Prefill;
    prefill.size = 128;
    GraphDef decode8 = decode;
    decode8.size = 8;
    rp.graphs = {prefill, decode8, decode}; // finalize sorts them
    p.ranks.push_back(std::move(rp));
  }
  finalizePlan(p);
  return p;
}

std::string tmpPath(const std::string &name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const glm::rt::Error &e) {
    return e.what();
  }
  return "no error";
}

/// Patches a uint32 field of the root table in serialized bytes by writing
/// a plan with the field changed (the writer takes the struct value as is).
std::vector<uint8_t> bytesWith(const std::function<void(Plan &)> &edit) {
  Plan p = smallPlan();
  edit(p);
  return serializePlan(p);
}

} // namespace

TEST(Plan, FinalizeComputesTotalsAndSummaries) {
  Plan p = smallPlan();
  ASSERT_EQ(p.numRanks, 2u);
  const RankPlan &r1 = p.ranks[1];
  EXPECT_EQ(r1.weightBytes, 1000u + 4100u + 9000u);
  EXPECT_EQ(r1.activationBytes, 2048u);
  EXPECT_EQ(r1.kvBytes, 2048u);
  EXPECT_EQ(r1.arenaBytes, 16640u + 2048u);
  // Graphs sorted (decode 1, decode 8, prefill 128).
  ASSERT_EQ(r1.graphs.size(), 3u);
  EXPECT_EQ(r1.graphs[0].size, 1u);
  EXPECT_EQ(r1.graphs[1].size, 8u);
  EXPECT_EQ(r1.graphs[2].kind, GraphKind::Prefill);
  // Bytes per token from the batch-1 decode graph.
  EXPECT_EQ(r1.bytesPerToken, 512u + 512u + 3100u + 6000u + 2000u);
  EXPECT_EQ(p.model.activeWeightBytes,
            p.ranks[0].bytesPerToken + p.ranks[1].bytesPerToken);
  ASSERT_EQ(r1.layers.size(), 4u); // embed, 0, 1, head
  EXPECT_EQ(r1.layers[0].layer, -1);
  EXPECT_EQ(r1.layers[0].kind, LayerKind::Head);
  EXPECT_EQ(r1.layers[1].kind, LayerKind::Dense);
  EXPECT_EQ(r1.layers[1].bytesPerToken, 512u + 3100u);
  EXPECT_EQ(r1.layers[2].kind, LayerKind::Moe);
  EXPECT_EQ(r1.layers[2].kernels,
            (std::vector<std::string>{
                "glm_expert_gemv_trellis_k34_mcg_e4m3_b1_svf16_t256",
                "all_reduce"}));
  EXPECT_EQ(r1.graphs[0].ops[4].predictedNs, predictNs(6000, 273));
  EXPECT_EQ(predictNs(273000, 273), 1000u); // 273 kB at 273 GB/s = 1 us
}

TEST(Plan, RoundTripGivesEqualStructs) {
  const Plan p = smallPlan();
  const std::string path = tmpPath("glm_plan_roundtrip.glmplan");
  writePlan(p, path);
  const Plan q = readPlan(path);
  EXPECT_TRUE(q == p);
  EXPECT_EQ(q.ranks[1].weights[0].file, p.ranks[1].weights[0].file);
  EXPECT_EQ(q.kernels[0].binaries[1].cubin.size(), 5u);
  EXPECT_EQ(q.compileOptions.at("sparks"), "2");
  EXPECT_FLOAT_EQ(q.ranks[0].graphs[0].ops[2].args[3].f, 1e-5f);
  // A field changed after reading makes them unequal: == is not vacuous.
  Plan r = q;
  r.ranks[1].weights[0].half = 7;
  EXPECT_FALSE(r == p);
}

/// glmc compile --emit engine: a runtime executable, the plan, a trailer.
/// readPlan finds the plan inside; damage to it or to the trailer is named.
TEST(Plan, EngineImageCarriesItsPlan) {
  const Plan p = smallPlan();
  const std::string runtime = tmpPath("glm_plan_fake_runtime");
  {
    std::ofstream f(runtime, std::ios::binary);
    f << std::string(4096, '\x7f') << "ELF-ish bytes";
  }
  const std::string image = tmpPath("glm_plan_engine_image");
  const std::vector<uint8_t> bytes = serializePlan(p);
  glm::plan::writeEngineImage(runtime, bytes, image);
  EXPECT_TRUE(glm::plan::hasEmbeddedPlan(image));
  EXPECT_FALSE(glm::plan::hasEmbeddedPlan(runtime));
  EXPECT_TRUE(readPlan(image) == p);
  EXPECT_EQ(std::filesystem::file_size(image),
            std::filesystem::file_size(runtime) + bytes.size() +
                glm::plan::kEngineTrailerBytes);
  // An engine is not a runtime to embed into.
  EXPECT_THROW(glm::plan::writeEngineImage(image, bytes, image + "2"),
               glm::rt::Error);
  auto damaged = [&](uint64_t at, uint8_t v) {
    std::string b;
    {
      std::ifstream f(image, std::ios::binary);
      b.assign(std::istreambuf_iterator<char>(f), {});
    }
    b[at] = char(v);
    const std::string out = tmpPath("glm_plan_engine_damaged");
    std::ofstream(out, std::ios::binary) << b;
    try {
      readPlan(out);
    } catch (const glm::rt::Error &e) {
      return std::string(e.what());
    }
    return std::string("read");
  };
  const uint64_t size = std::filesystem::file_size(image);
  const uint64_t planAt = std::filesystem::file_size(runtime);
  EXPECT_NE(damaged(planAt + bytes.size() / 2, 0xA5).find("fails its checksum"),
            std::string::npos);
  // The plan size's top byte: the range runs past the image.
  EXPECT_NE(damaged(size - 32 + 16 + 7, 0x01).find("truncated or damaged"),
            std::string::npos);
  // No trailer at all (its magic damaged): read as a plan file, refused as
  // one (another identifier).
  EXPECT_NE(damaged(size - 32, 'X'), "read");
}

TEST(Plan, SerializationIsDeterministic) {
  const std::vector<uint8_t> a = serializePlan(smallPlan());
  const std::vector<uint8_t> b = serializePlan(smallPlan());
  EXPECT_EQ(a, b);
  // The identifier sits at bytes 4..7.
  ASSERT_GT(a.size(), 8u);
  EXPECT_EQ(std::string(a.begin() + 4, a.begin() + 8), "GLMP");
  // Map order of insertion does not matter.
  Plan c = smallPlan();
  c.compileOptions.clear();
  c.compileOptions["arch"] = "sm_121,sm_90";
  c.compileOptions["sparks"] = "2";
  EXPECT_EQ(serializePlan(c), a);
}

TEST(Plan, RefusesAnotherFileIdentifier) {
  std::vector<uint8_t> bytes = serializePlan(smallPlan());
  std::memcpy(bytes.data() + 4, "XXXX", 4);
  const std::string m = errorOf([&] {
    parsePlan(bytes.data(), bytes.size(), "model.glmplan");
  });
  EXPECT_NE(m.find("model.glmplan: not a glmc plan (file identifier 'XXXX', "
                   "expected 'GLMP')"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("re-plan with: glmc compile PACK --sparks N -o "
                   "model.glmplan"),
            std::string::npos)
      << m;
  // A file not named like a plan is likely the wrong argument: no advice to
  // write a plan over it.
  const std::string c = errorOf([&] {
    parsePlan(bytes.data(), bytes.size(), "pack/config.json");
  });
  EXPECT_NE(c.find("pack/config.json: not a glmc plan (file identifier "
                   "'XXXX', expected 'GLMP'); give the .glmplan file that "
                   "glmc compile wrote"),
            std::string::npos)
      << c;
  EXPECT_EQ(c.find("-o pack/config.json"), std::string::npos) << c;
  const std::string t = errorOf([&] {
    parsePlan(bytes.data(), 3, "short.glmplan");
  });
  EXPECT_NE(t.find("too short"), std::string::npos) << t;
}

TEST(Plan, RefusesCorruptBytes) {
  std::vector<uint8_t> bytes = serializePlan(smallPlan());
  bytes.resize(bytes.size() / 2); // truncated download
  const std::string m = errorOf([&] {
    parsePlan(bytes.data(), bytes.size(), "cut.glmplan");
  });
  EXPECT_NE(m.find("corrupt or truncated"), std::string::npos) << m;
}

TEST(Plan, ChecksumTrailerCatchesAFlippedValue) {
  const std::vector<uint8_t> good = serializePlan(smallPlan());
  ASSERT_GT(good.size(), kPlanTrailerBytes + 8);
  EXPECT_EQ(std::string(good.end() - 16, good.end() - 8), "GLMPXH64");
  // An eps of 1e-5 becomes another float: the flatbuffer still verifies
  // (offsets are intact), only the checksum can tell.
  const float eps = 1e-5f;
  uint8_t pattern[4];
  std::memcpy(pattern, &eps, 4);
  auto at = std::search(good.begin(), good.end(), pattern, pattern + 4);
  ASSERT_NE(at, good.end());
  std::vector<uint8_t> flipped = good;
  flipped[size_t(at - good.begin()) + 3] ^= 0x01;
  const std::string m = errorOf([&] {
    parsePlan(flipped.data(), flipped.size(), "flip.glmplan");
  });
  EXPECT_NE(m.find("flip.glmplan: corrupt plan (its bytes hash to "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the file changed after it was written); re-plan with"),
            std::string::npos)
      << m;
  // A plan written before schema 1.3 (no trailer) is refused, not misread.
  std::vector<uint8_t> old(good.begin(), good.end() - kPlanTrailerBytes);
  const std::string o = errorOf([&] {
    parsePlan(old.data(), old.size(), "old.glmplan");
  });
  EXPECT_NE(o.find("old.glmplan: corrupt or truncated plan (its checksum "
                   "trailer is missing: the file was cut short, or written "
                   "by a glmc older than plan schema 1.3)"),
            std::string::npos)
      << o;
  EXPECT_NO_THROW(parsePlan(good.data(), good.size(), "good.glmplan"));
}

TEST(Plan, RefusesANewerMajorAndAcceptsANewerMinor) {
  auto newer = bytesWith([](Plan &p) {
    p.schemaMajor = kPlanSchemaMajor + 1;
    p.schemaMinor = 0; // the message names "2.0" whatever this build's minor
  });
  const std::string m = errorOf([&] {
    parsePlan(newer.data(), newer.size(), "new.glmplan",
              {"", "", "", "/packs/glm53", kRuntimeAbi});
  });
  EXPECT_NE(m.find("new.glmplan: plan schema version 2.0 is not supported"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("re-plan with: glmc compile /packs/glm53 --sparks 2 --arch "
                   "sm_121,sm_90 -o "
                   "new.glmplan"),
            std::string::npos)
      << m;
  auto minor = bytesWith([](Plan &p) { p.schemaMinor = kPlanSchemaMinor + 3; });
  EXPECT_NO_THROW(parsePlan(minor.data(), minor.size(), "minor.glmplan"));
}

TEST(Plan, RefusesAnotherRuntimeAbi) {
  auto other = bytesWith([](Plan &p) { p.runtimeAbi = kRuntimeAbi + 1; });
  const std::string m = errorOf([&] {
    parsePlan(other.data(), other.size(), "abi.glmplan");
  });
  EXPECT_NE(m.find("compiled for runtime ABI " +
                   std::to_string(kRuntimeAbi + 1) +
                   " but this runtime has ABI " + std::to_string(kRuntimeAbi)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("re-plan with"), std::string::npos);
}

TEST(Plan, RefusesAChangedManifestAndChecksOnlyWhatIsAsked) {
  const std::vector<uint8_t> bytes = serializePlan(smallPlan());
  ReadExpectations ok{"00000000000000c1", "00000000000000a1",
                      "00000000000000b1", "/packs/glm53", kRuntimeAbi};
  EXPECT_NO_THROW(parsePlan(bytes.data(), bytes.size(), "p.glmplan", ok));
  ReadExpectations changed = ok;
  changed.manifestHash = "00000000000000a2";
  const std::string m = errorOf([&] {
    parsePlan(bytes.data(), bytes.size(), "p.glmplan", changed);
  });
  EXPECT_NE(m.find("p.glmplan: the pack's manifest changed since this plan "
                   "was compiled (plan has 00000000000000a1, pack has "
                   "00000000000000a2)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("re-plan with: glmc compile /packs/glm53 --sparks 2 --arch "
                   "sm_121,sm_90 -o "
                   "p.glmplan"),
            std::string::npos)
      << m;
  // A plan that records its command gets it back, with the manifest the
  // runtime was given and this plan path: pasteable as printed.
  Plan recorded = smallPlan();
  recorded.compileOptions["command"] =
      "glmc compile ../glm53 --manifest k3 --arch sm_90 --width 3 -o x.glmplan";
  const std::vector<uint8_t> rb = serializePlan(recorded);
  ReadExpectations other = changed;
  other.replanOverrides = {{"--manifest", "k4"}};
  const std::string r = errorOf([&] {
    parsePlan(rb.data(), rb.size(), "p.glmplan", other);
  });
  EXPECT_NE(r.find("re-plan with: glmc compile /packs/glm53 --arch sm_90 "
                   "--width 3 -o p.glmplan --manifest k4"),
            std::string::npos)
      << r;
  ReadExpectations cfg = ok;
  cfg.configHash = "ffffffffffffffff";
  EXPECT_NE(errorOf([&] {
              parsePlan(bytes.data(), bytes.size(), "p.glmplan", cfg);
            }).find("config.json changed"),
            std::string::npos);
  ReadExpectations idx = ok;
  idx.indexHash = "ffffffffffffffff";
  EXPECT_NE(errorOf([&] {
              parsePlan(bytes.data(), bytes.size(), "p.glmplan", idx);
            }).find("index changed"),
            std::string::npos);
}

TEST(Plan, RefusesOutOfRangeIndices) {
  auto bad = bytesWith([](Plan &p) { p.ranks[0].graphs[0].ops[1].kernel = 9; });
  EXPECT_NE(errorOf([&] {
              parsePlan(bad.data(), bad.size(), "bad.glmplan");
            }).find("op 'l0.norm' uses kernel 9 of 3"),
            std::string::npos);
  auto over = bytesWith([](Plan &p) { p.ranks[1].weights[0].length = 9001; });
  EXPECT_NE(errorOf([&] {
              parsePlan(over.data(), over.size(), "over.glmplan");
            }).find("overflows buffer 'w.l1.experts'"),
            std::string::npos);
  // A binding names a file inside --pack: not an absolute path (/dev/zero,
  // a FIFO) and not one that climbs out of it.
  for (const char *file : {"/dev/zero", "../outside.safetensors",
                           "dense/../../x.safetensors", ""}) {
    auto esc = bytesWith([&](Plan &p) { p.ranks[1].weights[0].file = file; });
    const std::string e = errorOf(
        [&] { parsePlan(esc.data(), esc.size(), "esc.glmplan"); });
    EXPECT_NE(e.find(std::string("rank 1 binding of '") + file + "' @13096 "
                     "names no file inside the pack directory"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(errorOf([] { readPlan("/nonexistent/x.glmplan"); })
                .find("cannot open the plan"),
            std::string::npos);
  // A context past 2^30 is refused, not truncated by the server's int.
  auto ctx = bytesWith(
      [](Plan &p) { p.model.maxContext = (int64_t(1) << 32) + 100; });
  EXPECT_NE(errorOf([&] {
              parsePlan(ctx.data(), ctx.size(), "ctx.glmplan");
            }).find("invalid plan: max_context is 4294967396 tokens, outside "
                    "0..1073741824"),
            std::string::npos);
}

TEST(PlanInspect, TextAndJsonReportTheTotals) {
  const Plan p = smallPlan();
  InspectOptions opt;
  opt.planPath = "small.glmplan";
  const uint64_t r0 = 512 + 512 + 3000 + 6000 + 2000;
  const uint64_t r1 = r0 + 100;

  nlohmann::json j = nlohmann::json::parse(inspectJson(p, opt));
  EXPECT_EQ(j["num_ranks"], 2);
  EXPECT_EQ(j["summary"]["bytes_per_token_per_rank"][0], r0);
  EXPECT_EQ(j["summary"]["bytes_per_token_per_rank"][1], r1);
  EXPECT_EQ(j["summary"]["bytes_per_token_total"], r0 + r1);
  EXPECT_EQ(j["summary"]["slowest_rank"], 1);
  EXPECT_NEAR(j["summary"]["predicted_step_us"].get<double>(),
              double(r1) / 273.0 / 1000.0, 1e-9);
  EXPECT_NEAR(j["summary"]["predicted_tok_per_s"].get<double>(),
              273e9 / double(r1), 1e-3);
  EXPECT_EQ(j["ranks"][1]["memory"]["weights"], 14100);
  EXPECT_EQ(j["ranks"][1]["layers"][2]["bytes_per_token"], 6000);
  EXPECT_EQ(j["ranks"][1]["layers"][2]["kind"], "moe");
  EXPECT_EQ(j["kernels"].size(), 3u);

  // Filters: one rank, one layer; another bandwidth scales the times.
  opt.rank = 1;
  opt.layer = 1;
  opt.bandwidthGBps = 243;
  j = nlohmann::json::parse(inspectJson(p, opt));
  ASSERT_EQ(j["ranks"].size(), 1u);
  ASSERT_EQ(j["ranks"][0]["layers"].size(), 1u);
  EXPECT_NEAR(j["ranks"][0]["layers"][0]["predicted_us"].get<double>(),
              6000.0 / 243.0 / 1000.0, 1e-9);

  opt = InspectOptions{};
  const std::string text = inspectText(p, opt);
  EXPECT_NE(text.find("total: " + std::to_string(r0 + r1) +
                      " bytes/token over 2 rank(s)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1: " + std::to_string(r1) + " bytes/token"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tok/s on 2 Spark(s) at 273 GB/s"), std::string::npos);
  EXPECT_NE(text.find("glm_expert_gemv_trellis_k34_mcg_e4m3_b1_svf16_t256"),
            std::string::npos);
  EXPECT_NE(text.find("memory: weights"), std::string::npos);
  opt.rank = 5;
  EXPECT_NE(errorOf([&] { inspectText(p, opt); }).find("out of range"),
            std::string::npos);
}

// A step of B rows gives B tokens: the batched graph's modelled tok/s is
// over its rows, beside one sequence's.
TEST(PlanInspect, ABatchedGraphCountsTheTokensOfItsRows) {
  const Plan p = smallPlan();
  InspectOptions opt;
  opt.planPath = "small.glmplan";
  opt.graph = "decode.8";
  const nlohmann::json j = nlohmann::json::parse(inspectJson(p, opt));
  const nlohmann::json &s = j["summary"];
  EXPECT_EQ(s["modelled_rows"], 8);
  EXPECT_EQ(s["modelled"][0]["rows"], 8);
  ASSERT_GT(s["modelled_step_us"].get<double>(), 0);
  EXPECT_NEAR(s["modelled_tok_per_s"].get<double>(),
              1e6 / s["modelled_step_us"].get<double>(), 1e-6);
  EXPECT_NEAR(s["modelled_rows_tok_per_s"].get<double>(),
              8 * s["modelled_tok_per_s"].get<double>(), 1e-6);
  const std::string text = inspectText(p, opt);
  EXPECT_NE(text.find("modelled decode.8 at context"), std::string::npos)
      << text;
  EXPECT_NE(text.find(" tok/s over its 8 rows, "), std::string::npos) << text;
  EXPECT_NE(text.find(" a sequence ("), std::string::npos) << text;

  opt.graph.clear(); // the smallest decode graph: one row, no "over"
  const std::string one = inspectText(p, opt);
  EXPECT_NE(one.find("modelled decode.1 at context"), std::string::npos);
  EXPECT_EQ(one.find("over its"), std::string::npos) << one;
  EXPECT_EQ(nlohmann::json::parse(inspectJson(p, opt))["summary"]
                ["modelled_rows"],
            1);
}

TEST(PlanInspect, DotIsAValidGraphAndHtmlIsSelfContained) {
  const Plan p = smallPlan();
  InspectOptions opt;
  const std::string dot = inspectDot(p, opt);
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("op1 -> op2"), std::string::npos) << dot; // norm -> mlp
  EXPECT_NE(dot.find("cluster_1"), std::string::npos);
  const std::string html = inspectHtml(p, opt, "");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_NE(html.find("l1.experts"), std::string::npos); // graph as a table
  // The layers' cost strip, one collapsible table per layer with the ops
  // each op reads from (the dot graph's edges), and the ranks side by side
  // with rank 1's heavier layer marked.
  EXPECT_NE(html.find("<div class=strip>"), std::string::npos);
  EXPECT_NE(html.find("<details><summary>layer 1 (moe)"), std::string::npos);
  EXPECT_NE(html.find("<th>reads from</th>"), std::string::npos);
  EXPECT_NE(html.find("Ranks side by side"), std::string::npos);
  EXPECT_NE(html.find("class=\"num diff\""), std::string::npos) << html;
  // The dot graph's edge op1 -> op2: l0.mlp reads from l0.norm.
  EXPECT_NE(html.find("</td><td>l0.norm</td></tr>"), std::string::npos);

  if (std::system("command -v dot > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "Graphviz dot not installed";
  const std::string in = tmpPath("glm_plan_test.dot");
  const std::string out = tmpPath("glm_plan_test.svg");
  {
    std::ofstream f(in);
    f << dot;
  }
  ASSERT_EQ(std::system(("dot -Tsvg " + in + " -o " + out).c_str()), 0)
      << dot;
  std::ifstream f(out);
  std::string svg((std::istreambuf_iterator<char>(f)),
                  std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(inspectHtml(p, opt, svg).find("<svg"), std::string::npos);
}
