//===- indexer_topk_gpu_test.cpp - DSA indexer scores and top-k -----------===//
//
// indexer_scores against float64 (sum_h w_h ReLU(q_h . k_s * scale)), and
// topk against the CPU executor's topkIndices (ties to the lower index) on
// scores with many exact ties, then on the device's own indexer scores.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/cpu/ops.h"

#include <algorithm>

using namespace glm::gputest;

namespace {

class IndexerTopkGpu : public ::testing::TestWithParam<std::tuple<int, int, int>> {
protected:
  GLM_GPU_SUITE_SETUP
};

/// Runs topk on `scores` (B rows of `stride`) and compares with the CPU.
void checkTopk(const std::string &name, const std::vector<float> &scores,
               const std::vector<int> &len, int stride, int k) {
  const int B = int(len.size()), selStride = k + 5;
  auto dS = upload(scores);
  auto dL = upload(len);
  auto dSel = poisoned<int>(size_t(B) * selStride);
  auto dN = poisoned<int>(B);
  Args a;
  a.ptr(dS).ptr(dL).ptr(dSel).ptr(dN) << B << stride << selStride << k;
  a.launch(kernel(spec("topk", {{"threads", "512"}})), B, 1, 512);
  auto sel = download<int>(dSel, size_t(B) * selStride);
  auto n = download<int>(dN, B);
  size_t mism = 0, total = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<double> v(scores.begin() + size_t(b) * stride,
                          scores.begin() + size_t(b) * stride + len[b]);
    auto ref = glm::rt::cpu::topkIndices(v, k);
    std::sort(ref.begin(), ref.end());
    ++total;
    if (n[b] != int(ref.size())) {
      ++mism;
      continue;
    }
    for (size_t i = 0; i < ref.size(); ++i, ++total)
      mism += sel[size_t(b) * selStride + i] != ref[i];
  }
  reportExact(name, mism, total);
  // The twin (runtime/twins/router_topk_argmax_twin.cpp): bit-exact.
  std::vector<int> tSel(sel.size(), -9), tN(n.size(), -9);
  runTwin(spec("topk", {{"threads", "512"}}), unsigned(B), 1, 512, 0,
          {hp(scores.data()), hp(len.data()), hp(tSel.data()), hp(tN.data()),
           hi(B), hi(stride), hi(selStride), hi(k)});
  size_t tm = 0;
  for (int b = 0; b < B; ++b) {
    tm += tN[b] != n[b];
    for (int i = 0; i < std::min(n[b], tN[b]); ++i)
      tm += tSel[size_t(b) * selStride + i] != sel[size_t(b) * selStride + i];
  }
  reportExact(name + " vs_twin", tm, size_t(B) + sel.size());
}

TEST_P(IndexerTopkGpu, ScoresAndSelection) {
  auto [headDim, nHeads, kt] = GetParam();
  const int B = 3, T = 3000, stride = 3008, k = 256;
  const float qkScale = 1.0f / std::sqrt(float(headDim));
  std::mt19937 rng(headDim + nHeads + kt);
  std::vector<float> q = randn(rng, size_t(B) * nHeads * headDim);
  std::vector<float> w = randn(rng, size_t(B) * nHeads, 1.0f / std::sqrt(float(nHeads)));
  std::vector<float> keys = randn(rng, size_t(T) * headDim, 1.0f, kt);
  std::vector<int> len = {T, 40, 1999};
  auto dQ = upload(q);
  auto dW = upload(w);
  auto dK = upload(storeAs(kt, keys));
  auto dL = upload(len);
  auto dS = poisoned<float>(size_t(B) * stride);
  Args a;
  a.ptr(dQ).ptr(dW).ptr(dK).ptr(dL).ptr(dS) << B << stride << qkScale;
  const int threads = 256, perBlock = threads / 32 * 4;
  a.launch(kernel(spec("indexer_scores", {{"head_dim", std::to_string(headDim)},
                                          {"n_heads", std::to_string(nHeads)},
                                          {"kt", dtName(kt)},
                                          {"threads", "256"}})),
           (T + perBlock - 1) / perBlock, B, threads);
  auto s = download<float>(dS, size_t(B) * stride);
  Err e;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < len[b]; ++t) {
      double tot = 0;
      for (int h = 0; h < nHeads; ++h) {
        double d = 0;
        for (int i = 0; i < headDim; ++i)
          d += double(q[(size_t(b) * nHeads + h) * headDim + i]) *
               keys[size_t(t) * headDim + i];
        tot += double(w[size_t(b) * nHeads + h]) * std::max(0.0, d * qkScale);
      }
      e.add(s[size_t(b) * stride + t], tot);
    }
  const std::string name = "indexer_scores d" + std::to_string(headDim) + " h" +
                           std::to_string(nHeads) + " k" + dtName(kt);
  report(name, e, 1e-5, "fp32 dots vs float64");
  {
    // The twin (runtime/twins/mla_decode_indexer_scores_twin.cpp): fp64
    // dots rounded once, the kernel's fp32 head loop.
    const std::vector<uint8_t> hK = storeAs(kt, keys);
    std::vector<float> tS(s.size(), NAN);
    TwinArg qkArg;
    qkArg.f = qkScale;
    runTwin(spec("indexer_scores", {{"head_dim", std::to_string(headDim)},
                                    {"n_heads", std::to_string(nHeads)},
                                    {"kt", dtName(kt)},
                                    {"threads", "256"}}),
            unsigned((T + perBlock - 1) / perBlock), unsigned(B), threads, 0,
            {hp(q.data()), hp(w.data()), hp(hK.data()), hp(len.data()),
             hp(tS.data()), hi(B), hi(stride), qkArg});
    Err et;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < len[b]; ++t)
        et.add(s[size_t(b) * stride + t], tS[size_t(b) * stride + t]);
    report(name + " vs_twin", et, 1e-5,
           "fp32 lane dots vs the twin's fp64 dots");
  }
  // Top-k on the device's own scores (exact comparison on the same values).
  for (int b = 0; b < B; ++b)
    for (int t = len[b]; t < stride; ++t)
      s[size_t(b) * stride + t] = 0.0f;
  checkTopk(name + " -> topk", s, len, stride, k);
}

INSTANTIATE_TEST_SUITE_P(Shapes, IndexerTopkGpu,
                         ::testing::Values(std::make_tuple(128, 32, 2),
                                           std::make_tuple(64, 8, 0),
                                           std::make_tuple(128, 64, 1)));

class TopkGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(TopkGpu, TiesAndShortRows) {
  const int stride = 5000;
  std::vector<int> len = {5000, 100, 256, 257, 4097};
  std::mt19937 rng(11);
  std::vector<float> s(len.size() * stride);
  for (auto &v : s) { // coarse values: many exact ties at the threshold
    v = std::round(std::normal_distribution<float>(0.0f, 1.0f)(rng) * 20.0f) / 20.0f;
    if (v == 0.0f)
      v = 0.0f; // no -0.0: the order keys tell it from +0.0
  }
  checkTopk("topk ties k256", s, len, stride, 256);
  checkTopk("topk ties k2048", s, len, stride, 2048);
}

} // namespace
