//===- engine_cuda_gpu_test.cpp - CUDA executor vs the CPU reference ------===//
//
// A random tiny GLM-5.3 (dense and MoE layers, full and shared indexer
// layers; a 12-token prompt so DSA selects sparsely past index_topk 8) runs
// through cuda::CudaForward and cpu::CpuForward step by step: logits within
// 1e-5 relative at every position and the same greedy token, for prompt
// and generated positions alike. One [gpu-case] line per step.
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

class EngineCudaGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(EngineCudaGpu, TinyModelMatchesCpuReference) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "glm_engine_cuda_gpu_test";
  fs::remove_all(dir);
  glmc::writeRandomHfModel("tiny", 7, dir.string(), /*indexOnly=*/false);
  auto pack = rt::Pack::open(dir.string());
  ASSERT_TRUE(pack->config().has_value());
  const rt::ModelConfig &cfg = *pack->config();
  auto src = rt::cpu::packWeightSource(*pack);
  auto w = rt::cpu::ModelWeights::load(cfg, *src);
  rt::cpu::CpuForward ref(w, rt::cpu::TpLayout::fromRule(cfg, 1));
  rt::cuda::CudaForward gpu(*w, /*maxContext=*/64);
  ensureContext();
  std::printf("[gpu-info] engine cuda on %s\n", gpu.deviceName().c_str());

  rt::cpu::Session s = ref.newSession();
  std::vector<int64_t> tokens = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45};
  const size_t prompt = tokens.size();
  double worst = 0;
  size_t tokenMismatch = 0;
  for (size_t i = 0; i < tokens.size() && i < prompt + 8; ++i) {
    std::vector<float> a = ref.step(s, tokens[i]);
    std::vector<float> b = gpu.step(tokens[i]);
    ASSERT_EQ(a.size(), b.size());
    Err e;
    for (size_t v = 0; v < a.size(); ++v)
      e.add(b[v], a[v]);
    report("engine_cuda tiny pos " + std::to_string(i), e, 1e-5);
    worst = std::max(worst, e.rel());
    int64_t ta = rt::cpu::argmax(a.data(), (int64_t)a.size());
    int64_t tb = rt::cpu::argmax(b.data(), (int64_t)b.size());
    tokenMismatch += ta != tb;
    if (i + 1 >= prompt)
      tokens.push_back(ta); // greedy continuation from the reference
  }
  reportExact("engine_cuda tiny greedy tokens", tokenMismatch, tokens.size());
  std::printf("[gpu-info] engine cuda worst relative logit diff %.3g over "
              "%zu positions\n",
              worst, tokens.size() - 1);
  EXPECT_EQ(gpu.length(), (int64_t)tokens.size() - 1);
  fs::remove_all(dir);
}

} // namespace
} // namespace glm::gputest
