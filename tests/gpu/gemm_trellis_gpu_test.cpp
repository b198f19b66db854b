//===- gemm_trellis_gpu_test.cpp - prefill GEMM on trellis weights --------===//
//
// gemm_trellis (tensor-core z = xh . T, T decoded on the fly) against float64
// references built from the CPU codec (runtime/codec/trellis.h):
// - decode: Q from decodeMatrix, z_ref = fp16(xh) . Q in float64. The kernel
//   rounds xh to fp16 when it stages it and feeds exact fp16/E4M3 weights to
//   mma.sync with fp32 accumulation, so the only error left is fp32
//   accumulation order: tolerance 3e-5 of max|z| (dense_gemv_trellis uses
//   1e-5 for pure fp32 sums; mma's fp32 adds may truncate).
// - reconstruct: y = H(z) * svh vs x . W with W = reconstructInPlace(Q, suh,
//   svh) and unrounded xh: the fp16 rounding of xh (unit roundoff 2^-11 =
//   4.9e-4 per element, errors independent) dominates; tolerance 2e-3.
// - against dense_gemv_trellis for M = 1..8 on fp16-representable xh: both
//   sum the same products in fp32, tolerance 1e-5.
// Shapes include GLM-5.3's 6144->2048 and 2048->6144, M not a multiple of
// the block tile, out not a multiple of 128, the exlr8 tile layouts, all
// codebooks, E4M3 on/off, K 1..5 and 8.
//
//===----------------------------------------------------------------------===//
#include "gpu_twin_util.h"
#include "runtime/codec/trellis.h"

#include <algorithm>
#include <thread>

using namespace glm::gputest;
namespace trellis = glm::rt::trellis;

namespace {

const char *cbName(int cb) {
  return cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
}

/// A random trellis matrix (in x out) in one of the tile layouts, decoded by
/// the CPU codec. layout 0: EXL3 row-major; 1: exlr8 side 0/1 (entries of
/// 128 output columns); 2: exlr8 side 2 (entries of 128 input rows).
struct TrellisMatrix {
  std::vector<uint16_t> words;
  std::vector<float> q; // [in, out]
  int sI = 0, sI8 = 0, sJ8 = 0;
};

TrellisMatrix makeMatrix(std::mt19937 &rng, int K, int cb, bool e4m3, int in,
                         int out, int layout) {
  TrellisMatrix t;
  trellis::Width w = trellis::Width::bits(K);
  const auto book = static_cast<trellis::Codebook>(cb);
  const size_t tileWords = size_t(w.wordsPerTile());
  t.words.resize(size_t(in / 16) * (out / 16) * tileWords);
  for (auto &v : t.words)
    v = uint16_t(rng());
  t.q.resize(size_t(in) * out);
  if (layout == 0) {
    trellis::decodeMatrix(t.words.data(), in, out, w, book, e4m3,
                          trellis::TileOrder::RowMajor, t.q.data());
    t.sI = out / 16, t.sI8 = out / 2, t.sJ8 = 8;
  } else if (layout == 1) {
    const size_t entry = size_t(in / 16) * 8 * tileWords;
    std::vector<float> part(size_t(in) * 128);
    for (int g = 0; g < out / 128; ++g) {
      trellis::decodeMatrix(t.words.data() + g * entry, in, 128, w, book,
                            e4m3, trellis::TileOrder::RowMajor, part.data());
      for (int i = 0; i < in; ++i)
        std::copy_n(&part[size_t(i) * 128], 128,
                    &t.q[size_t(i) * out + 128 * g]);
    }
    t.sI = 8, t.sI8 = 64, t.sJ8 = (in / 16) * 8;
  } else {
    const size_t entry = size_t(out / 16) * 8 * tileWords;
    for (int g = 0; g < in / 128; ++g)
      trellis::decodeMatrix(t.words.data() + g * entry, 128, out, w, book,
                            e4m3, trellis::TileOrder::InMajor128,
                            &t.q[size_t(128 * g) * out]);
    t.sI = 8, t.sI8 = out / 2, t.sJ8 = 64;
  }
  return t;
}

/// ref[r][o] = sum_i x[r][i] * w[i][o] in float64, rows in parallel.
std::vector<double> matmul64(const std::vector<double> &x,
                             const std::vector<float> &w, int M, int in,
                             int out) {
  std::vector<double> ref(size_t(M) * out, 0.0);
  auto rows = [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      double *y = &ref[size_t(r) * out];
      for (int i = 0; i < in; ++i) {
        const double xi = x[size_t(r) * in + i];
        const float *wr = &w[size_t(i) * out];
        for (int o = 0; o < out; ++o)
          y[o] += xi * wr[o];
      }
    }
  };
  const int nt = int(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  const int per = (M + nt - 1) / nt;
  for (int t = 0; t < nt; ++t) {
    const int r0 = t * per, r1 = std::min(M, r0 + per);
    if (r0 < r1)
      pool.emplace_back(rows, r0, r1);
  }
  for (auto &t : pool)
    t.join();
  return ref;
}

KernelSpec gemmSpec(int K, int cb, bool e4m3, int xt, int bm,
                    int threads = 256) {
  return spec("gemm_trellis", {{"K", std::to_string(K)},
                               {"codebook", cbName(cb)},
                               {"e4m3", e4m3 ? "1" : "0"},
                               {"xt", xt == 1 ? "f16" : "f32"},
                               {"bm", std::to_string(bm)},
                               {"threads", std::to_string(threads)}});
}

/// Runs the GEMM: xh [M, in] (row stride xStride) stored as xt -> z [M, out]
/// fp32 (row stride zStride). Block = threads = BN output columns.
std::vector<float> runGemm(const KernelSpec &s, int xt, int bm,
                           const std::vector<float> &xh, int xStride,
                           const TrellisMatrix &t, int M, int in, int out,
                           int zStride, int accumulate = 0,
                           const std::vector<float> *z0 = nullptr) {
  auto dT = upload(t.words);
  cuda::DeviceBuffer dX = xt == 1 ? upload(storeAs(1, xh)) : upload(xh);
  cuda::DeviceBuffer dZ =
      z0 ? upload(*z0) : poisoned<float>(size_t(M) * zStride);
  Args a;
  a.ptr(dX).ptr(dT).ptr(dZ) << M << in << out << xStride << zStride
                            << accumulate << t.sI << t.sI8 << t.sJ8;
  const int threads = std::stoi(s.args.at("threads"));
  a.launch(kernel(s), unsigned((out + threads - 1) / threads),
           unsigned((M + bm - 1) / bm), unsigned(threads));
  return download<float>(dZ, size_t(M) * zStride);
}

struct GemmCase {
  int K, cb;
  bool e4m3;
  int xt, bm, M, in, out, layout;
  bool reconstruct; // also check the full W = suh.H.Q.H.svh path
  int threads = 256;
};

class GemmTrellisGpu : public ::testing::TestWithParam<GemmCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(GemmTrellisGpu, MatchesCodecReference) {
  const GemmCase c = GetParam();
  const int M = c.M, in = c.in, out = c.out;
  const int xStride = in + (c.xt == 1 ? 8 : 4), zStride = out + 2;
  std::mt19937 rng(900 + c.K * 131 + c.cb * 17 + c.layout * 5 + M);
  TrellisMatrix t = makeMatrix(rng, c.K, c.cb, c.e4m3, in, out, c.layout);
  const KernelSpec s = gemmSpec(c.K, c.cb, c.e4m3, c.xt, c.bm, c.threads);
  std::string name = std::string("gemm_trellis k") + std::to_string(c.K) +
                     " " + cbName(c.cb) + (c.e4m3 ? " e4m3" : "") + " x" +
                     (c.xt == 1 ? "f16" : "f32") + " bm" +
                     std::to_string(c.bm) + " t" + std::to_string(c.threads) +
                     " " + std::to_string(M) + "x" +
                     std::to_string(in) + "->" + std::to_string(out) +
                     (c.layout == 1 ? " exlr8_side0"
                                    : c.layout == 2 ? " exlr8_side2" : "");

  // xh: either the rotated input of random x with random suh (reconstruct
  // check), or plain normal values; row stride xStride.
  std::vector<float> suh, svh, x;
  std::vector<float> xh(size_t(M) * xStride, 0.0f);
  if (c.reconstruct) {
    std::uniform_real_distribution<float> mag(0.5f, 1.5f);
    suh.resize(in);
    svh.resize(out);
    for (auto &v : suh)
      v = glm::rt::roundToHalf(mag(rng) * ((rng() & 1) ? -1.0f : 1.0f));
    for (auto &v : svh)
      v = glm::rt::roundToHalf(mag(rng) * ((rng() & 1) ? -1.0f : 1.0f));
    x = randn(rng, size_t(M) * in);
    std::vector<double> row(in);
    for (int r = 0; r < M; ++r) {
      for (int i = 0; i < in; ++i)
        row[i] = double(x[size_t(r) * in + i]) * suh[i];
      hadamard128(row.data(), size_t(in));
      for (int i = 0; i < in; ++i)
        xh[size_t(r) * xStride + i] = float(row[i]);
    }
  } else {
    std::normal_distribution<float> nd;
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < in; ++i)
        xh[size_t(r) * xStride + i] = nd(rng);
  }
  // What the kernel multiplies: xh rounded to fp16.
  std::vector<double> x16(size_t(M) * in);
  for (int r = 0; r < M; ++r)
    for (int i = 0; i < in; ++i)
      x16[size_t(r) * in + i] = glm::rt::roundToHalf(xh[size_t(r) * xStride + i]);
  const std::vector<double> zRef = matmul64(x16, t.q, M, in, out);
  const std::vector<float> z =
      runGemm(s, c.xt, c.bm, xh, xStride, t, M, in, out, zStride);
  Err e;
  for (int r = 0; r < M; ++r)
    for (int o = 0; o < out; ++o)
      e.add(z[size_t(r) * zStride + o], zRef[size_t(r) * out + o]);
  report(name, e, 3e-5, "fp32 accumulation of exact fp16 products");
  {
    // The twin (runtime/twins/gemm_trellis_twin.cpp): the same exact
    // products summed in fp64.
    const std::vector<uint8_t> x16b = storeAs(1, xh);
    std::vector<float> tz(size_t(M) * zStride, NAN);
    runTwin(s, unsigned((out + c.threads - 1) / c.threads),
            unsigned((M + c.bm - 1) / c.bm), unsigned(c.threads), 0,
            {hp(c.xt == 1 ? static_cast<const void *>(x16b.data()) : xh.data()),
             hp(t.words.data()), hp(tz.data()), hi(M), hi(in), hi(out),
             hi(xStride), hi(zStride), hi(0), hi(t.sI), hi(t.sI8), hi(t.sJ8)});
    Err et;
    for (int r = 0; r < M; ++r)
      for (int o = 0; o < out; ++o)
        et.add(z[size_t(r) * zStride + o], tz[size_t(r) * zStride + o]);
    report(name + " vs_twin", et, 3e-5,
           "fp32 mma sums of the twin's exact products");
  }

  if (c.reconstruct) {
    // y = H(z) * svh against x . W, W = diag(suh) H Q H diag(svh).
    std::vector<float> W = t.q;
    trellis::reconstructInPlace(W.data(), in, out, suh.data(), svh.data());
    std::vector<double> xd(x.begin(), x.end());
    const std::vector<double> yRef = matmul64(xd, W, M, in, out);
    Err ey;
    std::vector<double> row(out);
    for (int r = 0; r < M; ++r) {
      for (int o = 0; o < out; ++o)
        row[o] = z[size_t(r) * zStride + o];
      hadamard128(row.data(), size_t(out));
      for (int o = 0; o < out; ++o)
        ey.add(row[o] * svh[o], yRef[size_t(r) * out + o]);
    }
    report(name + " reconstruct", ey, 2e-3,
           "fp16 rounding of the rotated input (2^-11 per element)");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTrellisGpu,
    ::testing::Values(
        // GLM-5.3 expert gate/up and down shapes, M not a multiple of BM.
        GemmCase{4, 1, true, 1, 128, 300, 6144, 2048, 0, true},
        GemmCase{3, 2, false, 0, 128, 200, 2048, 6144, 0, true},
        GemmCase{2, 0, false, 1, 64, 77, 6144, 2048, 0, false, 128},
        // Small M, out not a multiple of 128, every codebook and E4M3 mode.
        GemmCase{2, 1, true, 0, 64, 16, 1024, 768, 0, false},
        GemmCase{4, 2, true, 1, 128, 129, 1024, 1040, 0, false},
        GemmCase{4, 2, true, 0, 128, 129, 1024, 1040, 0, false, 128},
        GemmCase{3, 0, true, 1, 128, 1, 512, 256, 0, false},
        GemmCase{4, 0, false, 0, 64, 250, 512, 384, 0, false},
        GemmCase{2, 2, false, 1, 128, 64, 2048, 512, 0, false},
        // Odd and extreme widths.
        GemmCase{5, 1, false, 0, 128, 96, 1024, 512, 0, false},
        GemmCase{1, 0, false, 1, 64, 40, 512, 256, 0, false, 128},
        GemmCase{8, 2, true, 1, 128, 130, 1024, 256, 0, false},
        // exlr8 dense record layouts.
        GemmCase{3, 1, true, 1, 128, 140, 1024, 768, 1, false, 128},
        GemmCase{4, 1, true, 0, 64, 70, 1024, 768, 2, false}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

// ---------------------------------------------------------------------------
class GemmTrellisVsGemv : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// For M = 1..8 the GEMM equals the decode GEMV (same xh, same tiles) up to
/// fp32 accumulation order when xh is fp16-representable.
TEST_F(GemmTrellisVsGemv, MatchesDenseGemvTrellisForSmallBatches) {
  const int in = 2048, out = 1024, K = 3, cb = 1;
  const bool e4m3 = true;
  std::mt19937 rng(77);
  TrellisMatrix t = makeMatrix(rng, K, cb, e4m3, in, out, 0);
  for (int M = 1; M <= 8; M += 7) {
    std::vector<float> xh = randn(rng, size_t(M) * in, 1.0f, /*dt=*/1);
    const KernelSpec gs = gemmSpec(K, cb, e4m3, 0, 64);
    const std::vector<float> z = runGemm(gs, 0, 64, xh, in, t, M, in, out, out);
    KernelSpec vs = spec("dense_gemv_trellis", {{"K", std::to_string(K)},
                                                {"codebook", cbName(cb)},
                                                {"e4m3", "1"},
                                                {"batch", std::to_string(M)},
                                                {"threads", "128"}});
    auto dT = upload(t.words);
    auto dX = upload(xh);
    auto dZ = poisoned<float>(size_t(M) * out);
    Args a;
    a.ptr(dX).ptr(dT).ptr(dZ) << M << in << out << t.sI << t.sI8 << t.sJ8;
    a.launch(kernel(vs), (out / 16 + 3) / 4, 1, 128);
    const std::vector<float> g = download<float>(dZ, size_t(M) * out);
    Err e;
    for (size_t i = 0; i < g.size(); ++i)
      e.add(z[i], g[i]);
    report("gemm_trellis vs dense_gemv_trellis M" + std::to_string(M), e,
           1e-5, "same fp16 products, fp32 sums in another order");
  }
}

/// accumulate = 1 adds to z (residual-style use).
TEST_F(GemmTrellisVsGemv, AccumulateAddsToOutput) {
  const int in = 512, out = 256, M = 33;
  std::mt19937 rng(78);
  TrellisMatrix t = makeMatrix(rng, 2, 2, false, in, out, 0);
  std::vector<float> xh = randn(rng, size_t(M) * in, 1.0f, 1);
  std::vector<float> z0 = randn(rng, size_t(M) * out);
  const KernelSpec s = gemmSpec(2, 2, false, 1, 128);
  const std::vector<float> z =
      runGemm(s, 1, 128, xh, in, t, M, in, out, out, 1, &z0);
  std::vector<double> xd(xh.begin(), xh.end());
  std::vector<double> ref = matmul64(xd, t.q, M, in, out);
  Err e;
  for (size_t i = 0; i < ref.size(); ++i)
    e.add(z[i], ref[i] + z0[i]);
  report("gemm_trellis accumulate", e, 3e-5, "fp32 accumulation");
}

} // namespace

// ---------------------------------------------------------------------------
namespace {

/// Mirrors glm::GemmItem (gemm_trellis_grouped.cuh), 32 bytes.
struct GemmItemHost {
  uint64_t tiles;
  int64_t zOff;
  int32_t rowStart, rows, xCol, k;
};
static_assert(sizeof(GemmItemHost) == 32, "GemmItem ABI");

/// CUDA's z against the twin's over a launch of gemm_trellis_grouped: the
/// same items with host tile pointers; NaN (unbuilt widths) must match.
void groupedVsTwin(const std::string &name, const KernelSpec &s, unsigned gy,
                   unsigned threads, const void *xh,
                   const std::vector<int> *rowIds,
                   std::vector<GemmItemHost> items, const uint8_t *blob,
                   uint64_t dBlob, std::vector<float> tz,
                   const std::vector<float> &z, int in, int out, int xStride,
                   int zStride, int sI, int sI8, int sJ8) {
  for (GemmItemHost &it : items)
    if (it.tiles)
      it.tiles =
          uint64_t(reinterpret_cast<uintptr_t>(blob + (it.tiles - dBlob)));
  runTwin(s, unsigned(items.size()), gy, threads, 0,
          {hp(xh), hp(rowIds ? rowIds->data() : nullptr), hp(items.data()),
           hp(tz.data()), hi(int64_t(items.size())), hi(in), hi(out),
           hi(xStride), hi(zStride), hi(0), hi(sI), hi(sI8), hi(sJ8)});
  Err et;
  size_t nanBad = 0;
  for (size_t i = 0; i < z.size() && i < tz.size(); ++i) {
    if (std::isnan(z[i]) || std::isnan(tz[i]))
      nanBad += std::isnan(z[i]) != std::isnan(tz[i]);
    else
      et.add(z[i], tz[i]);
  }
  report(name + " vs_twin", et, 3e-5,
         "fp32 mma sums of the twin's exact products");
  reportExact(name + " vs_twin nan_pattern", nanBad, z.size());
}

class GemmTrellisGroupedGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// MoE gate/up style: tokens gathered per expert through row_ids, per-half
/// widths (2/3/4) in one launch, experts with more rows than BM split into
/// several items, a half not owned (null tiles: its z stays untouched), an
/// expert nobody routed to, and a width outside the kernel's set (NaN).
TEST_F(GemmTrellisGroupedGpu, GateUpHalvesWithGatheredRows) {
  const int E = 5, halves = 3, in = 1024, out = 128, T = 150, bm = 64;
  const int threads = 128; // BN = 128: one block column per half
  const int cb = 1;
  const bool e4m3 = true;
  std::mt19937 rng(4242);
  // Routing: each token to 2 distinct experts among 0..3 (expert 4 unused).
  std::vector<std::vector<int>> tokensOf(E);
  for (int t = 0; t < T; ++t) {
    int a = int(rng() % 4), b = int(rng() % 3);
    if (b >= a)
      ++b;
    tokensOf[a].push_back(t);
    tokensOf[b].push_back(t);
  }
  std::vector<int> rowIds, rowStart(E);
  for (int e = 0; e < E; ++e) {
    rowStart[e] = int(rowIds.size());
    rowIds.insert(rowIds.end(), tokensOf[e].begin(), tokensOf[e].end());
  }
  const int R = int(rowIds.size()), zStride = halves * out;
  // Matrices (e, h): exlr8 gate/up half layout [k16][8] = row-major 128 wide.
  std::vector<TrellisMatrix> mats;
  std::vector<int> widthOf;
  std::vector<size_t> byteOff;
  std::vector<uint8_t> blob;
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < halves; ++h) {
      const int K = 2 + int(rng() % 3);
      mats.push_back(makeMatrix(rng, K, cb, e4m3, in, out, 0));
      widthOf.push_back(K);
      byteOff.push_back(blob.size());
      const auto &w = mats.back().words;
      const uint8_t *p = reinterpret_cast<const uint8_t *>(w.data());
      blob.insert(blob.end(), p, p + w.size() * 2);
    }
  std::vector<float> xh = randn(rng, size_t(T) * in, 1.0f, 1);
  auto dBlob = upload(blob);
  auto dX = upload(storeAs(1, xh));
  auto dRows = upload(rowIds);
  const float sentinel = 12345.0f;
  std::vector<float> z0(size_t(R) * zStride, sentinel);
  auto dZ = upload(z0);
  // Items; (e=1, h=2) is not owned; (e=2, h=1) gets width 8 (not built).
  std::vector<GemmItemHost> items;
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < halves; ++h)
      for (int r0 = 0; r0 < int(tokensOf[e].size()); r0 += bm) {
        GemmItemHost it{};
        const bool owned = !(e == 1 && h == 2);
        it.tiles = owned ? dBlob.ptr() + byteOff[e * halves + h] : 0;
        it.zOff = int64_t(rowStart[e] + r0) * zStride + h * out;
        it.rowStart = rowStart[e] + r0;
        it.rows = std::min(bm, int(tokensOf[e].size()) - r0);
        it.xCol = 0;
        it.k = (e == 2 && h == 1) ? 8 : widthOf[e * halves + h];
        items.push_back(it);
      }
  items.push_back(GemmItemHost{}); // padding: null tiles, skipped
  auto dItems = upload(items);
  KernelSpec s = spec("gemm_trellis_grouped", {{"widths", "234"},
                                               {"codebook", cbName(cb)},
                                               {"e4m3", "1"},
                                               {"xt", "f16"},
                                               {"bm", std::to_string(bm)},
                                               {"threads",
                                                std::to_string(threads)}});
  Args a;
  a.ptr(dX).ptr(dRows).ptr(dItems).ptr(dZ)
      << int(items.size()) << in << out << in << zStride << 0 << 8 << 64 << 8;
  a.launch(kernel(s), unsigned(items.size()), 1, threads);
  const std::vector<float> z = download<float>(dZ, z0.size());
  Err e;
  size_t untouched = 0, nanOk = 0, bad = 0;
  for (int ex = 0; ex < E; ++ex)
    for (int h = 0; h < halves; ++h) {
      const TrellisMatrix &m = mats[ex * halves + h];
      for (size_t r = 0; r < tokensOf[ex].size(); ++r) {
        const int t = tokensOf[ex][r];
        const float *zr = &z[size_t(rowStart[ex] + r) * zStride + h * out];
        for (int o = 0; o < out; ++o) {
          if (ex == 1 && h == 2) {
            untouched += zr[o] == sentinel;
            bad += zr[o] != sentinel;
            continue;
          }
          if (ex == 2 && h == 1) {
            nanOk += std::isnan(zr[o]);
            bad += !std::isnan(zr[o]);
            continue;
          }
          double ref = 0;
          for (int i = 0; i < in; ++i)
            ref += double(xh[size_t(t) * in + i]) * m.q[size_t(i) * out + o];
          e.add(zr[o], ref);
        }
      }
    }
  report("gemm_trellis_grouped gate/up k234 gathered rows", e, 3e-5,
         "fp32 accumulation of exact fp16 products");
  {
    const std::vector<uint8_t> x16b = storeAs(1, xh);
    groupedVsTwin("gemm_trellis_grouped gate/up k234 gathered rows", s, 1,
                  threads, x16b.data(), &rowIds, items, blob.data(),
                  dBlob.ptr(), z0, z, in, out, in, zStride, 8, 64, 8);
  }
  reportExact("gemm_trellis_grouped skipped half / unbuilt width", bad,
              untouched + nanOk + bad);
  EXPECT_GT(untouched, 0u);
  EXPECT_GT(nanOk, 0u);
}

/// MoE down style: contiguous rows, input slices x_col = 128h, one width
/// per expert, each half writing its own partial buffer.
TEST_F(GemmTrellisGroupedGpu, DownHalvesWithInputSlices) {
  const int E = 3, halves = 4, inter = 128 * halves, out = 384, bm = 128;
  const int rowsOf[E] = {200, 1, 77};
  std::mt19937 rng(4343);
  int R = 0;
  std::vector<int> rowStart(E);
  for (int e = 0; e < E; ++e)
    rowStart[e] = R, R += rowsOf[e];
  std::vector<float> act = randn(rng, size_t(R) * inter); // fp32 input
  std::vector<TrellisMatrix> mats;
  std::vector<size_t> byteOff;
  std::vector<uint8_t> blob;
  std::vector<int> widthOf(E);
  for (int e = 0; e < E; ++e) {
    widthOf[e] = e == 1 ? 5 : 3;
    for (int h = 0; h < halves; ++h) {
      mats.push_back(makeMatrix(rng, widthOf[e], 2, false, 128, out, 2));
      byteOff.push_back(blob.size());
      const auto &w = mats.back().words;
      const uint8_t *p = reinterpret_cast<const uint8_t *>(w.data());
      blob.insert(blob.end(), p, p + w.size() * 2);
    }
  }
  auto dBlob = upload(blob);
  auto dX = upload(act);
  auto dZ = poisoned<float>(size_t(halves) * R * out);
  std::vector<GemmItemHost> items;
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < halves; ++h)
      for (int r0 = 0; r0 < rowsOf[e]; r0 += bm) {
        GemmItemHost it{};
        it.tiles = dBlob.ptr() + byteOff[e * halves + h];
        it.zOff = (int64_t(h) * R + rowStart[e] + r0) * out;
        it.rowStart = rowStart[e] + r0;
        it.rows = std::min(bm, rowsOf[e] - r0);
        it.xCol = 128 * h;
        it.k = widthOf[e];
        items.push_back(it);
      }
  auto dItems = upload(items);
  KernelSpec s = spec("gemm_trellis_grouped", {{"widths", "35"},
                                               {"codebook", "mul1"},
                                               {"e4m3", "0"},
                                               {"xt", "f32"},
                                               {"bm", std::to_string(bm)},
                                               {"threads", "256"}});
  Args a;
  a.ptr(dX).null().ptr(dItems).ptr(dZ)
      << int(items.size()) << 128 << out << inter << out << 0 << 8
      << out / 2 << 64;
  // BN = 256: the second block column is half outside out (384).
  a.launch(kernel(s), unsigned(items.size()), unsigned((out + 255) / 256),
           256);
  const std::vector<float> z = download<float>(dZ, size_t(halves) * R * out);
  Err e;
  for (int ex = 0; ex < E; ++ex)
    for (int h = 0; h < halves; ++h) {
      const TrellisMatrix &m = mats[ex * halves + h];
      for (int r = 0; r < rowsOf[ex]; ++r) {
        const int row = rowStart[ex] + r;
        for (int o = 0; o < out; ++o) {
          double ref = 0;
          for (int i = 0; i < 128; ++i)
            ref += double(glm::rt::roundToHalf(
                       act[size_t(row) * inter + 128 * h + i])) *
                   m.q[size_t(i) * out + o];
          e.add(z[(size_t(h) * R + row) * out + o], ref);
        }
      }
    }
  report("gemm_trellis_grouped down k35 input slices", e, 3e-5,
         "fp32 accumulation of exact fp16 products");
  groupedVsTwin("gemm_trellis_grouped down k35 input slices", s,
                unsigned((out + 255) / 256), 256, act.data(), nullptr, items,
                blob.data(), dBlob.ptr(), std::vector<float>(z.size(), NAN), z,
                128, out, inter, out, 8, out / 2, 64);
}

/// Not a check: gemm_trellis at the dense projections of a 2048-token
/// GLM-5.3 chunk (K4, MCG, E4M3, fp32 xh; random words and activations),
/// per block shape (bm rows, threads = BN columns), each launch timed
/// alone (median of 5) with its MMA FLOPs' rate.
class GemmTrellisGpuBench : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(GemmTrellisGpuBench, DenseAtGlmShapes) {
  const int M = 2048, K = 4;
  struct Shape {
    const char *name;
    int in, out;
  };
  const Shape shapes[] = {{"q_b 2048->16384", 2048, 16384},
                          {"o_proj 16384->6144", 16384, 6144},
                          {"q_a 6144->2048", 6144, 2048}};
  for (const Shape &sh : shapes) {
    cuda::DeviceBuffer dT(size_t(sh.in / 16) * (sh.out / 16) * 32 * K);
    cuda::DeviceBuffer dX(size_t(M) * sh.in * 4), dZ(size_t(M) * sh.out * 4);
    fillRandomWords(dT, 0xFFFFFFFFu);
    fillRandomWords(dX, 0xBF7FFFFFu); // |x| < 2, finite
    const int tileCols = sh.out / 16;
    for (const int bm : {128, 64})
      for (const int threads : {256, 128}) {
        const KernelSpec s = gemmSpec(K, 1, true, 0, bm, threads);
        auto once = [&] {
          Args a;
          a.ptr(dX).ptr(dT).ptr(dZ) << M << sh.in << sh.out << sh.in << sh.out
                                    << 0 << tileCols << 8 * tileCols << 8;
          a.launch(kernel(s), unsigned((sh.out + threads - 1) / threads),
                   unsigned((M + bm - 1) / bm), unsigned(threads));
        };
        const double t = medianMs(once);
        std::printf("[gpu-bench] gemm_trellis %s x %d rows, bm %d, %d "
                    "threads: %.3f ms, %.1f TFLOP/s\n",
                    sh.name, M, bm, threads, t,
                    2.0 * M * sh.in * sh.out / t * 1e-9);
      }
  }
}

} // namespace
