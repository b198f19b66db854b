//===- hadamard128_gpu_test.cpp - block Hadamard-128 with side vectors ----===//
//
// y = post * H128(pre * x) / sqrt(128) per 128-block, against the CPU codec's
// hadamardCols (fp32) and a float64 transform; per-row (pre_stride) and
// shared (stride 0) vectors, in place.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

using namespace glm::gputest;

namespace {

class Hadamard128Gpu : public ::testing::TestWithParam<int> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(Hadamard128Gpu, MatchesFloat64AndCodec) {
  const int vt = GetParam();
  const int rows = 3, n = 768;
  std::mt19937 rng(90 + vt);
  std::vector<float> x = randn(rng, size_t(rows) * n);
  std::vector<float> pre = randn(rng, size_t(rows) * n, 1.0f, vt); // per row
  std::vector<float> post = randn(rng, n, 1.0f, vt);                // shared
  std::vector<double> ref(x.size());
  std::vector<float> codec(x.size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) {
      ref[size_t(r) * n + i] = double(x[size_t(r) * n + i]) * pre[size_t(r) * n + i];
      codec[size_t(r) * n + i] = x[size_t(r) * n + i] * pre[size_t(r) * n + i];
    }
  hadamard128(ref.data(), ref.size());
  glm::rt::trellis::hadamardCols(codec.data(), rows, n);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) {
      ref[size_t(r) * n + i] *= post[i];
      codec[size_t(r) * n + i] *= post[i];
    }
  auto dX = upload(x);
  auto dPre = upload(storeAs(vt, pre));
  auto dPost = upload(storeAs(vt, post));
  Args a;
  a.ptr(dX).ptr(dPre).ptr(dPost).ptr(dX) << rows << n << n << 0;
  a.launch(kernel(spec("hadamard128", {{"vt", dtName(vt)}, {"threads", "128"}})),
           (rows * n / 128 + 3) / 4, 1, 128);
  auto y = download<float>(dX, x.size());
  Err e, ec;
  for (size_t i = 0; i < y.size(); ++i) {
    e.add(y[i], ref[i]);
    ec.add(y[i], codec[i]);
  }
  report(std::string("hadamard128 v") + dtName(vt), e, 1e-6,
         "fp32 butterflies vs float64");
  report(std::string("hadamard128 v") + dtName(vt) + " vs codec", ec, 1e-6,
         "two fp32 butterfly orders");
  // The twin (runtime/twins/dense_gemv_twin.cpp): the warp's butterfly
  // order in fp32; CUDA may contract x * pre into the first add (FMA).
  const std::vector<uint8_t> hPre = storeAs(vt, pre), hPost = storeAs(vt, post);
  std::vector<float> tY = x;
  runTwin(spec("hadamard128", {{"vt", dtName(vt)}, {"threads", "128"}}),
          unsigned((rows * n / 128 + 3) / 4), 1, 128, 0,
          {hp(tY.data()), hp(hPre.data()), hp(hPost.data()), hp(tY.data()),
           hi(rows), hi(n), hi(n), hi(0)});
  report(std::string("hadamard128 v") + dtName(vt) + " vs_twin", vsTwin(y, tY),
         1e-6, "same butterfly order, FMA contraction");
}

INSTANTIATE_TEST_SUITE_P(Storage, Hadamard128Gpu, ::testing::Values(0, 1, 2));

} // namespace
