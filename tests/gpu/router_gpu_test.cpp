//===- router_gpu_test.cpp - sigmoid router vs the CPU executor -----------===//
//
// Selection by sigmoid + bias (bias for selection only), weights renormalised
// (or not) and scaled, ties to the lower expert id; against
// cpu::routeExperts (float64). Selections must be identical; weights within
// 1e-6 relative (fp32 sigmoid vs float64).
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/cpu/ops.h"

#include <algorithm>

using namespace glm::gputest;

namespace {

struct RouterCase {
  int experts, topk, maxExperts;
  bool bias, renorm, ties;
  float scale;
};

class RouterGpu : public ::testing::TestWithParam<RouterCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(RouterGpu, MatchesCpuRouter) {
  const RouterCase c = GetParam();
  const int B = 3, E = c.experts, K = c.topk;
  std::mt19937 rng(E * 10 + K + c.ties);
  std::vector<float> logits = randn(rng, size_t(B) * E, 2.0f);
  if (c.ties) // a few exact duplicates among the largest values
    for (int b = 0; b < B; ++b) {
      float *l = &logits[size_t(b) * E];
      l[3] = l[E - 2] = l[10] = 5.0f;
      l[7] = l[E - 1] = 4.5f;
    }
  std::vector<float> bias;
  if (c.bias)
    bias = randn(rng, E, 0.05f);
  auto dL = upload(logits);
  auto dB = upload(bias);
  auto dIds = poisoned<int>(size_t(B) * K);
  auto dW = poisoned<float>(size_t(B) * K);
  Args a;
  a.ptr(dL);
  if (c.bias)
    a.ptr(dB);
  else
    a.null();
  a.ptr(dIds).ptr(dW) << B << E << c.scale << int(c.renorm);
  a.launch(kernel(spec("router", {{"experts", std::to_string(c.maxExperts)},
                                  {"topk", std::to_string(K)},
                                  {"threads", "256"}})),
           B, 1, 256);
  auto ids = download<int>(dIds, size_t(B) * K);
  auto w = download<float>(dW, size_t(B) * K);
  size_t mism = 0;
  Err ew;
  for (int b = 0; b < B; ++b) {
    std::vector<double> l(logits.begin() + size_t(b) * E,
                          logits.begin() + size_t(b + 1) * E);
    auto rc = glm::rt::cpu::routeExperts(l, c.bias ? bias.data() : nullptr, K,
                                         c.renorm, c.scale);
    std::vector<std::pair<int, float>> got;
    for (int k = 0; k < K; ++k)
      got.emplace_back(ids[b * K + k], w[b * K + k]);
    std::sort(got.begin(), got.end());
    for (int k = 0; k < K; ++k) {
      if (got[k].first != rc.experts[k]) {
        ++mism;
        continue;
      }
      ew.add(got[k].second, rc.weights[k]);
    }
  }
  const std::string name = "router e" + std::to_string(E) + " k" +
                           std::to_string(K) + (c.bias ? " bias" : "") +
                           (c.renorm ? " renorm" : "") + (c.ties ? " ties" : "");
  reportExact(name + " selection", mism, size_t(B) * K);
  report(name + " weights", ew, 1e-6, "fp32 sigmoid vs float64");
  // The twin (runtime/twins/router_topk_argmax_twin.cpp): the same ids in
  // the same (selection) order, weights within host/CUDA expf ulps.
  std::vector<int> tIds(ids.size(), -9);
  std::vector<float> tW(w.size(), NAN);
  TwinArg scaleArg;
  scaleArg.f = c.scale;
  runTwin(spec("router", {{"experts", std::to_string(c.maxExperts)},
                          {"topk", std::to_string(K)},
                          {"threads", "256"}}),
          B, 1, 256, 0,
          {hp(logits.data()), hp(c.bias ? bias.data() : nullptr),
           hp(tIds.data()), hp(tW.data()), hi(B), hi(E), scaleArg,
           hi(int(c.renorm))});
  size_t idMism = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    idMism += ids[i] != tIds[i];
  reportExact(name + " selection vs_twin", idMism, ids.size());
  report(name + " weights vs_twin", vsTwin(w, tW), 1e-6, "host vs CUDA expf");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RouterGpu,
    ::testing::Values(RouterCase{256, 8, 256, true, true, false, 2.5f},
                      RouterCase{288, 8, 288, true, false, false, 1.0f},
                      RouterCase{200, 6, 256, false, true, true, 1.5f},
                      RouterCase{64, 4, 64, false, true, true, 1.0f}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

} // namespace
