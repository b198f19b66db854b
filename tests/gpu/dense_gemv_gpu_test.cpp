//===- dense_gemv_gpu_test.cpp - dense GEMV per weight format -------------===//
//
// dense_gemv (BF16, FP8 block-128, FP8 per row, MXFP8; exlr8-format.md §6)
// and dense_gemv_trellis (EXL3 row-major tiles and the exlr8 dense record
// layouts, side 0/1 and side 2) against float64 GEMVs of the dequantized
// weights (E4M3 and BF16 values from runtime/base/numeric.h, trellis values
// from the CPU codec's decodeMatrix). Batch 1 and 8, accumulate and output
// stride exercised.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

using namespace glm::gputest;
namespace trellis = glm::rt::trellis;
using glm::rt::e4m3ToFloat;

namespace {

struct DenseCase {
  std::string format, scale; // spec values
  int batchT, batch, in, out, accumulate;
};

class DenseGemvGpu : public ::testing::TestWithParam<DenseCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(DenseGemvGpu, MatchesFloat64Reference) {
  const DenseCase c = GetParam();
  const int in = c.in, out = c.out, B = c.batch, outStride = out + 7;
  std::mt19937 rng(std::hash<std::string>()(c.format + c.scale) ^ c.batchT);
  const int sdt = c.scale == "f16" ? 1 : c.scale == "bf16" ? 2 : 0;
  std::vector<double> W(size_t(out) * in); // dequantized, [out, in]
  std::vector<uint8_t> wBytes, scaleBytes;
  if (c.format == "bf16") {
    std::vector<float> v = randn(rng, W.size(), 0.05f, 2);
    wBytes = storeAs(2, v);
    for (size_t i = 0; i < W.size(); ++i)
      W[i] = v[i];
  } else {
    wBytes.resize(W.size());
    for (auto &b : wBytes) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F) // E4M3 NaN encodings: not produced by packs
        b &= 0xFE;
    }
    std::vector<float> sc;
    if (c.format == "fp8_block") {
      const int sr = (out + 127) / 128, sc2 = (in + 127) / 128;
      sc.resize(size_t(sr) * sc2);
      for (auto &s : sc)
        s = roundTo(sdt, std::uniform_real_distribution<float>(1e-3f, 1e-2f)(rng));
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
          W[size_t(o) * in + i] = double(e4m3ToFloat(wBytes[size_t(o) * in + i])) *
                                  sc[size_t(o / 128) * sc2 + i / 128];
      scaleBytes = storeAs(sdt, sc);
    } else if (c.format == "fp8_row") {
      sc.resize(out);
      for (auto &s : sc)
        s = roundTo(sdt, std::uniform_real_distribution<float>(1e-3f, 1e-2f)(rng));
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
          W[size_t(o) * in + i] =
              double(e4m3ToFloat(wBytes[size_t(o) * in + i])) * sc[o];
      scaleBytes = storeAs(sdt, sc);
    } else { // mxfp8: e8m0 bytes per 32 inputs
      scaleBytes.resize(size_t(out) * in / 32);
      for (auto &s : scaleBytes)
        s = uint8_t(120 + rng() % 10);
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
          W[size_t(o) * in + i] =
              double(e4m3ToFloat(wBytes[size_t(o) * in + i])) *
              std::ldexp(1.0, int(scaleBytes[size_t(o) * (in / 32) + i / 32]) - 127);
    }
  }
  std::vector<float> x = randn(rng, size_t(B) * in);
  std::vector<float> y0 = randn(rng, size_t(B) * outStride);
  std::vector<double> ref(size_t(B) * outStride);
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i)
        s += W[size_t(o) * in + i] * x[size_t(b) * in + i];
      ref[size_t(b) * outStride + o] =
          s + (c.accumulate ? y0[size_t(b) * outStride + o] : 0.0);
    }
  auto dW = upload(wBytes);
  auto dS = upload(scaleBytes);
  auto dX = upload(x);
  const std::map<std::string, std::string> base = {
      {"format", c.format},
      {"scale", c.scale},
      {"batch", std::to_string(c.batchT)},
      {"threads", "256"}};
  // Launches: rows per block 8 (a warp a row) down to 1 (8 input slices a
  // row), the grids denseGemvBlocks picks for short outputs; then kernels
  // with 2 and 4 rows a warp (groups of rows a block times input slices a
  // group, the last warp partly past `out`; a grid of fewer rows a block
  // than a warp's rounds up to one group) and weights streamed past L1.
  // Each against the float64 reference and the twin.
  struct Variant {
    int rows;        // template rows per warp
    bool stream;     // template loads = stream
    unsigned perBlk; // rows a block the grid gives
  };
  std::vector<Variant> variants = {{1, false, 8}, {1, false, 4},
                                   {1, false, 2}, {1, false, 1},
                                   {1, true, 8},  {2, false, 16},
                                   {2, true, 2},  {4, true, 32},
                                   {4, true, 16}, {4, true, 8},
                                   {4, true, 4},  {4, false, 2}};
  for (const Variant &v : variants) {
    auto args = base;
    if (v.rows > 1)
      args["rows"] = std::to_string(v.rows);
    if (v.stream)
      args["loads"] = "stream";
    KernelSpec s = spec("dense_gemv", args);
    const unsigned grid = unsigned((out + v.perBlk - 1) / v.perBlk);
    const std::string label =
        "dense_gemv " + c.format + " s" + c.scale + " b" +
        std::to_string(c.batchT) + "/" + std::to_string(B) +
        (c.accumulate ? " acc" : "") + " rows/warp " + std::to_string(v.rows) +
        (v.stream ? " stream" : "") + " rows/block " +
        std::to_string(v.perBlk);
    auto dY = c.accumulate ? upload(y0) : poisoned<float>(y0.size());
    Args a;
    a.ptr(dX).ptr(dW);
    if (scaleBytes.empty())
      a.null();
    else
      a.ptr(dS);
    a.ptr(dY) << B << in << out << outStride << c.accumulate;
    a.launch(kernel(s), grid, 1, 256);
    auto y = download<float>(dY, y0.size());
    Err e;
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < out; ++o)
        e.add(y[size_t(b) * outStride + o], ref[size_t(b) * outStride + o]);
    report(label, e, 1e-5, "fp32 accumulation vs float64");
    // The twin (runtime/twins/dense_gemv_twin.cpp): the same decoded
    // weights, fp64 sums.
    std::vector<float> tY =
        c.accumulate ? y0 : std::vector<float>(y0.size(), NAN);
    runTwin(s, grid, 1, 256, 0,
            {hp(x.data()), hp(wBytes.data()),
             hp(scaleBytes.empty() ? nullptr : scaleBytes.data()),
             hp(tY.data()), hi(B), hi(in), hi(out), hi(outStride),
             hi(c.accumulate)});
    Err et;
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < out; ++o)
        et.add(y[size_t(b) * outStride + o], tY[size_t(b) * outStride + o]);
    report(label + " vs_twin", et, 1e-5,
           "fp32 accumulation vs the twin's fp64 sums");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DenseGemvGpu,
    ::testing::Values(DenseCase{"bf16", "none", 1, 1, 2048, 300, 0},
                      DenseCase{"bf16", "none", 8, 8, 1024, 257, 1},
                      DenseCase{"fp8_block", "f32", 1, 1, 1152, 300, 0},
                      DenseCase{"fp8_block", "bf16", 8, 5, 1024, 200, 0},
                      DenseCase{"fp8_row", "f16", 1, 1, 2048, 129, 1},
                      DenseCase{"fp8_row", "f32", 8, 8, 1024, 64, 0},
                      DenseCase{"mxfp8", "none", 1, 1, 2048, 300, 0},
                      DenseCase{"mxfp8", "none", 8, 3, 1024, 100, 1}),
    [](const auto &info) {
      const DenseCase &c = info.param;
      return c.format + "_" + c.scale + "_b" + std::to_string(c.batchT) +
             "_" + std::to_string(info.index);
    });

// ---------------------------------------------------------------------------
struct TrellisCase {
  int K, cb;
  bool e4m3;
  int batchT, batch;
  int layout; // 0 EXL3 row-major, 1 exlr8 side 0/1, 2 exlr8 side 2
};

class DenseGemvTrellisGpu : public ::testing::TestWithParam<TrellisCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(DenseGemvTrellisGpu, MatchesCodecDecode) {
  const TrellisCase c = GetParam();
  const int in = 1024, out = 768, B = c.batch;
  std::mt19937 rng(500 + c.K * 31 + c.cb * 7 + c.layout);
  trellis::Width w = trellis::Width::bits(c.K);
  const auto cb = static_cast<trellis::Codebook>(c.cb);
  const size_t tileWords = size_t(w.wordsPerTile());
  std::vector<uint16_t> words(size_t(in / 16) * (out / 16) * tileWords);
  for (auto &v : words)
    v = uint16_t(rng());
  std::vector<float> Q(size_t(in) * out); // [in, out]
  int sI, sI8, sJ8;
  if (c.layout == 0) {
    trellis::decodeMatrix(words.data(), in, out, w, cb, c.e4m3,
                          trellis::TileOrder::RowMajor, Q.data());
    sI = out / 16, sI8 = out / 2, sJ8 = 8;
  } else if (c.layout == 1) { // entry g: output cols 128g.., [in/16][8]
    const size_t entry = size_t(in / 16) * 8 * tileWords;
    std::vector<float> part(size_t(in) * 128);
    for (int g = 0; g < out / 128; ++g) {
      trellis::decodeMatrix(words.data() + g * entry, in, 128, w, cb, c.e4m3,
                            trellis::TileOrder::RowMajor, part.data());
      for (int i = 0; i < in; ++i)
        std::copy_n(&part[size_t(i) * 128], 128, &Q[size_t(i) * out + 128 * g]);
    }
    sI = 8, sI8 = 64, sJ8 = (in / 16) * 8;
  } else { // entry g: input rows 128g.., [out/128][8][8]
    const size_t entry = size_t(out / 16) * 8 * tileWords;
    for (int g = 0; g < in / 128; ++g)
      trellis::decodeMatrix(words.data() + g * entry, 128, out, w, cb, c.e4m3,
                            trellis::TileOrder::InMajor128,
                            &Q[size_t(128 * g) * out]);
    sI = 8, sI8 = out / 2, sJ8 = 64;
  }
  std::vector<float> xh = randn(rng, size_t(B) * in);
  std::vector<double> ref(size_t(B) * out, 0.0);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < in; ++i) {
      const double xi = xh[size_t(b) * in + i];
      for (int o = 0; o < out; ++o)
        ref[size_t(b) * out + o] += xi * Q[size_t(i) * out + o];
    }
  const char *cbn = c.cb == 0 ? "3inst" : c.cb == 1 ? "mcg" : "mul1";
  KernelSpec s = spec("dense_gemv_trellis", {{"K", std::to_string(c.K)},
                                             {"codebook", cbn},
                                             {"e4m3", c.e4m3 ? "1" : "0"},
                                             {"batch", std::to_string(c.batchT)},
                                             {"threads", "128"}});
  auto dT = upload(words);
  auto dX = upload(xh);
  auto dZ = poisoned<float>(ref.size());
  Args a;
  a.ptr(dX).ptr(dT).ptr(dZ) << B << in << out << sI << sI8 << sJ8;
  a.launch(kernel(s), (out / 16 + 3) / 4, 1, 128);
  auto z = download<float>(dZ, ref.size());
  Err e;
  for (size_t i = 0; i < z.size(); ++i)
    e.add(z[i], ref[i]);
  const char *lay[] = {"exl3_rowmajor", "exlr8_side0", "exlr8_side2"};
  report(std::string("dense_gemv_trellis k") + std::to_string(c.K) + " " + cbn +
             (c.e4m3 ? " e4m3" : "") + " b" + std::to_string(c.batchT) + "/" +
             std::to_string(B) + " " + lay[c.layout],
         e, 1e-5, "fp32 accumulation vs float64");
  // The twin (runtime/twins/dense_trellis_twin.cpp): fp64 sums.
  std::vector<float> tZ(ref.size(), NAN);
  runTwin(s, unsigned((out / 16 + 3) / 4), 1, 128, 0,
          {hp(xh.data()), hp(words.data()), hp(tZ.data()), hi(B), hi(in),
           hi(out), hi(sI), hi(sI8), hi(sJ8)});
  report(std::string("dense_gemv_trellis k") + std::to_string(c.K) + " " + cbn +
             (c.e4m3 ? " e4m3" : "") + " b" + std::to_string(c.batchT) + "/" +
             std::to_string(B) + " " + lay[c.layout] + " vs_twin",
         vsTwin(z, tZ), 1e-5, "fp32 per-lane sums vs the twin's fp64 sums");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DenseGemvTrellisGpu,
    ::testing::Values(TrellisCase{2, 1, true, 1, 1, 0},
                      TrellisCase{3, 2, false, 8, 8, 0},
                      TrellisCase{4, 0, false, 8, 6, 1},
                      TrellisCase{4, 1, true, 1, 1, 1},
                      TrellisCase{3, 1, true, 8, 8, 2},
                      TrellisCase{5, 2, false, 1, 1, 2}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

} // namespace
