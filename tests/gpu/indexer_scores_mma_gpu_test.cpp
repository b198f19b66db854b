//===- indexer_scores_mma_gpu_test.cpp - prefill indexer scores, MMA ------===//
//
// indexer_scores_mma (the DSA indexer's scores of a prefill chunk on tensor
// cores: q and f32 / bf16 keys as fp16 hi + lo, e4m3 keys as their bytes
// times the row scale, fp32 MMA sums, fp32 epilogue, heads added in a fixed
// order) against:
// - its twin (runtime/twins/twin_dsa.cpp: the same split products summed
//   in fp64): tolerance 1e-5 of max|twin| (fp32 sums of 3 x 128 products
//   and of 16 heads in hardware order; expected ~1e-7);
// - indexer_scores_ctx on the GPU (fp64, the decode path the prefill
//   selections must follow): 1e-5 as well (the split's ~2^-22 on top);
// - itself at another grid x: the same bits (the head order does not
//   depend on the grid).
// Every key form (f32, bf16, e4m3) at GLM-5.3's 32 heads x 128 dims (a
// 256-row chunk at position 2000, rows at position 0), the tiny models'
// 8 x 32 and 2 x 64, 16 and 64 heads, ragged key tiles, rows in two KV slots.
// Only keys t <= pos[b] of each row may be written. Glm53ChunkAgainstFp64Kernel
// times both kernels at a full-size chunk (2048 rows over 8K keys; no twin
// there).
//
//===----------------------------------------------------------------------===//
#include "gpu_dual.h"
#include "gpu_test_util.h"

#include "codegen/templates/indexer_scores_mma.cuh"
#include "codegen/templates/kv_cache.cuh"

#include <algorithm>
#include <chrono>
#include <cstring>

using namespace glm::gputest;

namespace {

/// Rows of n values in KV form kv, as kv_cache.cuh's writers store them.
std::vector<uint8_t> storeRows(const std::vector<float> &v, int n, int kv) {
  const size_t rows = v.size() / n;
  const int64_t rb = glm::kv::rowBytes(kv, n);
  std::vector<uint8_t> out(rows * rb);
  for (size_t r = 0; r < rows; ++r) {
    const float *x = v.data() + r * n;
    uint8_t *p = out.data() + r * rb;
    if (kv == glm::kv::kF32) {
      std::memcpy(p, x, 4 * n);
    } else if (kv == glm::kv::kBf16) {
      for (int i = 0; i < n; ++i) {
        const uint16_t b = glm::kv::bf16Of(x[i]);
        std::memcpy(p + 2 * i, &b, 2);
      }
    } else {
      float amax = 0;
      for (int i = 0; i < n; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float s = glm::kv::e4m3Scale(amax);
      for (int i = 0; i < n; ++i)
        p[i] = glm::kv::e4m3Of(x[i] / s);
      std::memcpy(p + n, &s, 4);
    }
  }
  return out;
}

struct Case {
  int nh, hd, B, p0, maxCtx;
  bool twoSlots;
};

class IndexerScoresMmaGpu : public ::testing::TestWithParam<Case> {
protected:
  GLM_GPU_SUITE_SETUP
};

/// Scores of `family` on the device and through its twin (Dual runs both).
std::unique_ptr<Dual>
launchScores(const std::string &family, const std::string &kv, unsigned gx,
             const Case &c, const std::vector<float> &q,
             const std::vector<uint8_t> &keys, const std::vector<float> &w,
             const std::vector<int> &seq, const std::vector<int> &pos) {
  auto d = std::make_unique<Dual>(
      family, 256, std::map<std::string, std::string>{{"kv", kv}});
  d->buf(q)
      .buf(keys)
      .buf(w)
      .out<double>(size_t(c.B) * c.maxCtx)
      .buf(seq)
      .buf(pos)
      .i32(c.nh)
      .i32(c.hd)
      .i32(c.maxCtx)
      .f64(1.0 / std::sqrt(double(c.nh)))
      .f64(1.0 / std::sqrt(double(c.hd)))
      .unpaged();
  const int form = kv == "e4m3" ? 2 : kv == "bf16" ? 1 : 0;
  const unsigned smem =
      family == "indexer_scores_mma" ? glm::indexerMmaSmemBytes(form, 256) : 0;
  d->run(gx, unsigned(c.B), 1, 256, smem);
  return d;
}

/// Compares scores a and b (written sets must be equal: t <= pos[b]).
void compare(const std::string &name, const std::vector<double> &a,
             const std::vector<double> &b, const Case &c,
             const std::vector<int> &pos, double tol, const std::string &why) {
  Err e;
  size_t wrongSet = 0;
  for (int r = 0; r < c.B; ++r)
    for (int t = 0; t < c.maxCtx; ++t) {
      const size_t i = size_t(r) * c.maxCtx + t;
      const bool want = t <= pos[r];
      wrongSet += std::isnan(a[i]) == want || std::isnan(b[i]) == want;
      if (want)
        e.add(a[i], b[i]);
    }
  EXPECT_EQ(wrongSet, 0u) << name << ": written keys differ from t <= pos";
  report(name, e, tol, why);
}

TEST_P(IndexerScoresMmaGpu, MatchesTwinAndFp64Kernel) {
  const Case c = GetParam();
  for (const std::string kv : {"f32", "bf16", "e4m3"}) {
    const int form = kv == "e4m3" ? 2 : kv == "bf16" ? 1 : 0;
    std::mt19937 rng(unsigned(c.nh * 31 + c.hd + c.B * 7 + c.p0 + form));
    const std::vector<float> q = randn(rng, size_t(c.B) * c.nh * c.hd),
                             w = randn(rng, size_t(c.B) * c.nh);
    const std::vector<uint8_t> keys =
        storeRows(randn(rng, size_t(2) * c.maxCtx * c.hd), c.hd, form);
    std::vector<int> seq(c.B), pos(c.B);
    for (int b = 0; b < c.B; ++b) {
      seq[b] = c.twoSlots ? (b / 3) & 1 : 1;
      pos[b] = c.p0 + b;
    }
    const std::string name =
        "indexer_scores_mma " + kv + " nh" + std::to_string(c.nh) + " hd" +
        std::to_string(c.hd) + " B" + std::to_string(c.B) + " p0 " +
        std::to_string(c.p0) + (c.twoSlots ? " two slots" : "");
    const unsigned gx = glm::indexerMmaGridX(c.B);
    auto mma =
        launchScores("indexer_scores_mma", kv, gx, c, q, keys, w, seq, pos);
    const std::vector<double> gpu = mma->gpu<double>(3);
    compare(name + " vs_twin", gpu, mma->host<double>(3), c, pos, 1e-5,
            "fp32 tensor-core sums of the twin's exact products");
    auto ctx =
        launchScores("indexer_scores_ctx", kv, 64, c, q, keys, w, seq, pos);
    compare(name + " vs_fp64_kernel", gpu, ctx->gpu<double>(3), c, pos, 1e-5,
            "hi + lo splits (~22 bits) and fp32 sums");
    // Another grid x: each block strides differently over the key tiles.
    auto other =
        launchScores("indexer_scores_mma", kv, gx + 5, c, q, keys, w, seq, pos);
    const std::vector<double> g2 = other->gpu<double>(3);
    reportExact(name + " grid x " + std::to_string(gx + 5) + " bits",
                std::memcmp(gpu.data(), g2.data(), gpu.size() * 8) != 0, 1);
  }
}

class IndexerScoresMmaTimeGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

// GLM-5.3's prefill shape with no twin (too large for it): a 2048-row chunk
// at positions 6144 .. 8191 of an 8K cache, f32 keys. Prints ms per launch
// of both kernels (wall time around a synchronized launch, best of 3) and
// holds the tensor-core scores to the fp64 kernel's at 1e-5.
TEST_F(IndexerScoresMmaTimeGpu, Glm53ChunkAgainstFp64Kernel) {
  const int nh = 32, hd = 128, B = 2048, maxCtx = 8192, p0 = maxCtx - B;
  std::mt19937 rng(53);
  auto dQ = upload(randn(rng, size_t(B) * nh * hd));
  auto dK = upload(randn(rng, size_t(maxCtx) * hd));
  auto dW = upload(randn(rng, size_t(B) * nh));
  std::vector<int> seq(B, 0), pos(B);
  for (int b = 0; b < B; ++b)
    pos[b] = p0 + b;
  auto dSeq = upload(seq), dPos = upload(pos);
  auto run = [&](const std::string &family, unsigned gx, unsigned smem,
                 double &bestMs) {
    auto dS = poisoned<double>(size_t(B) * maxCtx);
    const KernelSpec s = spec(family, {{"threads", "256"}});
    bestMs = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      Args a;
      a.ptr(dQ).ptr(dK).ptr(dW).ptr(dS).ptr(dSeq).ptr(dPos)
          << nh << hd << maxCtx << 1.0 / std::sqrt(double(nh))
          << 1.0 / std::sqrt(double(hd));
      a.null() << 0; // unpaged
      const auto t0 = std::chrono::steady_clock::now();
      a.launch(kernel(s), gx, unsigned(B), 256u, smem);
      bestMs = std::min(bestMs, std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - t0)
                                    .count());
    }
    return download<double>(dS, size_t(B) * maxCtx);
  };
  double msMma = 0, msCtx = 0;
  const std::vector<double> mma =
      run("indexer_scores_mma", glm::indexerMmaGridX(B),
          glm::indexerMmaSmemBytes(glm::kv::kF32, 256), msMma);
  const std::vector<double> ctx = run("indexer_scores_ctx", 64, 0, msCtx);
  const double flop = 2.0 * 3 * nh * hd * (double(B) * p0 + B * (B + 1) / 2.0);
  std::printf("[gpu-case] indexer scores 2048 rows at 6144..8191, 32x128: "
              "mma %.3f ms (%.1f fp16 TFLOP/s incl. the hi/lo MMAs), fp64 "
              "%.3f ms, %.1fx\n",
              msMma, flop / msMma * 1e-9, msCtx, msCtx / msMma);
  const Case c{nh, hd, B, p0, maxCtx, false};
  compare("indexer_scores_mma glm53 chunk vs_fp64_kernel", mma, ctx, c, pos,
          1e-5, "hi + lo splits (~22 bits) and fp32 sums");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, IndexerScoresMmaGpu,
    ::testing::Values(Case{32, 128, 256, 2000, 2400, false}, // GLM-5.3 chunk
                      Case{32, 128, 70, 0, 128, false},      // position 0
                      Case{32, 128, 37, 500, 600, true},
                      Case{8, 32, 40, 10, 64, false}, // the tiny models
                      Case{8, 32, 19, 0, 32, true},
                      Case{2, 64, 150, 20, 256, true}, // synth tiny
                      Case{16, 64, 45, 100, 200, false},
                      Case{64, 64, 20, 300, 400, true}),
    [](const auto &info) {
      const Case &c = info.param;
      return "nh" + std::to_string(c.nh) + "_hd" + std::to_string(c.hd) + "_B" +
             std::to_string(c.B) + "_p" + std::to_string(c.p0) +
             (c.twoSlots ? "_slots2" : "");
    });

} // namespace
