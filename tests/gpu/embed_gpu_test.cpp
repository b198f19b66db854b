//===- embed_gpu_test.cpp - embedding gather, vocabulary-sharded ----------===//
#include "gpu_twin_util.h"

using namespace glm::gputest;

namespace {

class EmbedGpu : public ::testing::TestWithParam<std::string> {
protected:
  GLM_GPU_SUITE_SETUP
};

// Rows are exact conversions (FP8 row: one fp32 multiply): bit-exact; ids
// outside this rank's [row_begin, row_begin + rows) give zeros.
TEST_P(EmbedGpu, BitExact) {
  const std::string fmt = GetParam();
  const int rows = 50, hidden = 300, rowBegin = 100, B = 6;
  std::mt19937 rng(fmt.size());
  std::vector<int> ids = {100, 149, 99, 150, 120, 100};
  std::vector<uint8_t> table;
  std::vector<float> scale(rows), vals(size_t(rows) * hidden);
  if (fmt == "fp8_row") {
    table.resize(vals.size());
    for (size_t i = 0; i < table.size(); ++i) {
      table[i] = uint8_t(rng());
      if ((table[i] & 0x7F) == 0x7F)
        table[i] &= 0xFE;
    }
    for (auto &s : scale)
      s = std::uniform_real_distribution<float>(0.01f, 0.1f)(rng);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < hidden; ++i)
        vals[size_t(r) * hidden + i] =
            glm::rt::e4m3ToFloat(table[size_t(r) * hidden + i]) * scale[r];
  } else {
    const int dt = fmt == "f32" ? 0 : fmt == "f16" ? 1 : 2;
    vals = randn(rng, vals.size(), 1.0f, dt);
    table = storeAs(dt, vals);
  }
  auto dIds = upload(ids);
  auto dT = upload(table);
  auto dS = upload(scale);
  auto dOut = poisoned<float>(size_t(B) * hidden);
  Args a;
  a.ptr(dIds).ptr(dT).ptr(dS).ptr(dOut) << B << hidden << rowBegin << rows;
  a.launch(kernel(spec("embed", {{"format", fmt}, {"threads", "128"}})),
           (hidden + 127) / 128, B, 128);
  auto out = download<float>(dOut, size_t(B) * hidden);
  Err e;
  for (int b = 0; b < B; ++b) {
    const int r = ids[b] - rowBegin;
    for (int i = 0; i < hidden; ++i)
      e.add(out[size_t(b) * hidden + i],
            r >= 0 && r < rows ? vals[size_t(r) * hidden + i] : 0.0f);
  }
  report("embed " + fmt, e, 0);
  // The twin (runtime/twins/embed_rms_norm_rope_twin.cpp): bit-exact.
  std::vector<float> tOut(out.size(), NAN);
  runTwin(spec("embed", {{"format", fmt}, {"threads", "128"}}),
          unsigned((hidden + 127) / 128), unsigned(B), 128, 0,
          {hp(ids.data()), hp(table.data()), hp(scale.data()), hp(tOut.data()),
           hi(B), hi(hidden), hi(rowBegin), hi(rows)});
  report("embed " + fmt + " vs_twin", vsTwin(out, tOut), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, EmbedGpu,
                         ::testing::Values("f32", "f16", "bf16", "fp8_row"));

} // namespace
