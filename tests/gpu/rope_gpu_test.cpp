//===- rope_gpu_test.cpp - interleaved RoPE in place ----------------------===//
//
// Against the CPU executor's ropeInterleave (angles in float64). The kernel
// computes inv_freq and the angle in fp32 as Hugging Face does, so the angle
// carries ~1e-7 relative error: at positions < 4096 that is < 1e-3 rad, hence
// the stated tolerance. Values outside the rotated slice must stay bit-equal.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/cpu/ops.h"

using namespace glm::gputest;

namespace {

class RopeGpu : public ::testing::TestWithParam<int> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(RopeGpu, MatchesCpuExecutor) {
  const int dim = GetParam();
  const int B = 3, heads = 4, headStride = 192, offset = 192 - dim,
            rowStride = heads * headStride + 8;
  const float theta = 1000000.0f;
  std::mt19937 rng(dim);
  std::vector<float> x = randn(rng, size_t(B) * rowStride);
  std::vector<int> pos = {0, 17, int(rng() % 4096)};
  std::vector<float> ref = x;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h)
      glm::rt::cpu::ropeInterleave(
          &ref[size_t(b) * rowStride + h * headStride + offset], dim, pos[b],
          theta);
  auto dX = upload(x);
  auto dP = upload(pos);
  Args a;
  a.ptr(dX).ptr(dP) << B << heads << rowStride << headStride << offset << theta;
  a.launch(kernel(spec("rope", {{"rope_dim", std::to_string(dim)}})), heads, B,
           unsigned(dim / 2));
  auto y = download<float>(dX, x.size());
  Err e, untouched;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < rowStride; ++c) {
      const size_t i = size_t(b) * rowStride + c;
      const int h = c / headStride, d = c % headStride;
      if (h < heads && d >= offset && d < offset + dim)
        e.add(y[i], ref[i]);
      else
        untouched.add(y[i], x[i]);
    }
  report("rope d" + std::to_string(dim), e, 1e-3,
         "fp32 angle pos*inv_freq (as HF) vs float64, pos < 4096");
  report("rope d" + std::to_string(dim) + " untouched", untouched, 0);
  // The twin (runtime/twins/embed_rms_norm_rope_twin.cpp): the same fp32
  // formulas with the host's powf/cosf/sinf.
  std::vector<float> tX = x;
  TwinArg thetaArg;
  thetaArg.f = theta;
  runTwin(spec("rope", {{"rope_dim", std::to_string(dim)}}), unsigned(heads),
          unsigned(B), unsigned(dim / 2), 0,
          {hp(tX.data()), hp(pos.data()), hi(B), hi(heads), hi(rowStride),
           hi(headStride), hi(offset), thetaArg});
  report("rope d" + std::to_string(dim) + " vs_twin", vsTwin(y, tX), 1e-3,
         "powf/cosf/sinf ulps times positions < 4096");
}

INSTANTIATE_TEST_SUITE_P(Dims, RopeGpu, ::testing::Values(64, 32));

} // namespace
