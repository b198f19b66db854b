//===- rms_norm_gpu_test.cpp - RMSNorm with the fused residual add --------===//
#include "gpu_twin_util.h"

using namespace glm::gputest;

namespace {

class RmsNormGpu : public ::testing::TestWithParam<std::tuple<int, int, bool>> {
protected:
  GLM_GPU_SUITE_SETUP
};

// y = w * x / sqrt(mean(x^2) + eps), x += add first (written back exactly).
TEST_P(RmsNormGpu, MatchesFloat64Reference) {
  auto [n, wt, withAdd] = GetParam();
  const int rows = 5, xStride = n + 32;
  const float eps = 1e-5f;
  std::mt19937 rng(n * 3 + wt + withAdd);
  std::vector<float> x = randn(rng, size_t(rows) * xStride, 2.0f);
  std::vector<float> add = randn(rng, size_t(rows) * n);
  std::vector<float> w = randn(rng, n, 1.0f, wt);
  std::vector<float> xNew = x;
  std::vector<double> ref(size_t(rows) * n);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) {
      float v = x[size_t(r) * xStride + i];
      if (withAdd)
        v += add[size_t(r) * n + i];
      xNew[size_t(r) * xStride + i] = v;
      ss += double(v) * v;
    }
    const double inv = 1.0 / std::sqrt(ss / n + double(eps));
    for (int i = 0; i < n; ++i)
      ref[size_t(r) * n + i] = double(xNew[size_t(r) * xStride + i]) * inv * w[i];
  }
  auto dX = upload(x);
  auto dA = upload(add);
  auto dW = upload(storeAs(wt, w));
  auto dY = poisoned<float>(ref.size());
  Args a;
  a.ptr(dX);
  if (withAdd)
    a.ptr(dA);
  else
    a.null();
  a.ptr(dW).ptr(dY) << rows << n << xStride << eps;
  a.launch(kernel(spec("rms_norm", {{"wt", dtName(wt)}, {"threads", "512"}})),
           rows, 1, 512);
  auto y = download<float>(dY, ref.size());
  Err e;
  for (size_t i = 0; i < y.size(); ++i)
    e.add(y[i], ref[i]);
  const std::string name = "rms_norm n" + std::to_string(n) + " w" +
                           dtName(wt) + (withAdd ? " +residual" : "");
  report(name, e, 1e-5, "fp32 sum of squares and rsqrtf vs float64");
  auto xs = download<float>(dX, x.size());
  Err ex;
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i)
      ex.add(xs[size_t(r) * xStride + i], xNew[size_t(r) * xStride + i]);
  report(name + " residual x", ex, 0);
  // The twin (runtime/twins/embed_rms_norm_rope_twin.cpp): fp64 sum of
  // squares rounded once, then the kernel's fp32 x * inv * w.
  std::vector<float> tX = x, tY(ref.size(), NAN);
  const std::vector<uint8_t> hW = storeAs(wt, w);
  TwinArg epsArg;
  epsArg.f = eps;
  runTwin(spec("rms_norm", {{"wt", dtName(wt)}, {"threads", "512"}}),
          unsigned(rows), 1, 512, 0,
          {hp(tX.data()), hp(withAdd ? add.data() : nullptr), hp(hW.data()),
           hp(tY.data()), hi(rows), hi(n), hi(xStride), epsArg});
  report(name + " vs_twin", vsTwin(y, tY), 1e-5,
         "fp32 block sum and rsqrtf vs the twin's fp64 sum");
  report(name + " residual x vs_twin", vsTwin(xs, tX), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormGpu,
                         ::testing::Values(std::make_tuple(6144, 2, true),
                                           std::make_tuple(512, 0, false),
                                           std::make_tuple(1536, 1, true)));

} // namespace
