//===- dense_gemv_f32_gpu_test.cpp - fp32-weight GEMV with fp64 sums ------===//
//
// dense_gemv_f32 (codegen/templates/dense_gemv_f32.cuh) against its twin
// (runtime/twins/dense_gemv_twin.cpp): fp64 sums of exact float * float
// products in the kernel's lane order and xor tree, so f64 and f32 outputs
// are bit-exact; and against a float64 dot (1e-12 relative to |w|.|x|).
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"

using namespace glm::gputest;

namespace {

class DenseGemvF32Gpu : public ::testing::TestWithParam<int> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(DenseGemvF32Gpu, BitExactWithTwin) {
  const int f64 = GetParam();
  const int in = 1000, out = 301; // in not a multiple of 32, rows ragged
  std::mt19937 rng(55 + f64);
  const std::vector<float> x = randn(rng, in), w = randn(rng, size_t(out) * in);
  const KernelSpec s = spec("dense_gemv_f32",
                            {{"out", f64 ? "f64" : "f32"}, {"threads", "128"}});
  const unsigned grid = unsigned((out + 3) / 4);
  auto dX = upload(x);
  auto dW = upload(w);
  auto dY = poisoned<double>(size_t(out));
  Args a;
  a.ptr(dX).ptr(dW).ptr(dY) << in << out;
  a.launch(kernel(s), grid, 1, 128);
  std::vector<double> y64(out, NAN), t64(out, NAN);
  std::vector<float> y32(out, NAN), t32(out, NAN);
  if (f64)
    y64 = download<double>(dY, out);
  else
    y32 = download<float>(dY, out);
  runTwin(s, grid, 1, 128, 0,
          {hp(x.data()), hp(w.data()),
           hp(f64 ? (void *)t64.data() : t32.data()), hi(in), hi(out)});
  size_t mism = 0;
  Err e;
  for (int o = 0; o < out; ++o) {
    double ref = 0, mag = 0;
    for (int i = 0; i < in; ++i) {
      ref += double(w[size_t(o) * in + i]) * x[i];
      mag += std::fabs(double(w[size_t(o) * in + i]) * x[i]);
    }
    const double got = f64 ? y64[o] : double(y32[o]);
    mism += f64 ? std::memcmp(&y64[o], &t64[o], 8) != 0
                : std::memcmp(&y32[o], &t32[o], 4) != 0;
    e.add(got / mag, ref / mag);
  }
  const std::string name =
      std::string("dense_gemv_f32 out ") + (f64 ? "f64" : "f32");
  reportExact(name + " vs_twin", mism, size_t(out));
  report(name, e, f64 ? 1e-12 : 1e-7, "fp64 sums vs float64, per |w|.|x|");
}

INSTANTIATE_TEST_SUITE_P(Outputs, DenseGemvF32Gpu, ::testing::Values(0, 1));

} // namespace
