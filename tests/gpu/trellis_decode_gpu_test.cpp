//===- trellis_decode_gpu_test.cpp - GPU trellis decode vs the CPU codec --===//
//
// The kernel templates' decode helpers (codegen/templates/glm_common.cuh)
// must reproduce the CPU codec bit for bit: every K = 1..8, every codebook,
// with and without the exlr8 E4M3 rounding, on random tiles (any bit pattern
// is a valid trellis).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/codec/trellis.h"
#include "runtime/cuda/cuda_api.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

using namespace glm::rt;

namespace {

std::string decodeKernelSource(int k, int cb, bool e4m3) {
  std::ostringstream os;
  os << "#include \"glm_common.cuh\"\n"
     << "extern \"C\" __global__ void decode_tiles(const unsigned *words, "
        "float *out) {\n"
     << "  constexpr int K = " << k << ";\n"
     << "  __shared__ unsigned w[8 * K];\n"
     << "  const int tile = blockIdx.x, lane = threadIdx.x;\n"
     << "  for (int i = lane; i < 8 * K; i += 32) w[i] = words[tile * 8 * K + "
        "i];\n"
     << "  __syncwarp();\n"
     << "  float v[8];\n"
     << "  glm::decodeLane8<K, " << cb << ", " << (e4m3 ? "true" : "false")
     << ">(w, lane, v);\n"
     << "  for (int e = 0; e < 8; ++e)\n"
     << "    out[tile * 256 + glm::tileRow(lane, e) * 16 + glm::tileCol(lane, "
        "e)] = v[e];\n"
     << "}\n";
  return os.str();
}

class TrellisDecodeGpu : public ::testing::TestWithParam<std::tuple<int, int, bool>> {
protected:
  static void SetUpTestSuite() {
    if (cuda::CudaDevice::count() == 0)
      GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(TrellisDecodeGpu, MatchesCpuCodecBitExact) {
  auto [k, cb, e4m3] = GetParam();
  cuda::CudaDevice dev(0);
  const int tiles = 96;
  trellis::Width w = trellis::Width::bits(k);
  std::vector<uint16_t> words(size_t(tiles) * w.wordsPerTile());
  std::mt19937 rng(1000 + 10 * k + cb);
  for (auto &x : words)
    x = uint16_t(rng());
  auto compiled = glm::codegen::compileWithNvrtc(
      decodeKernelSource(k, cb, e4m3), "decode_tiles", dev.arch());
  std::vector<char> image(compiled.cubin.begin(), compiled.cubin.end());
  cuda::Module mod(image);
  CUfunction fn = mod.function("decode_tiles");
  cuda::DeviceBuffer dWords(words.size() * 2), dOut(size_t(tiles) * 256 * 4);
  dWords.upload(words.data(), words.size() * 2);
  CUdeviceptr a = dWords.ptr(), b = dOut.ptr();
  void *params[] = {&a, &b};
  cuda::launch(fn, tiles, 1, 1, 32, 0, nullptr, params);
  std::vector<float> gpu(size_t(tiles) * 256);
  dOut.download(gpu.data(), gpu.size() * 4);
  auto codebook = static_cast<trellis::Codebook>(cb);
  size_t mismatches = 0;
  for (int t = 0; t < tiles; ++t) {
    float ref[256];
    trellis::decodeTile(words.data() + size_t(t) * w.wordsPerTile(), w,
                        codebook, e4m3, ref);
    for (int i = 0; i < 256; ++i)
      if (std::memcmp(&ref[i], &gpu[size_t(t) * 256 + i], 4) != 0 &&
          mismatches++ < 5)
        ADD_FAILURE() << "tile " << t << " element " << i << ": cpu "
                      << ref[i] << " gpu " << gpu[size_t(t) * 256 + i];
  }
  EXPECT_EQ(mismatches, 0u) << "K" << k << " cb" << cb << " e4m3 " << e4m3;
}

INSTANTIATE_TEST_SUITE_P(
    AllWidthsCodebooks, TrellisDecodeGpu,
    ::testing::Combine(::testing::Range(1, 9), ::testing::Values(0, 1, 2),
                       ::testing::Bool()),
    [](const auto &info) {
      std::ostringstream os;
      os << "K" << std::get<0>(info.param) << "_cb" << std::get<1>(info.param)
         << (std::get<2>(info.param) ? "_e4m3" : "");
      return os.str();
    });

} // namespace
