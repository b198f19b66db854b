//===- gemm_dense_gpu_test.cpp - prefill GEMM on the dense formats --------===//
//
// gemm_dense (tensor-core y = x . W^T; x as fp16 hi + lo with exact E4M3
// weights, per-format scale groups, or as bf16 hi + mid + lo with exact
// BF16 weights, 128-input partials) against:
// - its twin (runtime/twins/gemm_dense_twin.cpp): the same exact products
//   summed in fp64 per scale group; tolerance 3e-5 of max|twin| (fp32 mma
//   sums in hardware order: FP8-per-row sums all 6144 inputs in one fp32
//   accumulator, 1.4e-5 and 1.6e-5 measured on the H200 at 6144->4096 and
//   the LM head, as gemm_trellis's 3e-5);
// - float64 y = x . W^T * scale from unsplit x (small shapes): hi + lo
//   keeps ~22 bits of x, BF16's three planes all of it; tolerance 1e-5
//   (fp32 sums);
// - dense_gemv (batch 8) on the same data: the token-by-token path prefill
//   logits must follow; tolerance 3e-5 (two fp32 sum orders, as above).
// Every format and scale storage, bm 64 / 128, threads 128 / 256, m = 1,
// 37, 512, ragged last column blocks, accumulate, and GLM-5.3's shapes
// (q_a 6144->2048, kv_a 6144->576, 2048->4096 MXFP8; the LM head
// 6144->151552 FP8 per row at m = 64; the router 6144->256 BF16 at a
// 2048-token chunk, the indexer's head weights 6144->32 BF16).
//
//===----------------------------------------------------------------------===//
#include "codegen/gemm_dense_abi.h"
#include "gpu_twin_util.h"

#include <algorithm>
#include <cstring>
#include <thread>

using namespace glm::gputest;
using glm::rt::e4m3ToFloat;

namespace {

/// Random BF16 or FP8 weights [out, in] of a format, with their scales as
/// stored.
struct DenseWeights {
  std::string format, scale; // spec values
  int in = 0, out = 0;
  std::vector<uint8_t> w, s;
  /// Dequantized weight (o, i) as the format defines it.
  double at(int o, int i) const {
    if (format == "bf16") {
      uint16_t b;
      std::memcpy(&b, &w[2 * (size_t(o) * in + i)], 2);
      return glm::rt::bf16ToFloat(b);
    }
    const double q = e4m3ToFloat(w[size_t(o) * in + i]);
    const int sdt = scale == "f16" ? 1 : scale == "bf16" ? 2 : 0;
    auto stored = [&](size_t k) -> double {
      if (sdt == 0) {
        float f;
        std::memcpy(&f, &s[4 * k], 4);
        return f;
      }
      uint16_t h;
      std::memcpy(&h, &s[2 * k], 2);
      return sdt == 1 ? glm::rt::halfToFloat(h) : glm::rt::bf16ToFloat(h);
    };
    if (format == "fp8_block")
      return q * stored(size_t(o / 128) * (in / 128) + i / 128);
    if (format == "fp8_row")
      return q * stored(o);
    return std::ldexp(q, int(s[size_t(o) * (in / 32) + i / 32]) - 127);
  }
};

DenseWeights makeWeights(std::mt19937 &rng, const std::string &format,
                         const std::string &scale, int in, int out) {
  DenseWeights d;
  d.format = format, d.scale = scale, d.in = in, d.out = out;
  if (format == "bf16") { // no scale
    d.w = storeAs(2, randn(rng, size_t(out) * in, 0.02f));
    return d;
  }
  d.w.resize(size_t(out) * in);
  for (auto &b : d.w) {
    b = uint8_t(rng());
    if ((b & 0x7F) == 0x7F) // E4M3 NaN encodings: not produced by packs
      b &= 0xFE;
  }
  const int sdt = scale == "f16" ? 1 : scale == "bf16" ? 2 : 0;
  std::uniform_real_distribution<float> u(1e-3f, 1e-2f);
  std::vector<float> sc;
  if (format == "fp8_block")
    sc.resize(size_t((out + 127) / 128) * (in / 128));
  else if (format == "fp8_row")
    sc.resize(out);
  for (auto &v : sc)
    v = roundTo(sdt, u(rng));
  if (format == "mxfp8") {
    d.s.resize(size_t(out) * (in / 32));
    for (auto &v : d.s)
      v = uint8_t(116 + rng() % 12); // 2^-11 .. 2^0
  } else {
    d.s = storeAs(sdt, sc);
  }
  return d;
}

KernelSpec gemmSpec(const DenseWeights &d, int bm, int threads) {
  return spec("gemm_dense", {{"format", d.format},
                             {"scale", d.scale},
                             {"bm", std::to_string(bm)},
                             {"threads", std::to_string(threads)}});
}

/// One gemm_dense launch: x [m, in] -> y rows at stride outStride (y0 as
/// the initial y when accumulating, else poisoned).
std::vector<float> runGemm(const KernelSpec &s, const DenseWeights &d,
                           const std::vector<float> &x, int m, int outStride,
                           int accumulate, const std::vector<float> &y0,
                           const std::vector<int32_t> &window = {}) {
  const int bm = std::stoi(s.args.at("bm"));
  const int threads = std::stoi(s.args.at("threads"));
  auto dX = upload(x);
  auto dW = upload(d.w);
  auto dS = upload(d.s);
  auto dY = accumulate ? upload(y0) : poisoned<float>(y0.size());
  Args a;
  a.ptr(dX).ptr(dW).ptr(dS).ptr(dY)
      << m << d.in << d.out << outStride << accumulate;
  auto dWin = upload(window.empty() ? std::vector<int32_t>{0} : window);
  if (window.empty())
    a.null(); // every row
  else
    a.ptr(dWin);
  a.launch(kernel(s), glm::codegen::gemmDenseGridX(d.out, bm, threads),
           glm::codegen::gemmDenseGridY(m, bm), unsigned(threads));
  return download<float>(dY, y0.size());
}

/// The twin's y for the same launch.
std::vector<float> runTwinGemm(const KernelSpec &s, const DenseWeights &d,
                               const std::vector<float> &x, int m,
                               int outStride, int accumulate,
                               const std::vector<float> &y0,
                               const std::vector<int32_t> &window = {}) {
  const int bm = std::stoi(s.args.at("bm"));
  const int threads = std::stoi(s.args.at("threads"));
  std::vector<float> y = accumulate ? y0 : std::vector<float>(y0.size(), NAN);
  runTwin(s, glm::codegen::gemmDenseGridX(d.out, bm, threads),
          glm::codegen::gemmDenseGridY(m, bm), unsigned(threads), 0,
          {hp(x.data()), hp(d.w.data()), hp(d.s.data()), hp(y.data()), hi(m),
           hi(d.in), hi(d.out), hi(outStride), hi(accumulate),
           hp(window.empty() ? nullptr : window.data())});
  return y;
}

struct GemmCase {
  std::string format, scale;
  int bm, threads, m, in, out, accumulate;
  bool reference; // also against float64 (small shapes)
};

class GemmDenseGpu : public ::testing::TestWithParam<GemmCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(GemmDenseGpu, MatchesTwinAndFloat64) {
  const GemmCase c = GetParam();
  const int outStride = c.out + 3;
  std::mt19937 rng(std::hash<std::string>()(c.format + c.scale) ^
                   unsigned(c.m * 7919 + c.out + c.bm + c.threads));
  const DenseWeights d = makeWeights(rng, c.format, c.scale, c.in, c.out);
  const std::vector<float> x = randn(rng, size_t(c.m) * c.in);
  const std::vector<float> y0 = randn(rng, size_t(c.m) * outStride);
  const KernelSpec s = gemmSpec(d, c.bm, c.threads);
  const std::string name =
      "gemm_dense " + c.format + " s" + c.scale + " bm" + std::to_string(c.bm) +
      " t" + std::to_string(c.threads) + " " + std::to_string(c.m) + "x" +
      std::to_string(c.in) + "->" + std::to_string(c.out) +
      (c.accumulate ? " acc" : "");
  const std::vector<float> y =
      runGemm(s, d, x, c.m, outStride, c.accumulate, y0);
  const std::vector<float> t =
      runTwinGemm(s, d, x, c.m, outStride, c.accumulate, y0);
  Err et;
  for (int r = 0; r < c.m; ++r)
    for (int o = 0; o < c.out; ++o)
      et.add(y[size_t(r) * outStride + o], t[size_t(r) * outStride + o]);
  report(name + " vs_twin", et, 3e-5,
         "fp32 mma sums of the twin's exact products");
  if (!c.reference)
    return;
  Err e;
  for (int r = 0; r < c.m; ++r)
    for (int o = 0; o < c.out; ++o) {
      double ref = c.accumulate ? y0[size_t(r) * outStride + o] : 0.0;
      for (int i = 0; i < c.in; ++i)
        ref += d.at(o, i) * x[size_t(r) * c.in + i];
      e.add(y[size_t(r) * outStride + o], ref);
    }
  report(name, e, 1e-5,
         c.format == "bf16" ? "x exact as bf16 hi + mid + lo, fp32 sums"
                            : "x as fp16 hi + lo (~22 bits), fp32 sums");
}

std::vector<GemmCase> gemmCases() {
  std::vector<GemmCase> v;
  // Every format / scale storage and block shape at m = 1, 37, 512, a
  // ragged last column block (out 300), accumulate on odd cases.
  const std::pair<const char *, const char *> fs[] = {
      {"bf16", "none"},   {"fp8_block", "f32"}, {"fp8_block", "bf16"},
      {"fp8_row", "f16"}, {"fp8_row", "f32"},   {"mxfp8", "none"}};
  int i = 0;
  for (const auto &f : fs)
    for (int bm : {64, 128})
      for (int threads : {128, 256})
        for (int m : {1, 37, 512}) {
          const int in = m == 512 ? 1024 : 2048;
          v.push_back(
              {f.first, f.second, bm, threads, m, in, 300, i++ & 1, true});
        }
  // GLM-5.3's prefill shapes.
  v.push_back({"mxfp8", "none", 128, 256, 512, 6144, 2048, 0, false}); // q_a
  v.push_back({"mxfp8", "none", 128, 256, 512, 6144, 576, 0, false});  // kv_a
  v.push_back({"mxfp8", "none", 64, 256, 300, 6144, 576, 1, false});
  v.push_back({"mxfp8", "none", 128, 256, 512, 2048, 4096, 0, false});
  v.push_back({"mxfp8", "none", 128, 128, 512, 2048, 128, 0, false});
  v.push_back({"fp8_row", "f32", 128, 256, 64, 6144, 151552, 0, false});
  v.push_back({"fp8_block", "f32", 128, 256, 512, 6144, 2048, 0, false});
  v.push_back({"bf16", "none", 128, 256, 2048, 6144, 256, 0, false}); // router
  v.push_back({"bf16", "none", 64, 256, 300, 6144, 256, 1, false});
  v.push_back({"bf16", "none", 128, 256, 512, 6144, 32, 0, false});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmDenseGpu, ::testing::ValuesIn(gemmCases()),
                         [](const auto &info) {
                           const GemmCase &c = info.param;
                           return c.format + "_" + c.scale + "_m" +
                                  std::to_string(c.bm) + "_t" +
                                  std::to_string(c.threads) + "_" +
                                  std::to_string(c.m) + "x" +
                                  std::to_string(c.out) + "_" +
                                  std::to_string(info.index);
                         });

// A prefill chunk's LM head computes only the row blocks its window
// {first, last} meets (io.logit_rows); the others keep y's bytes.
class GemmDenseWindowGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(GemmDenseWindowGpu, ComputesOnlyTheRowBlocksItMeets) {
  std::mt19937 rng(23);
  const int m = 300, in = 1024, out = 520, bm = 64, threads = 256;
  const DenseWeights d = makeWeights(rng, "fp8_row", "f32", in, out);
  const std::vector<float> x = randn(rng, size_t(m) * in);
  const std::vector<float> y0 = randn(rng, size_t(m) * out);
  const KernelSpec s = gemmSpec(d, bm, threads);
  const std::vector<float> all = runGemm(s, d, x, m, out, 1, y0);
  // {window, rows of the blocks it meets}: the last row (block 256..299,
  // 44 rows), rows across a block edge (64..191), none.
  const std::pair<std::vector<int32_t>, int64_t> cases[] = {
      {{299, 299}, 44}, {{127, 128}, 128}, {{5, 4}, 0}};
  for (const auto &[win, rows] : cases) {
    const std::vector<float> y = runGemm(s, d, x, m, out, 1, y0, win);
    const std::vector<float> t = runTwinGemm(s, d, x, m, out, 1, y0, win);
    int64_t kept = 0, computed = 0, wrong = 0;
    for (int r = 0; r < m; ++r) {
      const int b0 = r / bm * bm;
      const bool in = win[0] <= win[1] && b0 <= win[1] && b0 + bm > win[0];
      for (int o = 0; o < out; ++o) {
        const size_t i = size_t(r) * out + o;
        const bool same = in ? std::memcmp(&y[i], &all[i], 4) == 0
                             : std::memcmp(&y[i], &y0[i], 4) == 0 &&
                                   std::memcmp(&t[i], &y0[i], 4) == 0;
        (in ? computed : kept) += 1;
        wrong += !same;
      }
    }
    const std::string name = "gemm_dense window {" + std::to_string(win[0]) +
                             ", " + std::to_string(win[1]) + "}";
    std::printf("[gpu-case] %s: %lld outputs computed, %lld kept: %s\n",
                name.c_str(), (long long)computed, (long long)kept,
                wrong ? "FAIL" : "PASS");
    EXPECT_EQ(wrong, 0) << name;
    EXPECT_EQ(computed, rows * out) << name;
  }
}

// ---------------------------------------------------------------------------
class GemmDenseVsGemv : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// Prefill through gemm_dense must follow the token-by-token dense_gemv:
/// the same 8 rows through both CUDA kernels, every format.
TEST_F(GemmDenseVsGemv, MatchesDenseGemvBatch8) {
  struct Shape {
    const char *format, *scale;
    int in, out;
  };
  const Shape shapes[] = {{"mxfp8", "none", 6144, 2048},
                          {"mxfp8", "none", 6144, 576},
                          {"fp8_block", "f32", 2048, 1024},
                          {"fp8_row", "bf16", 6144, 4096},
                          {"bf16", "none", 6144, 256}}; // the router
  std::mt19937 rng(2024);
  for (const Shape &sh : shapes) {
    const int m = 8, in = sh.in, out = sh.out;
    const DenseWeights d = makeWeights(rng, sh.format, sh.scale, in, out);
    const std::vector<float> x = randn(rng, size_t(m) * in);
    const std::vector<float> y0(size_t(m) * out, 0.0f);
    for (int bm : {64, 128}) {
      const KernelSpec gs = gemmSpec(d, bm, 256);
      const std::vector<float> y = runGemm(gs, d, x, m, out, 0, y0);
      const KernelSpec vs = spec("dense_gemv", {{"format", sh.format},
                                                {"scale", sh.scale},
                                                {"batch", "8"},
                                                {"threads", "256"}});
      auto dX = upload(x);
      auto dW = upload(d.w);
      auto dS = upload(d.s);
      auto dY = poisoned<float>(y0.size());
      Args a;
      a.ptr(dX).ptr(dW).ptr(dS).ptr(dY) << m << in << out << out << 0;
      a.launch(kernel(vs), unsigned((out + 7) / 8), 1, 256); // a warp a row
      const std::vector<float> g = download<float>(dY, y0.size());
      Err e;
      for (size_t i = 0; i < g.size(); ++i)
        e.add(y[i], g[i]);
      report(std::string("gemm_dense vs dense_gemv ") + sh.format + " " +
                 std::to_string(in) + "->" + std::to_string(out) + " bm" +
                 std::to_string(bm),
             e, 3e-5,
             sh.format == std::string("bf16")
                 ? "same weights; x as exact bf16 planes, fp32 sums"
                 : "same weights; x hi + lo vs fp32, fp32 sums");
    }
  }
}

} // namespace
