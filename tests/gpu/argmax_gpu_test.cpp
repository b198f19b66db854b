//===- argmax_gpu_test.cpp - greedy pick, ties to the lower index ---------===//
#include "gpu_twin_util.h"
#include "runtime/cpu/ops.h"

using namespace glm::gputest;

namespace {

class ArgmaxGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(ArgmaxGpu, LogitsAndCandidatesBitExact) {
  const int B = 4, n = 50000, stride = 50010, offset = 1000;
  std::mt19937 rng(3);
  std::vector<float> v = randn(rng, size_t(B) * stride);
  // Row 1: a tie between two maxima; row 2: a NaN that must be ignored.
  v[size_t(1) * stride + 777] = 9.0f;
  v[size_t(1) * stride + 40000] = 9.0f;
  v[size_t(2) * stride + 5] = std::nanf("");
  std::vector<int> cand(v.size());
  for (size_t i = 0; i < cand.size(); ++i)
    cand[i] = int(rng() % 1000000);
  auto dV = upload(v);
  auto dC = upload(cand);
  size_t mism = 0, total = 0;
  for (int mode = 0; mode < 2; ++mode) {
    auto dVal = poisoned<float>(size_t(B) * 2);
    auto dIdx = poisoned<int>(size_t(B) * 2);
    Args a;
    a.ptr(dV);
    if (mode)
      a.ptr(dC);
    else
      a.null();
    a.ptr(dVal).ptr(dIdx) << B << n << stride << 2 << offset;
    a.launch(kernel(spec("argmax", {{"threads", "512"}})), B, 1, 512);
    auto val = download<float>(dVal, size_t(B) * 2);
    auto idx = download<int>(dIdx, size_t(B) * 2);
    // The twin (runtime/twins/router_topk_argmax_twin.cpp): bit-exact.
    std::vector<float> tVal(size_t(B) * 2, NAN);
    std::vector<int> tIdx(size_t(B) * 2, -9);
    runTwin(spec("argmax", {{"threads", "512"}}), B, 1, 512, 0,
            {hp(v.data()), hp(mode ? cand.data() : nullptr), hp(tVal.data()),
             hp(tIdx.data()), hi(B), hi(n), hi(stride), hi(2), hi(offset)});
    for (int b = 0; b < B; ++b) {
      total += 2;
      mism += tIdx[b * 2] != idx[b * 2];
      mism += std::memcmp(&tVal[b * 2], &val[b * 2], 4) != 0;
    }
    for (int b = 0; b < B; ++b) {
      // Reference: max value (NaN ignored), ties -> lower reported id.
      float bv = -INFINITY;
      int bi = INT32_MAX;
      for (int i = 0; i < n; ++i) {
        const float x = v[size_t(b) * stride + i];
        const int id = mode ? cand[size_t(b) * stride + i] : i + offset;
        if (x > bv || (x == bv && id < bi)) {
          bv = x;
          bi = id;
        }
      }
      if (mode == 0) // the CPU executor's argmax agrees
        mism += glm::rt::cpu::argmax(&v[size_t(b) * stride], n) + offset != bi &&
                b != 2;
      total += 2;
      mism += idx[b * 2] != bi;
      mism += std::memcmp(&val[b * 2], &bv, 4) != 0;
    }
  }
  reportExact("argmax logits+candidates", mism, total);
}

} // namespace
