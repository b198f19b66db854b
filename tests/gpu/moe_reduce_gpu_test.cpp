//===- moe_reduce_gpu_test.cpp - expert partial reduction order -----------===//
//
// moe_reduce must sum the owned partials in the fixed order (slots
// ascending, halves ascending, fp32), skip slots with expert id -1 and halves
// whose gate pointer is null, and optionally accumulate into the output: the
// same order on the CPU gives the same bits.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"

using namespace glm::gputest;

namespace {

class MoeReduceGpu : public ::testing::TestWithParam<int> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(MoeReduceGpu, FixedOrderBitExact) {
  const int accumulate = GetParam();
  const int B = 5, topk = 9, E = 20, H = 1000; // H not a multiple of 256
  std::mt19937 rng(77 + accumulate);
  std::vector<int> ids(size_t(B) * topk);
  for (auto &v : ids)
    v = int(rng() % (E + 2)) - 1; // -1 = empty slot; E is out of the table
  for (auto &v : ids)
    if (v >= E)
      v = E - 1;
  std::vector<uint64_t> tiles(size_t(E) * 3 * 16, 0);
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < 16; ++h)
      if (rng() % 3)
        tiles[(e * 3 + 0) * 16 + h] = 0x1000; // any non-null: owned
  std::vector<float> partial = randn(rng, size_t(B) * topk * 16 * H);
  std::vector<float> out0 = randn(rng, size_t(B) * H);
  std::vector<float> ref(out0.size());
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < H; ++o) {
      float s = accumulate ? out0[size_t(b) * H + o] : 0.0f;
      for (int k = 0; k < topk; ++k) {
        const int e = ids[b * topk + k];
        if (e < 0)
          continue;
        for (int h = 0; h < 16; ++h)
          if (tiles[(e * 3) * 16 + h])
            s += partial[((size_t(b) * topk + k) * 16 + h) * H + o];
      }
      ref[size_t(b) * H + o] = s;
    }
  auto dP = upload(partial);
  auto dIds = upload(ids);
  auto dT = upload(tiles);
  auto dOut = upload(out0);
  Args a;
  a.ptr(dP).ptr(dIds).ptr(dT).ptr(dOut) << B << topk << H << accumulate;
  a.launch(kernel(spec("moe_reduce", {{"threads", "128"}})), (H + 127) / 128, B,
           128);
  auto out = download<float>(dOut, ref.size());
  Err e;
  for (size_t i = 0; i < out.size(); ++i)
    e.add(out[i], ref[i]);
  report(std::string("moe_reduce order") + (accumulate ? " accumulate" : ""), e,
         0);
  // The twin (runtime/twins/expert_gemv_trellis_twin.cpp): bit-exact. Its
  // tile table only needs null / non-null entries.
  std::vector<const unsigned char *> hTiles(tiles.size(), nullptr);
  static const unsigned char kOwned = 1;
  for (size_t i = 0; i < tiles.size(); ++i)
    if (tiles[i])
      hTiles[i] = &kOwned;
  std::vector<float> tOut = out0;
  runTwin(spec("moe_reduce", {{"threads", "128"}}), (H + 127) / 128,
          unsigned(B), 128, 0,
          {hp(partial.data()), hp(ids.data()), hp(hTiles.data()),
           hp(tOut.data()), hi(B), hi(topk), hi(H), hi(accumulate)});
  report(std::string("moe_reduce vs_twin") + (accumulate ? " accumulate" : ""),
         vsTwin(out, tOut), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, MoeReduceGpu, ::testing::Values(0, 1));

} // namespace
