//===- codegen_test.cpp - kernel specs, sources, names, NVRTC builds ------===//
//
// Every kernel family with representative template arguments compiles with
// NVRTC for sm_90 and sm_121 (no GPU needed); sources are deterministic and
// names encode the parameters; identical specs dedupe to one plan kernel.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

using glm::codegen::KernelSpec;
namespace cg = glm::codegen;

namespace {

const std::vector<std::string> kArchs = {"sm_90", "sm_121"};

/// Representative instances of every family (the shapes GLM-5.3, Flash and
/// the tiny test packs use).
std::vector<KernelSpec> representativeSpecs() {
  std::vector<KernelSpec> s;
  auto add = [&](std::string f, cg::KeyValues a) {
    s.push_back({std::move(f), std::move(a), kArchs});
  };
  add("expert_gemv_trellis", {{"widths", "234"}, {"codebook", "mcg"},
                              {"e4m3", "1"}, {"batch", "1"}, {"sv", "f16"},
                              {"threads", "256"}});
  add("expert_gemv_trellis", {{"widths", "3"}, {"codebook", "mul1"},
                              {"e4m3", "0"}, {"batch", "8"}, {"sv", "bf16"},
                              {"threads", "128"}});
  add("expert_gemv_trellis", {{"widths", "18"}, {"codebook", "3inst"},
                              {"e4m3", "0"}, {"batch", "4"}, {"sv", "f32"},
                              {"threads", "256"}});
  add("moe_trellis", {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"},
                      {"batch", "1"}, {"sv", "f16"}, {"stage", "gu"},
                      {"pipe", "4"}, {"minblocks", "4"},
                      {"threads", "128"}});
  add("moe_trellis", {{"widths", "15678"}, {"codebook", "mul1"},
                      {"e4m3", "0"}, {"batch", "8"}, {"sv", "bf16"},
                      {"stage", "down"}, {"pipe", "0"}, {"minblocks", "0"},
                      {"threads", "128"}});
  // Fixed-point sums (templates/fixed_point.cuh): both modes per family.
  add("moe_trellis", {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"},
                      {"batch", "1"}, {"sv", "f32"}, {"stage", "down"},
                      {"pipe", "4"}, {"minblocks", "4"}, {"sum", "fixed"},
                      {"threads", "128"}});
  add("moe_trellis", {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"},
                      {"batch", "1"}, {"sv", "f32"}, {"stage", "down_persist"},
                      {"pipe", "4"}, {"minblocks", "4"}, {"sum", "fixed_out"},
                      {"threads", "128"}});
  add("dense_gemv", {{"format", "bf16"}, {"scale", "none"}, {"batch", "1"},
                     {"sum", "fixed"}, {"threads", "256"}});
  add("dense_gemv", {{"format", "fp8_row"}, {"scale", "f32"}, {"batch", "8"},
                     {"sum", "fixed_out"}, {"threads", "256"}});
  add("dense_trellis", {{"K", "4"}, {"codebook", "mcg"}, {"e4m3", "1"},
                        {"batch", "1"}, {"pipe", "2"}, {"minblocks", "4"},
                        {"sum", "fixed"}, {"threads", "128"}});
  add("dense_trellis", {{"K", "3"}, {"codebook", "mcg"}, {"e4m3", "0"},
                        {"batch", "8"}, {"pipe", "2"}, {"minblocks", "4"},
                        {"sum", "fixed_out"}, {"threads", "128"}});
  add("gemv_any", {{"sum", "fixed"}, {"threads", "256"}});
  add("gemv_any", {{"sum", "fixed_out"}, {"threads", "256"}});
  add("reduce_units", {{"sum", "fixed"}, {"threads", "256"}});
  add("reduce_units", {{"sum", "fixed_out"}, {"threads", "256"}});
  add("moe_reduce", {{"threads", "256"}});
  add("dense_gemv", {{"format", "bf16"}, {"scale", "none"}, {"batch", "1"},
                     {"threads", "256"}});
  add("dense_gemv", {{"format", "fp8_block"}, {"scale", "f32"},
                     {"batch", "8"}, {"threads", "256"}});
  add("dense_gemv", {{"format", "fp8_row"}, {"scale", "bf16"},
                     {"batch", "2"}, {"threads", "128"}});
  add("dense_gemv", {{"format", "mxfp8"}, {"scale", "none"}, {"batch", "1"},
                     {"threads", "256"}});
  add("dense_gemv_trellis", {{"K", "4"}, {"codebook", "mcg"}, {"e4m3", "1"},
                             {"batch", "1"}, {"threads", "256"}});
  add("dense_gemv_trellis", {{"K", "2"}, {"codebook", "mul1"},
                             {"e4m3", "0"}, {"batch", "8"},
                             {"threads", "128"}});
  add("dense_trellis", {{"K", "4"}, {"codebook", "mcg"}, {"e4m3", "1"},
                        {"batch", "1"}, {"pipe", "4"}, {"minblocks", "4"},
                        {"threads", "128"}});
  add("dense_trellis", {{"K", "2"}, {"codebook", "mul1"}, {"e4m3", "0"},
                        {"batch", "8"}, {"pipe", "0"}, {"minblocks", "0"},
                        {"threads", "256"}});
  add("dense_trellis", {{"K", "7"}, {"codebook", "3inst"}, {"e4m3", "1"},
                        {"batch", "5"}, {"pipe", "2"}, {"minblocks", "0"},
                        {"threads", "64"}});
  add("dense_gemv_f32", {{"out", "f64"}, {"threads", "256"}});
  add("hadamard128", {{"vt", "f16"}, {"threads", "256"}});
  add("rms_norm", {{"wt", "bf16"}, {"threads", "1024"}});
  add("rope", {{"rope_dim", "64"}});
  add("embed", {{"format", "fp8_row"}, {"threads", "256"}});
  add("embed", {{"format", "bf16"}, {"threads", "256"}});
  add("router", {{"experts", "256"}, {"topk", "8"}, {"threads", "256"}});
  add("mla_decode", {{"lora", "512"}, {"rope", "64"}, {"kv", "bf16"},
                     {"heads", "8"}, {"threads", "256"}});
  add("mla_decode", {{"lora", "64"}, {"rope", "16"}, {"kv", "e4m3"},
                     {"heads", "1"}, {"threads", "128"}});
  add("indexer_scores", {{"head_dim", "128"}, {"n_heads", "32"},
                         {"kt", "bf16"}, {"threads", "256"}});
  add("topk", {{"threads", "1024"}});
  add("argmax", {{"threads", "1024"}});
  add("gemm_trellis", {{"K", "4"}, {"codebook", "mcg"}, {"e4m3", "1"},
                       {"xt", "f16"}, {"bm", "128"}, {"threads", "256"}});
  add("gemm_trellis", {{"K", "3"}, {"codebook", "mul1"}, {"e4m3", "0"},
                       {"xt", "f32"}, {"bm", "64"}, {"threads", "256"}});
  add("gemm_trellis", {{"K", "8"}, {"codebook", "3inst"}, {"e4m3", "1"},
                       {"xt", "f16"}, {"bm", "128"}, {"threads", "256"}});
  add("gemm_trellis_grouped", {{"widths", "234"}, {"codebook", "mcg"},
                               {"e4m3", "1"}, {"xt", "f16"}, {"bm", "64"},
                               {"threads", "128"}});
  add("gemm_trellis_grouped", {{"widths", "18"}, {"codebook", "mul1"},
                               {"e4m3", "0"}, {"xt", "f32"}, {"bm", "128"},
                               {"threads", "256"}});
  // 96 rows an item (a 2048-token chunk's experts): 128 threads.
  add("gemm_trellis_grouped", {{"widths", "234"}, {"codebook", "mcg"},
                               {"e4m3", "1"}, {"xt", "f16"}, {"bm", "96"},
                               {"halves", "16"}, {"threads", "128"}});
  // The MoE prefill's down: an expert row block's 16 halves in one block.
  add("gemm_trellis_grouped", {{"widths", "234"}, {"codebook", "mcg"},
                               {"e4m3", "1"}, {"xt", "f16"}, {"bm", "128"},
                               {"halves", "16"}, {"threads", "256"}});
  return s;
}

/// Every gemm_dense instance (format x bm x threads), the FP8 scales in
/// turn as f32, bf16 and f16.
std::vector<KernelSpec> gemmDenseSpecs() {
  std::vector<KernelSpec> s;
  const char *formats[][2] = {{"bf16", "none"},
                              {"fp8_block", "f32"},
                              {"fp8_row", "bf16"},
                              {"mxfp8", "none"}};
  int i = 0;
  for (const auto &fs : formats)
    for (const char *bm : {"64", "128"})
      for (const char *threads : {"128", "256"}) {
        std::string sc = fs[1];
        if (sc != "none" && (i++ % 3) == 2)
          sc = "f16";
        s.push_back({"gemm_dense",
                     {{"format", fs[0]},
                      {"scale", sc},
                      {"bm", bm},
                      {"threads", threads}},
                     kArchs});
      }
  return s;
}

/// The CUDA executor's helper families at the block sizes it launches.
std::vector<KernelSpec> helperSpecs() {
  std::vector<KernelSpec> s;
  auto add = [&](std::string f, cg::KeyValues a) {
    s.push_back({std::move(f), std::move(a), kArchs});
  };
  // (rope_rows: max(32, dr/2) rounded up to 32; route: E rounded up to 32;
  // mla_qabs: GLM_MLA_QABS_THREADS, 32..256).
  for (const char *f :
       {"embed_tokens",  "dsa_iota",       "indexer_scores_ctx", "mla_attn",
        "transpose",     "gemv_any",       "reduce_units",       "swiglu",
        "hf_expert_act", "hf_expert_down", "exl3_expert_in",     "moe_exl3_in",
        "onehot",        "vocab_gather",   "sum_parts",          "fill_random",
        "fill_f32",      "kv_store",       "index_key_store",    "mla_out",
        "fixed_to_f32",  "mla_scores",     "mla_values"})
    add(f, {{"threads", "256"}});
  for (const char *f :
       {"rms_norm_rows", "add_rms_norm", "dsa_select", "mla_core",
        "mla_softmax"})
    add(f, {{"threads", "1024"}});
  add("rope_rows", {{"threads", "32"}});
  add("route", {{"threads", "256"}});
  add("route", {{"threads", "1024"}});
  add("mla_qabs", {{"threads", "64"}});
  add("mla_qabs", {{"threads", "256"}});
  // GLM-5.3-Flash decode: mHC at S = 4, KDA at dk = dv = 128 (H200: 256
  // threads x 64 rows; Sparks: 512 x 32, fewer registers per thread), the
  // k-pool store, the pooled indexer scores and selection.
  add("mhc_mix", {{"streams", "4"}, {"threads", "256"}});
  add("mhc_post", {{"streams", "4"}, {"threads", "256"}});
  add("mhc_head", {{"streams", "4"}, {"threads", "256"}});
  add("kda_decode", {{"rows", "64"}, {"threads", "256"}});
  add("kda_decode", {{"rows", "32"}, {"threads", "512"}});
  add("kpool_store", {{"threads", "128"}});
  // KDA prefill: the per-token prep, the chunked delta rule at both chunk
  // sizes and both MMA precisions.
  add("kda_prep", {{"threads", "256"}});
  add("kda_chunk", {{"chunk", "16"}, {"mma", "tf32"}, {"threads", "256"}});
  add("kda_chunk", {{"chunk", "32"}, {"mma", "tf32"}, {"threads", "256"}});
  add("kda_chunk", {{"chunk", "32"}, {"mma", "tf32x3"}, {"threads", "256"}});
  add("kda_chunk", {{"chunk", "16"}, {"mma", "tf32x3"}, {"threads", "128"}});
  add("kda_chunk", {{"chunk", "32"},
                    {"mma", "tf32"},
                    {"vsplit", "2"},
                    {"threads", "128"}});
  add("kda_gnorm", {{"threads", "256"}});
  add("indexer_scores_ctx", {{"pool", "4"}, {"threads", "256"}});
  add("dsa_select", {{"pool", "4"}, {"threads", "1024"}});
  // The prefill indexer scores on tensor cores.
  add("indexer_scores_mma", {{"threads", "256"}});
  // MoE prefill glue (moe_group.cuh): at the block sizes of the chain.
  add("moe_group", {{"threads", "512"}});
  add("moe_gather", {{"threads", "256"}});
  add("moe_act", {{"threads", "512"}});
  add("moe_combine", {{"threads", "256"}});
  // Prefill attention on tensor cores: GLM-5.3's 64 heads (kvr 512), 8 heads
  // a rank (8 Sparks), the tiny models' kvr 32 and 48.
  add("mla_prefill", {{"vt", "32"}, {"threads", "256"}});
  add("mla_prefill", {{"vt", "32"}, {"threads", "64"}});
  add("mla_prefill", {{"vt", "2"}, {"threads", "64"}});
  add("mla_prefill", {{"vt", "3"}, {"threads", "128"}});
  // Reading mla_rows16's fp16 rows (f32 cache; bf16/e4m3 below).
  add("mla_prefill", {{"keys", "rows16"}, {"vt", "32"}, {"threads", "256"}});
  add("mla_prefill", {{"keys", "rows16"}, {"vt", "2"}, {"threads", "64"}});
  add("mla_rows16", {{"threads", "256"}});
  // Its per-head projections over kv_b's stored forms.
  for (const char *w : {"kn", "nk"})
    for (const auto &[dt, sk] :
         std::vector<std::pair<const char *, const char *>>{
             {"e4m3", "block"}, {"e4m3", "row"}, {"e4m3", "mx"},
             {"bf16", "none"}, {"f32", "none"}, {"f16", "none"}})
      add("mla_proj", {{"w", w}, {"dt", dt}, {"sk", sk}, {"threads", "128"}});
  // The KV cache's bf16 and e4m3 storage forms (kv_cache.cuh) of every
  // family that writes or reads it (--kv-dtype bf16 | fp8).
  for (const char *kv : {"bf16", "e4m3"}) {
    for (const char *f : {"kv_store", "index_key_store", "mla_attn"})
      add(f, {{"kv", kv}, {"threads", "256"}});
    add("kpool_store", {{"kv", kv}, {"threads", "128"}});
    add("mla_core", {{"kv", kv}, {"threads", "1024"}});
    add("mla_scores", {{"kv", kv}, {"threads", "256"}});
    add("mla_values", {{"kv", kv}, {"threads", "256"}});
    add("mla_prefill", {{"kv", kv}, {"vt", "32"}, {"threads", "256"}});
    add("mla_rows16", {{"kv", kv}, {"threads", "256"}});
    add("indexer_scores_ctx", {{"kv", kv}, {"threads", "256"}});
    add("indexer_scores_ctx", {{"pool", "4"}, {"kv", kv}, {"threads", "256"}});
    add("indexer_scores_mma", {{"kv", kv}, {"threads", "256"}});
  }
  return s;
}

/// Every family's representative specs.
std::vector<KernelSpec> allSpecs() {
  std::vector<KernelSpec> s = representativeSpecs(), h = helperSpecs(),
                          g = gemmDenseSpecs();
  s.insert(s.end(), h.begin(), h.end());
  s.insert(s.end(), g.begin(), g.end());
  return s;
}

} // namespace

TEST(Codegen, EveryFamilyHasATemplateAndAKernelAbi) {
  const auto &templates = cg::embeddedTemplates();
  ASSERT_TRUE(templates.count("glm_common.cuh"));
  std::set<std::string> covered;
  for (const KernelSpec &s : allSpecs())
    covered.insert(s.family);
  for (const cg::FamilyInfo &f : cg::families()) {
    EXPECT_TRUE(templates.count(f.header)) << f.header;
    // The ABI (parameter names) is read from the template's ARGS macro.
    EXPECT_GE(f.kernelParams.size(), 3u) << f.family;
    EXPECT_TRUE(covered.count(f.family)) << f.family << " has no test spec";
  }
  const cg::FamilyInfo &e = cg::familyInfo("expert_gemv_trellis");
  EXPECT_EQ(e.kernelParams.front(), "xh");
  EXPECT_EQ(e.kernelParams.back(), "swiglu_limit");
}

TEST(Codegen, NamesEncodeParametersAndSourceIsDeterministic) {
  KernelSpec s{"expert_gemv_trellis",
               {{"widths", "3"}, {"codebook", "mcg"}, {"e4m3", "1"},
                {"batch", "1"}, {"sv", "f16"}, {"threads", "256"}},
               kArchs};
  EXPECT_EQ(cg::kernelName(s),
            "glm_expert_gemv_trellis_k3_mcg_e4m3_b1_svf16_t256");
  s.args["e4m3"] = "0";
  s.args["widths"] = "234";
  EXPECT_EQ(cg::kernelName(s),
            "glm_expert_gemv_trellis_k234_mcg_noe4m3_b1_svf16_t256");
  const std::string a = cg::generateSource(s), b = cg::generateSource(s);
  EXPECT_EQ(a, b);
  // Widths {2,3,4} become the mask 0b11100 = 28 in the instantiation.
  EXPECT_NE(a.find("glm::expertGemvTrellis<28, 1, false, 1, 1, 256>"),
            std::string::npos)
      << a;
  EXPECT_NE(a.find("extern \"C\" __global__ void __launch_bounds__(256)"),
            std::string::npos);
  EXPECT_NE(a.find("#include \"expert_gemv_trellis.cuh\""), std::string::npos);

  // Every representative spec has a distinct name.
  std::set<std::string> names;
  for (const KernelSpec &r : allSpecs())
    EXPECT_TRUE(names.insert(cg::kernelName(r)).second) << cg::kernelName(r);
}

TEST(Codegen, RejectsBadSpecsWithWhatToFix) {
  auto msg = [](KernelSpec s) {
    try {
      cg::kernelName(s);
    } catch (const glm::rt::Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({"no_such", {}, {}}).find("known: expert_gemv_trellis"),
            std::string::npos);
  EXPECT_NE(msg({"rope", {}, {}}).find("needs template argument 'rope_dim'"),
            std::string::npos);
  EXPECT_NE(msg({"rope", {{"rope_dim", "63"}}, {}}).find("allowed: "),
            std::string::npos);
  EXPECT_NE(msg({"rope", {{"rope_dim", "64"}, {"x", "1"}}, {}})
                .find("no template parameter 'x'"),
            std::string::npos);
  EXPECT_NE(msg({"expert_gemv_trellis",
                 {{"widths", "32"}, {"codebook", "mcg"}, {"e4m3", "1"},
                  {"batch", "1"}, {"sv", "f16"}, {"threads", "256"}},
                 {}})
                .find("ascending digits"),
            std::string::npos);
  EXPECT_NE(msg({"dense_gemv",
                 {{"format", "fp8_row"}, {"scale", "none"}, {"batch", "1"},
                  {"threads", "256"}},
                 {}})
                .find("needs a scale dtype"),
            std::string::npos);
  EXPECT_NE(msg({"gemm_trellis_grouped",
                 {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"},
                  {"xt", "f16"}, {"bm", "96"}, {"threads", "256"}},
                 {}})
                .find("bm 96 takes 128 threads"),
            std::string::npos);
  EXPECT_NE(msg({"rope", {{"rope_dim", "64"}}, {"sm_75"}}).find("sm_121"),
            std::string::npos);
}

TEST(Codegen, IdenticalSpecsShareOneKernel) {
  glm::plan::Plan plan;
  KernelSpec s{"rms_norm", {{"wt", "bf16"}, {"threads", "256"}}, kArchs};
  // 78 layers ask for the same norm: one kernel.
  for (int layer = 0; layer < 78; ++layer)
    EXPECT_EQ(glm::plan::addKernel(plan, cg::buildKernel(s, false)), 0);
  s.args["wt"] = "f32";
  EXPECT_EQ(glm::plan::addKernel(plan, cg::buildKernel(s, false)), 1);
  EXPECT_EQ(plan.kernels.size(), 2u);
  // Same spec, same key; another arch list, another key.
  KernelSpec t = s;
  EXPECT_EQ(cg::buildKernel(t, false).cacheKey,
            cg::buildKernel(s, false).cacheKey);
  t.archs = {"sm_90"};
  EXPECT_NE(cg::buildKernel(t, false).cacheKey,
            cg::buildKernel(s, false).cacheKey);
  EXPECT_EQ(cg::buildKernel(s, false).launch.blockX, 256u);
}

TEST(Codegen, CacheKeyCoversSourceOptionsArchAndNvrtc) {
  const std::vector<std::string> o = {"--std=c++17"};
  const std::string k = cg::cacheKey("src", o, "sm_90", "13.0");
  EXPECT_EQ(k.size(), 16u);
  EXPECT_EQ(k, cg::cacheKey("src", o, "sm_90", "13.0"));
  EXPECT_NE(k, cg::cacheKey("src2", o, "sm_90", "13.0"));
  EXPECT_NE(k, cg::cacheKey("src", {"-G"}, "sm_90", "13.0"));
  EXPECT_NE(k, cg::cacheKey("src", o, "sm_121", "13.0"));
  EXPECT_NE(k, cg::cacheKey("src", o, "sm_90", "13.1"));
}

// --kernel-binaries ptx: NVRTC for the virtual arch, PTX only (no ptxas),
// which still names the real target for the driver's JIT.
TEST(Codegen, PtxOnlyCompileSkipsCubin) {
  if (!cg::nvrtcAvailable())
    GTEST_SKIP() << "built without NVRTC";
  KernelSpec s = representativeSpecs().front();
  s.archs = {"sm_121"};
  const glm::plan::KernelDef k = cg::buildKernel(s, false);
  cg::CompileOptions opt;
  opt.cubin = false;
  for (const char *arch : {"sm_121", "sm_90"}) {
    const cg::CompiledKernel c =
        cg::compileWithNvrtc(k.source, k.name, arch, opt);
    EXPECT_TRUE(c.cubin.empty()) << arch;
    EXPECT_NE(c.ptx.find(".entry " + k.name), std::string::npos) << arch;
    EXPECT_NE(c.ptx.find(std::string(".target ") + arch), std::string::npos)
        << arch;
  }
}

// A runtime reuses a plan kernel's binaries only when it was built by the
// same templates, options and NVRTC (its recorded cache key).
TEST(Codegen, BuiltByThisCodegenChecksTheRecordedKey) {
  KernelSpec s = representativeSpecs().front();
  s.archs = {"sm_121", "sm_90"};
  glm::plan::KernelDef k = cg::buildKernel(s, false);
  for (const std::string &a : s.archs)
    k.binaries.push_back({a, "// ptx", {}});
  EXPECT_TRUE(cg::builtByThisCodegen(k));
  glm::plan::KernelDef other = k;
  other.cacheKey = "0123456789abcdef"; // another glmc's templates
  EXPECT_FALSE(cg::builtByThisCodegen(other));
  other = k;
  other.nvrtcOptions.push_back("-G");
  EXPECT_FALSE(cg::builtByThisCodegen(other));
  other = k;
  other.binaries.pop_back(); // binaries for other archs than the key's
  EXPECT_FALSE(cg::builtByThisCodegen(other));
}

TEST(Codegen, EveryFamilyCompilesWithNvrtcForSm90AndSm121) {
  if (!cg::nvrtcAvailable())
    GTEST_SKIP() << "built without NVRTC";
  for (const KernelSpec &s : representativeSpecs()) {
    glm::plan::KernelDef k;
    ASSERT_NO_THROW(k = cg::buildKernel(s, true)) << cg::kernelName(s);
    ASSERT_EQ(k.binaries.size(), 2u);
    for (const glm::plan::KernelBinary &b : k.binaries) {
      EXPECT_NE(b.ptx.find(".entry " + k.name), std::string::npos)
          << k.name << " " << b.arch;
      EXPECT_NE(b.ptx.find(".target " + b.arch), std::string::npos)
          << k.name << " " << b.arch;
      ASSERT_GE(b.cubin.size(), 4u);
      EXPECT_EQ(b.cubin[0], 0x7F); // ELF
      EXPECT_EQ(b.cubin[1], 'E');
    }
  }
}

// The helper families are small: built on every core (NVRTC is reentrant).
TEST(Codegen, HelperFamiliesCompileWithNvrtcForSm90AndSm121) {
  if (!cg::nvrtcAvailable())
    GTEST_SKIP() << "built without NVRTC";
  const std::vector<KernelSpec> specs = helperSpecs();
  std::vector<glm::plan::KernelDef> built(specs.size());
  std::vector<std::string> errors(specs.size());
  glm::rt::parallelFor(int64_t(specs.size()), 1, 0,
                       [&](int64_t b, int64_t e, int) {
                         for (int64_t i = b; i < e; ++i) {
                           try {
                             built[i] = cg::buildKernel(specs[i], true);
                           } catch (const std::exception &ex) {
                             errors[i] = ex.what();
                           }
                         }
                       });
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(errors[i].empty()) << errors[i];
    const glm::plan::KernelDef &k = built[i];
    ASSERT_EQ(k.binaries.size(), 2u) << k.name;
    for (const glm::plan::KernelBinary &b : k.binaries) {
      EXPECT_NE(b.ptx.find(".entry " + k.name), std::string::npos)
          << k.name << " " << b.arch;
      ASSERT_GE(b.cubin.size(), 4u) << k.name << " " << b.arch;
      EXPECT_EQ(b.cubin[0], 0x7F) << k.name << " " << b.arch; // ELF
    }
  }
}

// gemm_dense: every (format, bm, threads) instance builds for both archs
// (in parallel), keeps dense_gemv's runtime parameters (then its row
// window) and is named after its template arguments.
TEST(Codegen, GemmDenseEveryInstanceCompilesWithDenseGemvsAbi) {
  std::vector<std::string> params = cg::familyInfo("dense_gemv").kernelParams;
  params.push_back("window");
  EXPECT_EQ(cg::familyInfo("gemm_dense").kernelParams, params);
  EXPECT_EQ(cg::kernelName({"gemm_dense",
                            {{"format", "mxfp8"},
                             {"scale", "none"},
                             {"bm", "128"},
                             {"threads", "256"}},
                            kArchs}),
            "glm_gemm_dense_mxfp8_snone_m128_t256");
  // BF16 weights (bf16 x planes, no scale), named as dense_gemv's bf16.
  EXPECT_EQ(cg::kernelName({"gemm_dense",
                            {{"format", "bf16"},
                             {"scale", "none"},
                             {"bm", "64"},
                             {"threads", "256"}},
                            kArchs}),
            "glm_gemm_dense_bf16_snone_m64_t256");
  EXPECT_THROW(cg::kernelName({"gemm_dense",
                               {{"format", "bf16"},
                                {"scale", "f32"},
                                {"bm", "64"},
                                {"threads", "128"}},
                               kArchs}),
               glm::rt::Error);
  EXPECT_THROW(cg::kernelName({"gemm_dense",
                               {{"format", "fp8_row"},
                                {"scale", "none"},
                                {"bm", "64"},
                                {"threads", "128"}},
                               kArchs}),
               glm::rt::Error);
  if (!cg::nvrtcAvailable())
    GTEST_SKIP() << "built without NVRTC";
  const std::vector<KernelSpec> specs = gemmDenseSpecs();
  ASSERT_EQ(specs.size(), 16u);
  std::vector<glm::plan::KernelDef> built(specs.size());
  std::vector<std::string> errors(specs.size());
  glm::rt::parallelFor(int64_t(specs.size()), 1, 0,
                       [&](int64_t b, int64_t e, int) {
                         for (int64_t i = b; i < e; ++i) {
                           try {
                             built[i] = cg::buildKernel(specs[i], true);
                           } catch (const std::exception &ex) {
                             errors[i] = ex.what();
                           }
                         }
                       });
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(errors[i].empty()) << errors[i];
    const glm::plan::KernelDef &k = built[i];
    ASSERT_EQ(k.binaries.size(), 2u) << k.name;
    for (const glm::plan::KernelBinary &b : k.binaries) {
      EXPECT_NE(b.ptx.find(".entry " + k.name), std::string::npos)
          << k.name << " " << b.arch;
      // mma.sync and cp.async only: no wgmma (the Sparks lack it); bf16
      // operands for BF16 weights, fp16 for E4M3.
      const bool bf16 = k.templateArgs.at("format") == "bf16";
      EXPECT_NE(b.ptx.find(bf16 ? "mma.sync.aligned.m16n8k16.row.col.f32."
                                  "bf16.bf16.f32"
                                : "mma.sync.aligned.m16n8k16.row.col.f32."
                                  "f16.f16.f32"),
                std::string::npos)
          << k.name;
      EXPECT_EQ(b.ptx.find("wgmma"), std::string::npos) << k.name;
      ASSERT_GE(b.cubin.size(), 4u) << k.name << " " << b.arch;
      EXPECT_EQ(b.cubin[0], 0x7F) << k.name << " " << b.arch; // ELF
    }
  }
}

// The executor's helper families keep the kernels' ABI (the executor and
// the compiler's plans launch them with these parameter lists) and are built
// with --fmad=false, which the plan records and the cache key covers: their
// twins round each product and sum separately.
TEST(Codegen, HelperFamiliesKeepTheirAbiAndCompileWithoutFmad) {
  const cg::FamilyInfo &n = cg::familyInfo("rms_norm_rows");
  EXPECT_EQ(n.kernelParams,
            (std::vector<std::string>{"x", "w", "y", "n", "eps", "xs", "ys"}));
  EXPECT_EQ(cg::familyInfo("mla_core").kernelParams.size(), 17u);
  EXPECT_EQ(cg::familyInfo("route").kernelParams.back(), "weightsAll");
  KernelSpec s{"mla_out", {{"threads", "256"}}, kArchs};
  const glm::plan::KernelDef k = cg::buildKernel(s, false);
  EXPECT_EQ(k.name, "glm_mla_out_t256");
  EXPECT_EQ(k.nvrtcOptions.back(), "--fmad=false");
  EXPECT_EQ(cg::nvrtcOptionsFor(k.source), k.nvrtcOptions);
  EXPECT_TRUE(cg::builtByThisCodegen([&] {
    glm::plan::KernelDef b = k;
    for (const std::string &a : s.archs)
      b.binaries.push_back({a, "// ptx", {}});
    return b;
  }()));
  // The other families keep the default (contracted multiply-adds).
  const glm::plan::KernelDef r = cg::buildKernel(
      {"rms_norm", {{"wt", "f32"}, {"threads", "256"}}, kArchs}, false);
  EXPECT_EQ(r.nvrtcOptions, cg::nvrtcOptions());
  if (!cg::nvrtcAvailable())
    return;
  // The option reaches NVRTC: the norm's fp64 sum of squares (ss += x*x)
  // would contract to fma.rn.f64 without it.
  const glm::plan::KernelDef nk =
      cg::buildKernel({"rms_norm_rows", {{"threads", "1024"}}, kArchs}, false);
  const cg::CompiledKernel c =
      cg::compileWithNvrtc(nk.source, nk.name, "sm_90");
  EXPECT_EQ(c.ptx.find("fma.rn"), std::string::npos);
}

TEST(Codegen, NvrtcFailureReportsLogOptionsAndSavesAReproducer) {
  if (!cg::nvrtcAvailable())
    GTEST_SKIP() << "built without NVRTC";
  const std::string dir =
      (std::filesystem::temp_directory_path() / "glm_codegen_repro").string();
  std::filesystem::remove_all(dir);
  cg::CompileOptions opt;
  opt.reproducerDir = dir;
  const std::string bad = "#include \"glm_common.cuh\"\n"
                          "extern \"C\" __global__ void broken() { int x = ; }\n";
  try {
    cg::compileWithNvrtc(bad, "broken_kernel", "sm_90", opt);
    FAIL() << "compiled a broken kernel";
  } catch (const glm::rt::Error &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("broken_kernel"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-architecture=sm_90"), std::string::npos) << m;
    EXPECT_NE(m.find("error"), std::string::npos) << m;
    EXPECT_NE(m.find("reproducer: "), std::string::npos) << m;
  }
  std::ifstream f(dir + "/broken_kernel.sm_90.cu");
  std::string saved((std::istreambuf_iterator<char>(f)),
                    std::istreambuf_iterator<char>());
  EXPECT_EQ(saved, bad);
  EXPECT_TRUE(std::filesystem::exists(dir + "/glm_common.cuh"));
}
