//===- engine_cuda_gpu_test.cpp - CUDA executor vs the CPU reference ------===//
//
// Random tiny GLM-5.3 models (dense and MoE layers, full and shared indexer
// layers; 12-token prompts so DSA selects sparsely past index_topk 8) run
// through cuda::CudaForward on the pack's own bytes (HF BF16 and EXL3
// and exlr8 trellis layouts) and through cpu::CpuForward on the dequantized
// weights, once per expert path (moe_trellis and legacy
// expert_gemv_trellis, CudaOptions::expertKernel):
//  - batch 1, step by step: logits within 1e-4 relative, same greedy token;
//  - batched decode: 8 sequences stepped in rounds of 1..8 rows (each round
//    a different CUDA graph bucket), every row against its own CPU session;
//  - graphs off vs on: the same logits bit for bit.
// One [gpu-case] line per check.
//
//===----------------------------------------------------------------------===//
#include "gpu_test_util.h"

#include "compiler/packtools/packtools.h"
#include "runtime/cpu/forward.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/cpu/ops.h"
#include "runtime/cuda/executor.h"
#include "runtime/formats/pack.h"

#include <filesystem>

namespace glm::gputest {
namespace {

namespace fs = std::filesystem;
constexpr double kTol = 1e-4;

class EngineCudaGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// The tiny model as an HF pack in `root`/hf, quantized to `layout` ("hf",
/// "exl3" or "exlr8") in `root`/LAYOUT. Returns the pack directory.
std::string tinyPack(const fs::path &root, const std::string &layout) {
  const fs::path hf = root / "hf";
  if (!fs::exists(hf / "config.json"))
    glmc::writeRandomHfModel("tiny", 7, hf.string(), /*indexOnly=*/false);
  if (layout == "hf")
    return hf.string();
  const fs::path q = root / layout;
  if (!fs::exists(q / "config.json")) {
    auto src = rt::Pack::open(hf.string());
    glmc::QuantizeOptions opt;
    if (layout == "exl3")
      glmc::quantizeToExl3(*src->config(), src.get(), q.string(), opt);
    else
      glmc::quantizeToExlr8(*src->config(), src.get(), q.string(), opt);
  }
  return q.string();
}

/// Opens a test pack (exlr8: its mixed-width manifest).
std::unique_ptr<rt::Pack> openPack(const std::string &dir) {
  rt::PackOpenOptions o;
  if (rt::Pack::detect(dir) == rt::PackLayout::Exlr8)
    o.manifest = "mixed";
  return rt::Pack::open(dir, o);
}

/// The expert path the executor must report for `layout`.
std::string expectedPath(const std::string &layout, const std::string &kernel) {
  return layout == "hf" ? "none" : kernel;
}

struct Reference {
  std::unique_ptr<rt::Pack> pack;
  std::shared_ptr<const rt::cpu::ModelWeights> w;
  std::unique_ptr<rt::cpu::CpuForward> fwd;
  explicit Reference(const std::string &dir) {
    pack = openPack(dir);
    auto src = rt::cpu::packWeightSource(*pack);
    w = rt::cpu::ModelWeights::load(*pack->config(), *src);
    fwd = std::make_unique<rt::cpu::CpuForward>(
        w, rt::cpu::TpLayout::fromRule(*pack->config(), 1));
  }
};

double compare(const std::string &name, const std::vector<float> &got,
               const std::vector<float> &want, size_t &tokenMismatch) {
  EXPECT_EQ(got.size(), want.size());
  Err e;
  for (size_t v = 0; v < want.size() && v < got.size(); ++v)
    e.add(got[v], want[v]);
  report(name, e, kTol);
  tokenMismatch += rt::cpu::argmax(got.data(), (int64_t)got.size()) !=
                   rt::cpu::argmax(want.data(), (int64_t)want.size());
  return e.rel();
}

void batchOneMatchesCpu(const std::string &layoutName, const std::string &dir,
                        const std::string &kernel) {
  Reference ref(dir);
  rt::cuda::CudaOptions o;
  o.maxContext = 64;
  o.expertKernel = kernel;
  rt::cuda::CudaForward gpu(*ref.pack, ref.fwd->tp(), o);
  ensureContext();
  const std::string layout = layoutName + " " + kernel;
  EXPECT_EQ(gpu.expertKernelUsed(), expectedPath(layoutName, kernel));
  std::printf("[gpu-info] engine cuda %s on %s (experts: %s)\n",
              layout.c_str(), gpu.deviceName().c_str(),
              gpu.expertKernelUsed().c_str());
  rt::cpu::Session s = ref.fwd->newSession();
  std::vector<int64_t> tokens = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45};
  const size_t prompt = tokens.size();
  double worst = 0;
  size_t mismatch = 0;
  for (size_t i = 0; i < tokens.size() && i < prompt + 8; ++i) {
    std::vector<float> a = ref.fwd->step(s, tokens[i]);
    std::vector<float> b = gpu.step(tokens[i]);
    worst = std::max(
        worst, compare("engine_cuda " + layout + " pos " + std::to_string(i), b,
                       a, mismatch));
    if (i + 1 >= prompt)
      tokens.push_back(rt::cpu::argmax(a.data(), (int64_t)a.size()));
  }
  reportExact("engine_cuda " + layout + " greedy tokens", mismatch,
              tokens.size());
  std::printf("[gpu-info] engine cuda %s worst relative logit diff %.3g over "
              "%zu positions\n",
              layout.c_str(), worst, tokens.size() - 1);
  EXPECT_EQ(gpu.length(), (int64_t)tokens.size() - 1);
}

/// 8 sequences with different prompts, stepped in rounds of B = 1..8 rows
/// (slots rotate so every sequence advances), each row vs its CPU session.
void batchesMatchCpu(const std::string &layoutName, const std::string &dir,
                     bool graphs, const std::string &kernel) {
  Reference ref(dir);
  rt::cuda::CudaOptions o;
  o.maxContext = 64;
  o.maxBatch = 8;
  o.useGraphs = graphs;
  o.expertKernel = kernel;
  rt::cuda::CudaForward gpu(*ref.pack, ref.fwd->tp(), o);
  ensureContext();
  const std::string layout = layoutName + " " + kernel;
  EXPECT_EQ(gpu.expertKernelUsed(), expectedPath(layoutName, kernel));
  const int64_t V = ref.pack->config()->vocabSize;
  std::vector<rt::cpu::Session> sess;
  std::vector<int64_t> next(8);
  for (int s = 0; s < 8; ++s) {
    sess.push_back(ref.fwd->newSession());
    next[s] = (7 * s + 3) % V;
  }
  size_t mismatch = 0, rowsDone = 0;
  double worst = 0;
  int start = 0;
  for (int round = 0; round < 24; ++round) {
    const int B = round % 8 + 1;
    std::vector<int> seqs;
    std::vector<int64_t> toks;
    for (int i = 0; i < B; ++i) {
      seqs.push_back((start + i) % 8);
      toks.push_back(next[seqs.back()]);
    }
    start = (start + 3) % 8;
    std::vector<std::vector<float>> got = gpu.stepBatch(seqs, toks);
    for (int i = 0; i < B; ++i) {
      const int s = seqs[i];
      std::vector<float> want = ref.fwd->step(sess[s], toks[i]);
      worst = std::max(
          worst, compare("engine_cuda " + layout + (graphs ? "" : " nograph") +
                             " batch " + std::to_string(B) + " seq " +
                             std::to_string(s) + " pos " +
                             std::to_string(sess[s].length - 1),
                         got[i], want, mismatch));
      // Greedy continuation, varied per sequence.
      next[s] = (rt::cpu::argmax(want.data(), V) + s) % V;
      ++rowsDone;
      EXPECT_EQ(gpu.length(s), sess[s].length);
    }
  }
  reportExact("engine_cuda " + layout + " batched greedy tokens", mismatch,
              rowsDone);
  std::printf("[gpu-info] engine cuda %s batches 1..8 (%s): worst relative "
              "logit diff %.3g over %zu rows\n",
              layout.c_str(), graphs ? "graphs" : "stream", worst, rowsDone);
}

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / "glm_engine_cuda_gpu_test";
  fs::create_directories(dir);
  return dir;
}

/// Parameter: the expert path ("moe_trellis" or "legacy").
class EngineCudaPathGpu : public ::testing::TestWithParam<std::string> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(EngineCudaGpu, TinyHfMatchesCpuReference) {
  batchOneMatchesCpu("hf", tinyPack(scratch(), "hf"), "moe_trellis");
}

TEST_P(EngineCudaPathGpu, TinyExl3MatchesCpuReference) {
  batchOneMatchesCpu("exl3", tinyPack(scratch(), "exl3"), GetParam());
}

TEST_P(EngineCudaPathGpu, TinyExlr8MatchesCpuReference) {
  batchOneMatchesCpu("exlr8", tinyPack(scratch(), "exlr8"), GetParam());
}

TEST_F(EngineCudaGpu, BatchedDecodeMatchesPerSequence) {
  batchesMatchCpu("hf", tinyPack(scratch(), "hf"), /*graphs=*/true,
                  "moe_trellis");
}

TEST_P(EngineCudaPathGpu, BatchedDecodeMatchesPerSequence) {
  batchesMatchCpu("exl3", tinyPack(scratch(), "exl3"), /*graphs=*/true,
                  GetParam());
  batchesMatchCpu("exlr8", tinyPack(scratch(), "exlr8"), /*graphs=*/true,
                  GetParam());
}

TEST_P(EngineCudaPathGpu, GraphReplayEqualsStreamLaunches) {
  const std::string dir = tinyPack(scratch(), "exl3");
  auto pack = openPack(dir);
  auto tp = rt::cpu::TpLayout::fromRule(*pack->config(), 1);
  std::vector<std::vector<float>> out[2];
  for (int g = 0; g < 2; ++g) {
    rt::cuda::CudaOptions o;
    o.maxContext = 32;
    o.maxBatch = 3;
    o.useGraphs = g == 1;
    o.expertKernel = GetParam();
    rt::cuda::CudaForward gpu(*pack, tp, o);
    ensureContext();
    for (int step = 0; step < 10; ++step)
      for (auto &row :
           gpu.stepBatch({0, 1, 2}, {step + 1, 2 * step + 3, 3 * step + 5}))
        out[g].push_back(std::move(row));
  }
  size_t differ = 0;
  for (size_t i = 0; i < out[0].size(); ++i)
    differ += out[0][i] != out[1][i];
  reportExact("engine_cuda " + GetParam() +
                  " graph replay == stream launches (rows)",
              differ, out[0].size());
}

INSTANTIATE_TEST_SUITE_P(EngineCuda, EngineCudaPathGpu,
                         ::testing::Values(std::string("moe_trellis"),
                                           std::string("legacy")),
                         [](const ::testing::TestParamInfo<std::string> &i) {
                           return i.param;
                         });

} // namespace
} // namespace glm::gputest
