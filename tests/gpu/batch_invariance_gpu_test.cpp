//===- batch_invariance_gpu_test.cpp - batch rows = batch-1 rows, on CUDA -===//
//
// The CUDA side of tests/unit/compiler/batch_invariance_test.cpp: plans
// with decode buckets 1 and 4 and four KV slots (scripts/gpu-plans
// --prepare writes them as gpurun/plans/*-b4.glmplan; GLM_GPU_PLANS names
// another folder), run by the plan executor on the CUDA backend. Two
// sequences decoded alone through batch-1 steps, then together with two
// filler rows through batch-4 steps: each sequence's logits are the same
// bits (GLM-5.3 DSA golden, the tiny exlr8 pack's trellis experts,
// GLM-5.3-Flash's KDA state per slot). Skips when the plans are absent.
//
//===----------------------------------------------------------------------===//
#include "gpu_test_util.h"
#include "plans/plan.h"
#include "runtime/cuda/plan_backend.h"
#include "runtime/exec/plan_executor.h"

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;
using namespace glm;

namespace {

std::string plansDir() {
  const char *e = std::getenv("GLM_GPU_PLANS");
  return e && *e ? e : "gpurun/plans";
}

std::unique_ptr<rt::exec::PlanExecutor>
cudaExecutor(std::shared_ptr<plan::Plan> p, const std::string &pack) {
  std::vector<std::unique_ptr<rt::exec::Backend>> backends;
  backends.push_back(rt::cuda::makeCudaBackend(*p, gputest::device()));
  auto e = std::make_unique<rt::exec::PlanExecutor>(
      p, pack, std::vector<uint32_t>{0}, std::move(backends),
      rt::cuda::deviceCollectives(nullptr));
  e->load();
  return e;
}

void checkOnCuda(const std::string &name, const std::string &pack) {
  const fs::path path = fs::path(plansDir()) / (name + "-b4.glmplan");
  if (!fs::exists(path) || !fs::exists(pack))
    GTEST_SKIP() << path << " or " << pack
                 << " missing: run scripts/gpu-plans --prepare";
  gputest::ensureContext();
  auto p = std::make_shared<plan::Plan>(plan::readPlan(path.string()));
  const int64_t V = p->model.vocabSize;
  const std::vector<int32_t> a = {1, 5, 9, 2, 7, 3};
  const std::vector<int32_t> b = {12, 3, 3, 40, 7, 1, 9, 14};
  const size_t lead = b.size() - a.size();
  std::vector<std::vector<float>> wantA, wantB;
  {
    auto alone = cudaExecutor(p, pack);
    for (size_t i = 0; i < a.size(); ++i)
      wantA.push_back(alone->step({a[i]}, {int32_t(i)}, {0}));
    for (size_t i = 0; i < b.size(); ++i)
      wantB.push_back(alone->step({b[i]}, {int32_t(i)}, {1}));
  }
  auto together = cudaExecutor(p, pack);
  for (size_t i = 0; i < lead; ++i)
    together->step({b[i]}, {int32_t(i)}, {1});
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> rows = together->step(
        {a[i], b[lead + i], int32_t(7 + i), int32_t(20 + i)},
        {int32_t(i), int32_t(lead + i), int32_t(i), int32_t(i)}, {0, 1, 2, 3});
    ASSERT_EQ(rows.size(), size_t(4 * V));
    const bool sa = std::memcmp(rows.data(), wantA[i].data(), V * 4) == 0;
    const bool sb =
        std::memcmp(rows.data() + V, wantB[lead + i].data(), V * 4) == 0;
    EXPECT_TRUE(sa) << name << " sequence a, step " << i;
    EXPECT_TRUE(sb) << name << " sequence b, step " << i;
    same += sa + sb;
  }
  std::printf("[gpu-case] batch_invariance %s rows_equal=%zu/%zu %s\n",
              name.c_str(), same, 2 * a.size(),
              same == 2 * a.size() ? "PASS" : "FAIL");
}

} // namespace

TEST(BatchInvarianceGpu, GoldenDsaRowsAreTheBitsOfBatchOne) {
  if (!gputest::haveDevice())
    GTEST_SKIP() << "no CUDA device";
  checkOnCuda("golden-a", "tests/oracle/goldens/glm_dsa_a");
}

TEST(BatchInvarianceGpu, TrellisExpertRowsAreTheBitsOfBatchOne) {
  if (!gputest::haveDevice())
    GTEST_SKIP() << "no CUDA device";
  checkOnCuda("tiny-exlr8", "gpurun/packs/tiny-exlr8");
}

TEST(BatchInvarianceGpu, FlashRowsAreTheBitsOfBatchOne) {
  if (!gputest::haveDevice())
    GTEST_SKIP() << "no CUDA device";
  checkOnCuda("flash-a", "tests/oracle/goldens/glm_flash_a");
}
