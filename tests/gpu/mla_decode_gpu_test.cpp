//===- mla_decode_gpu_test.cpp - MLA decode over DSA-selected tokens ------===//
//
// Absorbed-form attention over the latent cache restricted to the selected
// token indices, bf16 and E4M3 (per-token scale) caches, against float64
// scores, softmax and weighted sum of the same cache values.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"

#include <algorithm>
#include <numeric>

using namespace glm::gputest;

namespace {

struct MlaCase {
  int lora, rope, kv, headsPerBlock, heads, maxSel;
};

class MlaDecodeGpu : public ::testing::TestWithParam<MlaCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(MlaDecodeGpu, MatchesFloat64Reference) {
  const MlaCase c = GetParam();
  const int B = 3, T = 700, L = c.lora, R = c.rope, row = L + R, H = c.heads;
  const float scale = 1.0f / std::sqrt(float(192));
  std::mt19937 rng(L + R + c.kv * 3 + c.headsPerBlock);
  std::vector<float> qLat = randn(rng, size_t(B) * H * L);
  std::vector<float> qPe = randn(rng, size_t(B) * H * R);
  std::vector<float> cache(size_t(T) * row), cacheScale(T);
  std::vector<uint8_t> cacheBytes;
  if (c.kv == 0) {
    std::vector<float> v = randn(rng, cache.size(), 1.0f, 2);
    cache = v;
    cacheBytes = storeAs(2, v);
  } else {
    cacheBytes.resize(cache.size());
    for (int s = 0; s < T; ++s) {
      cacheScale[s] = std::uniform_real_distribution<float>(0.005f, 0.02f)(rng);
      for (int d = 0; d < row; ++d) {
        uint8_t b = uint8_t(rng());
        if ((b & 0x7F) == 0x7F)
          b &= 0xFE;
        cacheBytes[size_t(s) * row + d] = b;
        cache[size_t(s) * row + d] = glm::rt::e4m3ToFloat(b) * cacheScale[s];
      }
    }
  }
  // Selections: row 0 nearly full, row 1 a single token, row 2 random.
  std::vector<int> nsel = {c.maxSel - 3, 1, c.maxSel / 2};
  std::vector<int> sel(size_t(B) * c.maxSel, 0);
  for (int b = 0; b < B; ++b) {
    std::vector<int> perm(T);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::sort(perm.begin(), perm.begin() + nsel[b]);
    std::copy_n(perm.begin(), nsel[b], &sel[size_t(b) * c.maxSel]);
  }
  std::vector<double> ref(size_t(B) * H * L, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float *ql = &qLat[(size_t(b) * H + h) * L];
      const float *qp = &qPe[(size_t(b) * H + h) * R];
      std::vector<double> p(nsel[b]);
      double m = -1e300;
      for (int i = 0; i < nsel[b]; ++i) {
        const float *cs = &cache[size_t(sel[size_t(b) * c.maxSel + i]) * row];
        double d = 0;
        for (int t = 0; t < L; ++t)
          d += double(ql[t]) * cs[t];
        for (int t = 0; t < R; ++t)
          d += double(qp[t]) * cs[L + t];
        p[i] = d * scale;
        m = std::max(m, p[i]);
      }
      double sum = 0;
      for (auto &v : p)
        sum += (v = std::exp(v - m));
      double *o = &ref[(size_t(b) * H + h) * L];
      for (int i = 0; i < nsel[b]; ++i) {
        const float *cs = &cache[size_t(sel[size_t(b) * c.maxSel + i]) * row];
        for (int t = 0; t < L; ++t)
          o[t] += p[i] / sum * cs[t];
      }
    }
  auto dQl = upload(qLat);
  auto dQp = upload(qPe);
  auto dC = upload(cacheBytes);
  auto dCs = upload(cacheScale);
  auto dSel = upload(sel);
  auto dN = upload(nsel);
  auto dO = poisoned<float>(ref.size());
  Args a;
  a.ptr(dQl).ptr(dQp).ptr(dC);
  if (c.kv)
    a.ptr(dCs);
  else
    a.null();
  a.ptr(dSel).ptr(dN).ptr(dO) << B << H << c.maxSel << scale;
  KernelSpec s = spec("mla_decode", {{"lora", std::to_string(L)},
                                     {"rope", std::to_string(R)},
                                     {"kv", c.kv ? "e4m3" : "bf16"},
                                     {"heads", std::to_string(c.headsPerBlock)},
                                     {"threads", "256"}});
  a.launch(kernel(s), unsigned(H / c.headsPerBlock), B, 256,
           unsigned(c.headsPerBlock * c.maxSel * 4));
  auto o = download<float>(dO, ref.size());
  Err e;
  for (size_t i = 0; i < o.size(); ++i)
    e.add(o[i], ref[i]);
  report("mla_decode l" + std::to_string(L) + " r" + std::to_string(R) +
             (c.kv ? " e4m3" : " bf16") + " h" +
             std::to_string(c.headsPerBlock) + " sel" + std::to_string(c.maxSel),
         e, 1e-5, "fp32 dots/softmax vs float64");
  // The twin (runtime/twins/mla_decode_indexer_scores_twin.cpp).
  std::vector<float> tO(o.size(), NAN);
  TwinArg scaleArg;
  scaleArg.f = scale;
  runTwin(s, unsigned(H / c.headsPerBlock), unsigned(B), 256,
          unsigned(c.headsPerBlock * c.maxSel * 4),
          {hp(qLat.data()), hp(qPe.data()), hp(cacheBytes.data()),
           hp(c.kv ? cacheScale.data() : nullptr), hp(sel.data()),
           hp(nsel.data()), hp(tO.data()), hi(B), hi(H), hi(c.maxSel),
           scaleArg});
  report("mla_decode l" + std::to_string(L) + " r" + std::to_string(R) +
             (c.kv ? " e4m3" : " bf16") + " h" +
             std::to_string(c.headsPerBlock) + " sel" +
             std::to_string(c.maxSel) + " vs_twin",
         vsTwin(o, tO), 1e-5, "fp32 dots/softmax vs the twin's fp64 sums");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaDecodeGpu,
    ::testing::Values(MlaCase{512, 64, 0, 8, 16, 512},
                      MlaCase{512, 64, 1, 16, 32, 256},
                      MlaCase{128, 32, 0, 4, 8, 600}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

} // namespace
