//===- dense_trellis_gpu_test.cpp - split-k dense trellis decode GEMV -----===//
//
// dense_trellis (codegen/templates/dense_trellis.cuh) against the CPU codec:
// - Decode: one-hot input rows make every output row a row of the decoded
//   matrix, which must equal trellis::decodeMatrix bit for bit, for K = 1..8,
//   every codebook, E4M3 on/off, in the EXL3 row-major and both exlr8 dense
//   record layouts.
// - GEMV: random inputs against a float64 evaluation with Q from the codec,
//   batches 1..8 (runtime batch below the template bound too), split counts
//   1, uneven and the maximum, register and cp.async pipelines, the output
//   Hadamard * svh fold with an unpadded width and a row stride (the padded
//   tail must stay untouched). Two runs must be bit-identical (fixed
//   reduction order) and the arrival counters must return to zero.
//
//===----------------------------------------------------------------------===//
#include "codegen/dense_trellis_abi.h"
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

#include <algorithm>

using namespace glm::gputest;
namespace trellis = glm::rt::trellis;
using glm::codegen::DenseTrellisDims;

namespace {

const char *cbName(int cb) {
  return cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
}
const char *kLayout[] = {"exl3_rowmajor", "exlr8_side0", "exlr8_side2"};

KernelSpec denseSpec(int K, int cb, bool e4m3, int batchT, int pipe,
                     int threads) {
  return spec("dense_trellis", {{"K", std::to_string(K)},
                                {"codebook", cbName(cb)},
                                {"e4m3", e4m3 ? "1" : "0"},
                                {"batch", std::to_string(batchT)},
                                {"pipe", std::to_string(pipe)},
                                {"minblocks", pipe == 4 ? "4" : "0"},
                                {"threads", std::to_string(threads)}});
}

/// A random trellis matrix [in, out] in one of the three dense layouts, its
/// tile strides and its decoded values Q [in][out].
struct Matrix {
  int in = 0, out = 0;
  std::vector<uint16_t> words;
  std::vector<float> Q;
  int sI = 0, sI8 = 0, sJ8 = 0;

  Matrix(std::mt19937 &rng, int in_, int out_, int K, int cb, bool e4m3,
         int layout)
      : in(in_), out(out_) {
    const trellis::Width w = trellis::Width::bits(K);
    const auto c = static_cast<trellis::Codebook>(cb);
    const size_t tileWords = size_t(w.wordsPerTile());
    words.resize(size_t(in / 16) * (out / 16) * tileWords);
    for (auto &v : words)
      v = uint16_t(rng());
    Q.assign(size_t(in) * out, 0.0f);
    if (layout == 0) {
      trellis::decodeMatrix(words.data(), in, out, w, c, e4m3,
                            trellis::TileOrder::RowMajor, Q.data());
      sI = out / 16, sI8 = out / 2, sJ8 = 8;
    } else if (layout == 1) { // entry g: output cols 128g.., [in/16][8]
      const size_t entry = size_t(in / 16) * 8 * tileWords;
      std::vector<float> part(size_t(in) * 128);
      for (int g = 0; g < out / 128; ++g) {
        trellis::decodeMatrix(words.data() + g * entry, in, 128, w, c, e4m3,
                              trellis::TileOrder::RowMajor, part.data());
        for (int i = 0; i < in; ++i)
          std::copy_n(&part[size_t(i) * 128], 128,
                      &Q[size_t(i) * out + 128 * g]);
      }
      sI = 8, sI8 = 64, sJ8 = (in / 16) * 8;
    } else { // entry g: input rows 128g.., [out/128][8][8]
      const size_t entry = size_t(out / 16) * 8 * tileWords;
      for (int g = 0; g < in / 128; ++g)
        trellis::decodeMatrix(words.data() + g * entry, 128, out, w, c, e4m3,
                              trellis::TileOrder::InMajor128,
                              &Q[size_t(128 * g) * out]);
      sI = 8, sI8 = out / 2, sJ8 = 64;
    }
  }
};

/// One launch of dense_trellis; returns y [batch][yStride].
struct Launch {
  KernelSpec spec;
  DenseTrellisDims d;
  int outValid = 0, yStride = 0;
  bool svh = false;
};

std::vector<float> runDense(const Launch &L, const Matrix &m,
                            const std::vector<float> &x,
                            const std::vector<float> &svh,
                            cuda::DeviceBuffer &dCounters) {
  auto dT = upload(m.words);
  auto dX = upload(x);
  auto dS = upload(svh);
  cuda::DeviceBuffer dScratch(L.d.scratchFloats() * 4);
  const size_t ny = size_t(L.d.batch) * L.yStride;
  auto dY = poisoned<float>(ny);
  Args a;
  a.ptr(dX).ptr(dT);
  if (L.svh)
    a.ptr(dS);
  else
    a.null();
  a.ptr(dScratch).ptr(dCounters).ptr(dY)
      << L.d.batch << int(L.d.in) << int(L.d.out) << L.yStride << L.outValid
      << m.sI << m.sI8 << m.sJ8 << L.d.split;
  a.launch(kernel(L.spec), L.d.grid(), 1, unsigned(L.d.threads));
  return download<float>(dY, ny);
}

// ----------------------------------------------------------- decode ----

struct DecodeCase {
  int K, cb;
  bool e4m3;
  int layout, pipe;
};

class DenseTrellisDecodeGpu : public ::testing::TestWithParam<DecodeCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(DenseTrellisDecodeGpu, OneHotRowsEqualCodecDecode) {
  const DecodeCase c = GetParam();
  const int in = 512, out = 384, B = 8;
  std::mt19937 rng(9100 + c.K * 37 + c.cb * 5 + c.layout * 3 + c.e4m3);
  const Matrix m(rng, in, out, c.K, c.cb, c.e4m3, c.layout);
  // Row b picks input row rowOf[b]: spread over tiles, chunks and 8-row
  // groups (tile row i & 7 and i >> 3 both vary).
  const int rowOf[B] = {0, 17, 130, 255, 256, 301, 444, 511};
  std::vector<float> x(size_t(B) * in, 0.0f);
  for (int b = 0; b < B; ++b)
    x[size_t(b) * in + rowOf[b]] = 1.0f;
  Launch L;
  L.spec = denseSpec(c.K, c.cb, c.e4m3, 8, c.pipe, 128);
  L.d.batch = B, L.d.in = in, L.d.out = out, L.d.threads = 128;
  L.d.split = 12; // uneven chunks of 32 tile rows, 3 blocks per output
  L.outValid = out, L.yStride = out;
  cuda::DeviceBuffer dCounters(L.d.counterInts() * 4);
  GLM_CU(cuMemsetD8(dCounters.ptr(), 0, dCounters.size()));
  const std::vector<float> y = runDense(L, m, x, {}, dCounters);
  Err e;
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < out; ++o)
      e.add(y[size_t(b) * out + o], m.Q[size_t(rowOf[b]) * out + o]);
  const std::string name = std::string("dense_trellis decode k") +
                           std::to_string(c.K) + " " + cbName(c.cb) +
                           (c.e4m3 ? " e4m3 " : " ") + kLayout[c.layout] +
                           " p" + std::to_string(c.pipe);
  report(name, e, 0.0, "one-hot rows vs codec decodeMatrix");
}

std::vector<DecodeCase> decodeCases() {
  std::vector<DecodeCase> v;
  for (int K = 1; K <= 8; ++K)
    for (int cb = 0; cb < 3; ++cb)
      v.push_back({K, cb, (K + cb) % 2 == 0, (K + cb) % 3, K % 2 ? 0 : 4});
  // E4M3 both ways at the GLM-5.3 widths.
  for (int K = 2; K <= 4; ++K)
    for (int e = 0; e < 2; ++e)
      v.push_back({K, 1, e == 1, K % 3, 4});
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Widths, DenseTrellisDecodeGpu, ::testing::ValuesIn(decodeCases()),
    [](const auto &info) { return "case" + std::to_string(info.index); });

// ------------------------------------------------------------- gemv ----

struct GemvCase {
  int K, cb;
  bool e4m3;
  int batchT, batch, layout, pipe, threads;
  int in, out, outValid, split; // split 0: denseTrellisSplit on 132 SMs
  bool svh;
};

class DenseTrellisGemvGpu : public ::testing::TestWithParam<GemvCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(DenseTrellisGemvGpu, MatchesFloat64AndIsReproducible) {
  const GemvCase c = GetParam();
  const int B = c.batch;
  std::mt19937 rng(7300 + c.K * 13 + c.cb * 3 + c.layout + c.in + c.batch);
  const Matrix m(rng, c.in, c.out, c.K, c.cb, c.e4m3, c.layout);
  const std::vector<float> x = randn(rng, size_t(B) * c.in);
  std::vector<float> svh(size_t(c.out));
  for (auto &v : svh)
    v = (rng() & 1 ? 1.0f : -1.0f) * (0.5f + float(rng() % 1000) / 1000.0f);
  // float64 reference: z = x . Q, then optionally H(z) * svh.
  std::vector<double> ref(size_t(B) * c.out, 0.0);
  for (int b = 0; b < B; ++b) {
    double *r = &ref[size_t(b) * c.out];
    for (int i = 0; i < c.in; ++i) {
      const double xi = x[size_t(b) * c.in + i];
      const float *q = &m.Q[size_t(i) * c.out];
      for (int o = 0; o < c.out; ++o)
        r[o] += xi * q[o];
    }
    if (c.svh) {
      hadamard128(r, size_t(c.out));
      for (int o = 0; o < c.out; ++o)
        r[o] *= svh[o];
    }
  }
  Launch L;
  L.spec = denseSpec(c.K, c.cb, c.e4m3, c.batchT, c.pipe, c.threads);
  L.d.batch = B, L.d.in = c.in, L.d.out = c.out, L.d.threads = c.threads;
  glm::codegen::DenseTrellisTuning t = glm::codegen::defaultDenseTrellisTuning();
  t.threads = c.threads;
  L.d.split = c.split ? c.split
                      : glm::codegen::denseTrellisSplit(c.in, c.out, 132, t);
  ASSERT_TRUE(L.d.valid());
  L.svh = c.svh;
  L.outValid = c.outValid;
  L.yStride = c.outValid + (c.outValid < c.out ? 3 : 0);
  cuda::DeviceBuffer dCounters(L.d.counterInts() * 4);
  GLM_CU(cuMemsetD8(dCounters.ptr(), 0, dCounters.size()));
  const std::vector<float> y = runDense(L, m, x, svh, dCounters);
  Err e;
  size_t tailTouched = 0;
  for (int b = 0; b < B; ++b) {
    for (int o = 0; o < c.outValid; ++o)
      e.add(y[size_t(b) * L.yStride + o], ref[size_t(b) * c.out + o]);
    for (int o = c.outValid; o < L.yStride; ++o) // poisoned NaN stays
      tailTouched += !std::isnan(y[size_t(b) * L.yStride + o]);
  }
  const std::string name =
      std::string("dense_trellis k") + std::to_string(c.K) + " " +
      cbName(c.cb) + (c.e4m3 ? " e4m3" : "") + " b" +
      std::to_string(c.batchT) + "/" + std::to_string(B) + " " +
      std::to_string(c.in) + "x" + std::to_string(c.out) +
      (c.outValid < c.out ? "(" + std::to_string(c.outValid) + ")" : "") +
      " " + kLayout[c.layout] + " s" + std::to_string(L.d.split) + " p" +
      std::to_string(c.pipe) + " t" + std::to_string(c.threads) +
      (c.svh ? " svh" : "");
  report(name, e, 2e-5, "fp16 hi+lo activations, fp32 accumulation vs "
                        "float64");
  {
    // The twin (runtime/twins/dense_trellis_twin.cpp): the same reduction
    // tree in fp32, fp64 sums of each warp item's exact products.
    std::vector<float> tScratch(L.d.scratchFloats() + 1, NAN);
    std::vector<int> tCounters(L.d.counterInts(), 0);
    std::vector<float> tY(y.size(), NAN);
    runTwin(L.spec, L.d.grid(), 1, unsigned(L.d.threads), 0,
            {hp(x.data()), hp(m.words.data()), hp(c.svh ? svh.data() : nullptr),
             hp(tScratch.data()), hp(tCounters.data()), hp(tY.data()), hi(B),
             hi(c.in), hi(c.out), hi(L.yStride), hi(L.outValid), hi(m.sI),
             hi(m.sI8), hi(m.sJ8), hi(L.d.split)});
    Err et;
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < c.outValid; ++o)
        et.add(y[size_t(b) * L.yStride + o], tY[size_t(b) * L.yStride + o]);
    report(name + " vs_twin", et, 2e-5,
           "fp32 mma sums of the twin's exact products");
  }
  if (c.outValid < c.out)
    reportExact(name + " tail_untouched", tailTouched,
                size_t(B) * size_t(L.yStride - c.outValid));
  const std::vector<float> y2 = runDense(L, m, x, svh, dCounters);
  size_t diff = 0;
  for (size_t i = 0; i < y.size(); ++i)
    diff += std::memcmp(&y[i], &y2[i], 4) != 0;
  reportExact(name + " rerun_bit_identical", diff, y.size());
  auto counters = download<int>(dCounters, L.d.counterInts());
  reportExact(name + " counters_reset",
              size_t(std::count_if(counters.begin(), counters.end(),
                                   [](int v) { return v != 0; })),
              counters.size());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DenseTrellisGemvGpu,
    ::testing::Values(
        //       K cb e4m3 bT  B lay pipe thr   in    out  valid split svh
        GemvCase{2, 1, true, 1, 1, 0, 4, 128, 1024, 768, 768, 0, false},
        GemvCase{3, 2, false, 8, 8, 0, 0, 256, 1024, 768, 768, 8, false},
        GemvCase{4, 0, false, 8, 6, 1, 4, 32, 1024, 768, 768, 1, false},
        GemvCase{4, 1, true, 1, 1, 1, 2, 64, 1024, 768, 768, 64, true},
        GemvCase{3, 1, true, 8, 8, 2, 4, 128, 1024, 768, 700, 12, true},
        GemvCase{2, 1, true, 8, 5, 1, 4, 128, 1024, 768, 768, 8, false},
        GemvCase{5, 2, false, 4, 3, 2, 0, 128, 1024, 640, 576, 0, true},
        GemvCase{8, 1, false, 2, 2, 0, 3, 128, 2048, 384, 384, 0, true},
        GemvCase{6, 0, true, 4, 4, 0, 2, 256, 2048, 256, 200, 0, true},
        // GLM-5.3 shapes: q_a (6144 -> 2048), o_proj-like (4096 -> 6144).
        GemvCase{4, 1, true, 1, 1, 2, 4, 128, 6144, 2048, 2048, 0, true},
        GemvCase{2, 1, true, 8, 8, 1, 4, 128, 6144, 2048, 2048, 0, false},
        GemvCase{3, 1, true, 1, 1, 2, 4, 128, 4096, 6144, 6144, 0, true}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

} // namespace
