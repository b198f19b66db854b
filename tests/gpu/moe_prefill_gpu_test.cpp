//===- moe_prefill_gpu_test.cpp - the MoE prefill glue and its chain ------===//
//
// moe_group, moe_gather, moe_act and moe_combine (codegen/templates/
// moe_group.cuh) against their twins (runtime/twins/twin_moe_prefill.cpp)
// on random data at GLM-5.3 sizes (257 experts, hidden 6144, inter 2048),
// each from the same inputs: all exact (moe_group's order is defined,
// moe_gather and moe_combine are fp32 products and sums in a fixed order,
// moe_act is fp32 arithmetic with flash_math's expF, --fmad=false). Then
// the whole prefill chain on CUDA (hadamard128, moe_group, moe_gather,
// gemm_trellis_grouped gate/up, moe_act, gemm_trellis_grouped down (one
// launch, halves 16), moe_combine, hadamard128) against the same chain through
// the twins (from CUDA's rotated input, hadamard128 being held to 1e-6):
// routing, items and X exact; Zgu to gemm_trellis_grouped's 3e-5; the
// output to 2e-4 (the GEMMs' fp32 order moves Zgu by ~1e-6 of max|Zgu|,
// which flips act's fp16 rounding at 0.3-0.6 % of its elements, 2^-11
// each: 2.8e-5 .. 4.2e-5 measured on the H200).
//
//===----------------------------------------------------------------------===//
#include "gpu_dual.h"
#include "gpu_twin_util.h"

#include "codegen/moe_trellis_abi.h"
#include "codegen/templates/gemm_item.cuh"

#include <algorithm>
#include <chrono>
#include <numeric>

namespace glm::gputest {
namespace {

class MoePrefillGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

/// Routing of T rows: distinct experts per row, a few empty slots (-1 and
/// past E), weights in [0.1, 1).
struct Routing {
  int T, topk, E, S;
  std::vector<int> ids;
  std::vector<float> rw;
  Routing(std::mt19937 &rng, int T, int topk, int E, int S)
      : T(T), topk(topk), E(E), S(S) {
    ids.resize(size_t(T) * topk);
    rw.resize(ids.size());
    std::uniform_real_distribution<float> wd(0.1f, 1.0f);
    std::vector<int> perm(E);
    for (int t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int k = 0; k < topk; ++k) { // a partial shuffle
        std::swap(perm[k], perm[k + rng() % (E - k)]);
        ids[size_t(t) * topk + k] = perm[k];
        rw[size_t(t) * topk + k] = wd(rng);
      }
    }
    for (int &id : ids)
      if (rng() % 16 == 0)
        id = (rng() & 1) ? -1 : E + int(rng() % 4);
  }
  int U() const { return topk + S; }
  int N() const { return T * U(); }
  int expert(int q) const {
    const int t = q / U(), k = q % U();
    if (k >= topk)
      return E + k - topk;
    const int id = ids[size_t(t) * topk + k];
    return id >= 0 && id < E ? id : -1;
  }
  /// order and entry_of as moe_group defines them (stable by expert).
  void sorted(std::vector<int> &order, std::vector<int> &entryOf) const {
    std::vector<int> q;
    for (int i = 0; i < N(); ++i)
      if (expert(i) >= 0)
        q.push_back(i);
    std::stable_sort(q.begin(), q.end(),
                     [&](int a, int b) { return expert(a) < expert(b); });
    order.assign(N(), -1);
    entryOf.assign(N(), -1);
    for (size_t i = 0; i < q.size(); ++i)
      order[i] = q[i], entryOf[q[i]] = int(i);
  }
};

/// A tile table of fake addresses (moe_group copies them, moe_act tests
/// them for null; neither reads through them), a fraction `owned` set.
std::vector<uint64_t> fakeTiles(std::mt19937 &rng, int eTot, double owned) {
  std::vector<uint64_t> t(size_t(eTot) * 48, 0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int e = 0; e < eTot; ++e)
    for (int h = 0; h < 16; ++h)
      if (u01(rng) < owned)
        for (int p = 0; p < 3; ++p)
          t[(e * 3 + p) * 16 + h] =
              0x100000000ull + ((e * 3 + p) * 16 + h) * 4096ull;
  return t;
}

std::vector<float> uniformSigned(std::mt19937 &rng, size_t n) {
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  std::vector<float> v(n);
  for (float &x : v)
    x = mag(rng) * ((rng() & 1) ? -1.0f : 1.0f);
  return v;
}

TEST_F(MoePrefillGpu, GroupEqualsTwinExactly) {
  struct Case {
    int T, topk, E, S, BM, threads;
    double owned;
  };
  // GLM-5.3 (256 + 1 experts, top 8) at a 2048-token chunk; the most
  // experts moe_group takes; a small step.
  for (const Case c :
       {Case{2048, 8, 256, 1, 128, 512, 1.0},
        Case{700, 4, 511, 1, 64, 256, 0.5}, Case{3, 2, 6, 0, 64, 512, 0.7}}) {
    std::mt19937 rng(100 + c.T);
    const Routing r(rng, c.T, c.topk, c.E, c.S);
    const int eTot = c.E + c.S, H = 16, N = r.N();
    const int NB = (N + c.BM - 1) / c.BM + eTot;
    std::vector<uint8_t> widths(size_t(eTot) * 48);
    for (uint8_t &w : widths)
      w = uint8_t(2 + rng() % 3);
    Dual d("moe_group", unsigned(c.threads));
    d.buf(r.ids)
        .i32(c.T)
        .i32(c.topk)
        .i32(c.E)
        .i32(c.S)
        .i32(H)
        .i32(c.BM)
        .buf(fakeTiles(rng, eTot, c.owned))
        .buf(widths)
        .i32(6144)
        .i32(2048)
        .out<int>(N)
        .out<int>(N)
        .out<GemmItem>(size_t(NB) * 2 * H)
        .out<GemmItem>(size_t(H) * NB)
        .i32(NB);
    d.run(1, 1, 1, unsigned(c.threads));
    const std::string tag =
        "T" + std::to_string(c.T) + " E" + std::to_string(eTot) + " bm" +
        std::to_string(c.BM) + " t" + std::to_string(c.threads);
    d.checkInts(11, tag + " order");
    d.checkInts(12, tag + " entry_of");
    d.checkInts(13, tag + " gu_items");
    d.checkInts(14, tag + " down_items");
    std::vector<int> order, entryOf;
    r.sorted(order, entryOf);
    const std::vector<int> g = d.gpu<int>(11);
    size_t bad = 0;
    for (int i = 0; i < N; ++i)
      bad += g[i] != order[i];
    reportExact("moe_group " + tag + " stable expert order", bad, size_t(N));
  }
}

TEST_F(MoePrefillGpu, GatherEqualsTwinExactly) {
  const int T = 300, topk = 8, E = 256, S = 1, hidden = 6144;
  std::mt19937 rng(7);
  const Routing r(rng, T, topk, E, S);
  std::vector<int> order, entryOf;
  r.sorted(order, entryOf);
  const int N = r.N(), eTot = E + S;
  const std::vector<float> xh = randn(rng, size_t(T) * hidden, 2.0f);
  for (bool su : {true, false}) {
    Dual d("moe_gather", 256);
    d.buf(xh).buf(r.ids).buf(order);
    if (su)
      d.buf(uniformSigned(rng, size_t(2) * eTot * (hidden / 128)));
    else
      d.null();
    d.out<uint16_t>(size_t(N) * 2 * hidden)
        .i32(N)
        .i32(topk)
        .i32(E)
        .i32(S)
        .i32(hidden);
    d.run(unsigned(N), unsigned((hidden + 511) / 512), 1, 256);
    d.checkInts(4, std::string("X ") + (su ? "su_block" : "no su"));
  }
}

TEST_F(MoePrefillGpu, ActEqualsTwinExactly) {
  const int T = 40, topk = 8, E = 64, S = 1, inter = 2048, hidden = 6144;
  std::mt19937 rng(8);
  const Routing r(rng, T, topk, E, S);
  std::vector<int> order, entryOf;
  r.sorted(order, entryOf);
  const int N = r.N(), eTot = E + S;
  const std::vector<float> zgu = randn(rng, size_t(N) * 2 * inter, 3.0f);
  const std::vector<uint64_t> tiles = fakeTiles(rng, eTot, 0.75);
  const std::vector<float> svh = uniformSigned(rng, size_t(2) * eTot * inter);
  const std::vector<float> suh = uniformSigned(rng, size_t(eTot) * inter);
  struct Case {
    unsigned threads;
    float limit;
  };
  for (const Case c : {Case{512, 0.0f}, Case{256, 7.0f}, Case{128, 2.0f}}) {
    Dual d("moe_act", c.threads);
    d.buf(zgu)
        .buf(r.ids)
        .buf(order)
        .buf(tiles)
        .buf(svh)
        .buf(suh)
        .out<uint16_t>(size_t(N) * inter)
        .out<float>(size_t(N) * hidden)
        .i32(N)
        .i32(topk)
        .i32(E)
        .i32(S)
        .i32(inter)
        .i32(hidden)
        .f32(c.limit);
    d.run(unsigned(N), (16 * 32 + c.threads - 1) / c.threads, 1, c.threads);
    const std::string tag = "t" + std::to_string(c.threads) + " limit " +
                            std::to_string(int(c.limit));
    d.checkInts(6, tag + " act (fp16 bits)");
    d.check(7, tag + " zd zeros", 0);
  }
  // Without the side vectors (null = 1).
  Dual d("moe_act", 512);
  d.buf(zgu)
      .buf(r.ids)
      .buf(order)
      .buf(tiles)
      .null()
      .null()
      .out<uint16_t>(size_t(N) * inter)
      .out<float>(size_t(N) * hidden)
      .i32(N)
      .i32(topk)
      .i32(E)
      .i32(S)
      .i32(inter)
      .i32(hidden)
      .f32(0.0f);
  d.run(unsigned(N), 1, 1, 512);
  d.checkInts(6, "no side vectors act (fp16 bits)");
}

TEST_F(MoePrefillGpu, CombineEqualsTwinExactly) {
  const int T = 200, topk = 8, E = 256, S = 1, hidden = 6144;
  std::mt19937 rng(9);
  const Routing r(rng, T, topk, E, S);
  std::vector<int> order, entryOf;
  r.sorted(order, entryOf);
  const int N = r.N(), eTot = E + S;
  const std::vector<float> zd = randn(rng, size_t(N) * hidden, 1.0f);
  const std::vector<float> svb =
      uniformSigned(rng, size_t(eTot) * hidden / 128);
  const std::vector<float> out0 = randn(rng, size_t(T) * hidden, 1.0f);
  for (int acc : {0, 1}) {
    Dual d("moe_combine", 256);
    d.buf(zd).buf(entryOf).buf(r.ids).buf(r.rw);
    if (acc)
      d.null();
    else
      d.buf(svb);
    d.buf(out0).i32(T).i32(topk).i32(E).i32(S).i32(hidden).i32(acc);
    d.run(unsigned(T), unsigned((hidden + 1023) / 1024), 1, 256);
    d.check(5, acc ? "accumulate, no sv_block" : "sv_block", 0);
  }
}

// ---------------------------------------------------------------------------
// The whole chain.

const char *const kWidths = "234";

KernelSpec gemmSpec(int bm, int threads, int halves = 1) {
  KernelSpec s =
      spec("gemm_trellis_grouped", {{"widths", kWidths},
                                    {"codebook", "mcg"},
                                    {"e4m3", "1"},
                                    {"xt", "f16"},
                                    {"bm", std::to_string(bm)},
                                    {"threads", std::to_string(threads)}});
  if (halves > 1)
    s.args["halves"] = std::to_string(halves);
  return s;
}

struct ChainCase {
  std::string name;
  int T, topk, E, S, hidden, BM;
  double owned;
  float limit;
};

class MoePrefillChainGpu : public ::testing::TestWithParam<ChainCase> {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_P(MoePrefillChainGpu, CudaChainEqualsTwinChain) {
  const ChainCase c = GetParam();
  const int H = 16, inter = 2048, hidden = c.hidden, BM = c.BM;
  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xFFFFFF);
  const Routing r(rng, c.T, c.topk, c.E, c.S);
  const int eTot = c.E + c.S, N = r.N(), T = c.T, nBlk = hidden / 128;
  const int NB = (N + BM - 1) / BM + eTot;
  // exlr8 halves of widths 2/3/4; a fraction `owned` of (e, h) here.
  std::vector<uint8_t> widths(size_t(eTot) * 48), blob;
  std::vector<int64_t> off(size_t(eTot) * 48, -1);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int e = 0; e < eTot; ++e)
    for (int h = 0; h < H; ++h) {
      const bool here = u01(rng) < c.owned;
      for (int p = 0; p < 3; ++p) {
        const int idx = (e * 3 + p) * 16 + h, k = 2 + int(rng() % 3);
        widths[idx] = uint8_t(k);
        if (!here)
          continue;
        off[idx] = int64_t((blob.size() + 255) / 256 * 256);
        blob.resize(size_t(off[idx]) + size_t(hidden / 16) * 8 * 32 * k);
        for (size_t b = size_t(off[idx]); b < blob.size(); ++b)
          blob[b] = uint8_t(rng());
      }
    }
  auto dBlob = upload(blob);
  std::vector<uint64_t> dTiles(widths.size(), 0);
  std::vector<const unsigned char *> hTiles(widths.size(), nullptr);
  for (size_t i = 0; i < off.size(); ++i)
    if (off[i] >= 0) {
      dTiles[i] = dBlob.ptr() + uint64_t(off[i]);
      hTiles[i] = blob.data() + off[i];
    }
  const std::vector<float> x = randn(rng, size_t(T) * hidden, 1.0f);
  std::vector<float> signsIn(hidden), signsOut(hidden);
  for (float &v : signsIn)
    v = (rng() & 1) ? -1.0f : 1.0f;
  for (float &v : signsOut)
    v = (rng() & 1) ? -1.0f : 1.0f;
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  std::vector<float> su(size_t(2) * eTot * nBlk), svb(size_t(eTot) * nBlk);
  for (float &v : su)
    v = mag(rng);
  for (float &v : svb)
    v = mag(rng);
  const std::vector<float> svh = uniformSigned(rng, size_t(2) * eTot * inter);
  const std::vector<float> suh = uniformSigned(rng, size_t(eTot) * inter);

  const KernelSpec had =
      spec("hadamard128", {{"vt", "f32"}, {"threads", "128"}});
  const KernelSpec group = spec("moe_group", {{"threads", "512"}});
  const KernelSpec gather = spec("moe_gather", {{"threads", "256"}});
  const KernelSpec act = spec("moe_act", {{"threads", "512"}});
  const KernelSpec combine = spec("moe_combine", {{"threads", "256"}});
  // Down as the plan runs it: one launch, a block adding an expert row
  // block's 16 halves in registers.
  const int DT = int(glm::codegen::moeGroupedDownThreads(BM));
  const KernelSpec gu = gemmSpec(BM, 128), down = gemmSpec(BM, DT, H);
  KernelCache::get().prefetch({had, group, gather, act, combine, gu, down});
  const unsigned hadGrid = unsigned((T * nBlk + 3) / 4);
  const unsigned guItems = unsigned(NB * 2 * H);

  // CUDA.
  auto dX = upload(x), dSi = upload(signsIn), dSo = upload(signsOut);
  auto dIds = upload(r.ids), dRw = upload(r.rw), dT = upload(dTiles);
  auto dW = upload(widths), dSu = upload(su), dSvb = upload(svb);
  auto dSvh = upload(svh), dSuh = upload(suh);
  auto dXh = poisoned<float>(size_t(T) * hidden);
  auto dOrder = poisoned<int>(N), dEntry = poisoned<int>(N);
  auto dGu = poisoned<GemmItem>(size_t(NB) * 2 * H);
  auto dDown = poisoned<GemmItem>(size_t(H) * NB);
  auto dXg = poisoned<uint16_t>(size_t(N) * 2 * hidden);
  auto dZgu = poisoned<float>(size_t(N) * 2 * inter);
  auto dAct = poisoned<uint16_t>(size_t(N) * inter);
  auto dZd = poisoned<float>(size_t(N) * hidden);
  auto dOut = poisoned<float>(size_t(T) * hidden);
  auto dY = poisoned<float>(size_t(T) * hidden);
  {
    Args a;
    a.ptr(dX).ptr(dSi).null().ptr(dXh) << T << hidden << 0 << 0;
    a.launch(kernel(had), hadGrid, 1, 128);
  }
  {
    Args a;
    a.ptr(dIds) << T << c.topk << c.E << c.S << H << BM;
    a.ptr(dT).ptr(dW) << hidden << inter;
    a.ptr(dOrder).ptr(dEntry).ptr(dGu).ptr(dDown) << NB;
    a.launch(kernel(group), 1, 1, 512);
  }
  {
    Args a;
    a.ptr(dXh).ptr(dIds).ptr(dOrder).ptr(dSu).ptr(dXg)
        << N << c.topk << c.E << c.S << hidden;
    a.launch(kernel(gather), unsigned(N), unsigned((hidden + 511) / 512), 256);
  }
  {
    Args a;
    a.ptr(dXg).null().ptr(dGu).ptr(dZgu)
        << int(guItems) << hidden << 128 << 2 * hidden << 2 * inter << 0 << 8
        << 64 << 0;
    a.launch(kernel(gu), guItems, 1, 128);
  }
  {
    Args a;
    a.ptr(dZgu).ptr(dIds).ptr(dOrder).ptr(dT).ptr(dSvh).ptr(dSuh).ptr(dAct).ptr(
        dZd)
        << N << c.topk << c.E << c.S << inter << hidden << c.limit;
    a.launch(kernel(act), unsigned(N), 1, 512);
  }
  {
    Args a;
    a.ptr(dAct).null().ptr(dDown).ptr(dZd)
        << NB << 128 << hidden << inter << hidden << 1 << 8 << 0 << 64;
    a.launch(kernel(down), unsigned(NB), unsigned(hidden / DT), DT);
  }
  {
    Args a;
    a.ptr(dZd).ptr(dEntry).ptr(dIds).ptr(dRw).ptr(dSvb).ptr(dOut)
        << T << c.topk << c.E << c.S << hidden << 0;
    a.launch(kernel(combine), unsigned(T), unsigned((hidden + 1023) / 1024),
             256);
  }
  {
    Args a;
    a.ptr(dOut).null().ptr(dSo).ptr(dY) << T << hidden << 0 << 0;
    a.launch(kernel(had), hadGrid, 1, 128);
  }

  // The twins, on host copies.
  std::vector<float> xh(size_t(T) * hidden, NAN);
  std::vector<int> order(N, 0x7eadbeef), entryOf(N, 0x7eadbeef);
  GemmItem junk;
  std::memset(&junk, 0xff, sizeof junk);
  std::vector<GemmItem> guI(size_t(NB) * 2 * H, junk),
      downI(size_t(H) * NB, junk);
  // Poisoned as the device buffers (0xff bytes): rows past the valid
  // entries stay so on both sides.
  std::vector<uint16_t> X(size_t(N) * 2 * hidden, 0xffff),
      actH(size_t(N) * inter, 0xffff);
  std::vector<float> zgu(size_t(N) * 2 * inter, NAN),
      zd(size_t(N) * hidden, NAN), out(size_t(T) * hidden, NAN),
      y(size_t(T) * hidden, NAN);
  runTwin(had, hadGrid, 1, 128, 0,
          {hp(x.data()), hp(signsIn.data()), hp(nullptr), hp(xh.data()), hi(T),
           hi(hidden), hi(0), hi(0)});
  // hadamard128 is held to its twin at 1e-6 (contracted multiply-adds):
  // the twin chain goes on from CUDA's xh, so that X compares exactly.
  {
    const std::vector<float> g = download<float>(dXh, xh.size());
    report("moe_prefill " + c.name + " xh vs_twin", vsTwin(g, xh), 1e-6,
           "hadamard128's own tolerance");
    xh = g;
  }
  runTwin(group, 1, 1, 512, 0,
          {hp(r.ids.data()), hi(T), hi(c.topk), hi(c.E), hi(c.S), hi(H), hi(BM),
           hp(hTiles.data()), hp(widths.data()), hi(hidden), hi(inter),
           hp(order.data()), hp(entryOf.data()), hp(guI.data()),
           hp(downI.data()), hi(NB)});
  runTwin(gather, unsigned(N), unsigned((hidden + 511) / 512), 256, 0,
          {hp(xh.data()), hp(r.ids.data()), hp(order.data()), hp(su.data()),
           hp(X.data()), hi(N), hi(c.topk), hi(c.E), hi(c.S), hi(hidden)});
  runTwin(gu, guItems, 1, 128, 0,
          {hp(X.data()), hp(nullptr), hp(guI.data()), hp(zgu.data()),
           hi(guItems), hi(hidden), hi(128), hi(2 * hidden), hi(2 * inter),
           hi(0), hi(8), hi(64), hi(0)});
  runTwin(act, unsigned(N), 1, 512, 0,
          {hp(zgu.data()), hp(r.ids.data()), hp(order.data()),
           hp(hTiles.data()), hp(svh.data()), hp(suh.data()), hp(actH.data()),
           hp(zd.data()), hi(N), hi(c.topk), hi(c.E), hi(c.S), hi(inter),
           hi(hidden), hf(c.limit)});
  runTwin(down, unsigned(NB), unsigned(hidden / DT), DT, 0,
          {hp(actH.data()), hp(nullptr), hp(downI.data()), hp(zd.data()),
           hi(NB), hi(128), hi(hidden), hi(inter), hi(hidden), hi(1), hi(8),
           hi(0), hi(64)});
  runTwin(combine, unsigned(T), unsigned((hidden + 1023) / 1024), 256, 0,
          {hp(zd.data()), hp(entryOf.data()), hp(r.ids.data()), hp(r.rw.data()),
           hp(svb.data()), hp(out.data()), hi(T), hi(c.topk), hi(c.E), hi(c.S),
           hi(hidden), hi(0)});
  runTwin(had, hadGrid, 1, 128, 0,
          {hp(out.data()), hp(nullptr), hp(signsOut.data()), hp(y.data()),
           hi(T), hi(hidden), hi(0), hi(0)});

  // Exact steps: routing, items (device tile pointers mapped to the host
  // blob), X.
  auto countDiff = [](const auto &a, const auto &b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i)
      n += a[i] != b[i];
    return n;
  };
  reportExact("moe_prefill " + c.name + " order",
              countDiff(download<int>(dOrder, N), order), size_t(N));
  reportExact("moe_prefill " + c.name + " entry_of",
              countDiff(download<int>(dEntry, N), entryOf), size_t(N));
  auto items = [&](const cuda::DeviceBuffer &b, const std::vector<GemmItem> &h,
                   const std::string &what) {
    std::vector<GemmItem> g = download<GemmItem>(b, h.size());
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      GemmItem m = g[i];
      if (m.tiles)
        m.tiles = blob.data() + (reinterpret_cast<uintptr_t>(m.tiles) -
                                 uintptr_t(dBlob.ptr()));
      bad += std::memcmp(&m, &h[i], sizeof m) != 0;
    }
    reportExact("moe_prefill " + c.name + " " + what, bad, g.size());
  };
  items(dGu, guI, "gu_items");
  items(dDown, downI, "down_items");
  reportExact("moe_prefill " + c.name + " X",
              countDiff(download<uint16_t>(dXg, X.size()), X), X.size());
  {
    // Rows past the valid entries and halves of another rank stay NaN on
    // both sides.
    const std::vector<float> g = download<float>(dZgu, zgu.size());
    Err e;
    size_t nanBad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(g[i]) || std::isnan(zgu[i]))
        nanBad += std::isnan(g[i]) != std::isnan(zgu[i]);
      else
        e.add(g[i], zgu[i]);
    }
    report("moe_prefill " + c.name + " Zgu vs_twin", e, 3e-5,
           "gemm_trellis_grouped: fp32 mma sums of exact products");
    reportExact("moe_prefill " + c.name + " Zgu written elements", nanBad,
                g.size());
  }
  const std::vector<uint16_t> gAct = download<uint16_t>(dAct, actH.size());
  std::printf("[gpu-case] moe_prefill %s act fp16 values differing: %zu of "
              "%zu (Zgu's fp32 order across rounding boundaries)\n",
              c.name.c_str(), countDiff(gAct, actH), actH.size());
  report("moe_prefill " + c.name + " out vs_twin",
         vsTwin(download<float>(dY, y.size()), y), 2e-4,
         "fp32 GEMM order, then act's fp16 rounding flips (2^-11 each)");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoePrefillChainGpu,
    ::testing::Values(
        ChainCase{"t100_e40_s1_h1024_bm64", 100, 8, 40, 1, 1024, 64, 1.0, 0},
        ChainCase{"t37_e20_s1_h768_bm128_tp", 37, 6, 20, 1, 768, 128, 0.75, 0},
        ChainCase{"t300_e24_s1_h1024_bm96", 300, 6, 24, 1, 1024, 96, 1.0, 0},
        ChainCase{"t64_e16_s0_h512_bm64_clamp", 64, 4, 16, 0, 512, 64, 1.0,
                  7.0f}),
    [](const auto &info) { return info.param.name; });

/// Not a check: the grouped gate/up and down GEMMs of one GLM-5.3 MoE layer
/// (256 routed experts top-8 + 1 shared, hidden 6144, inter 2048, exlr8
/// halves of widths 2/3/4 at random, MCG + E4M3) at a prefill chunk's
/// rows, items built by moe_group on the device, random trellis words and
/// activations; each launch timed alone (median of 5), with the MMA
/// FLOPs' rate, per rows per item (bm: an expert's rows of a 2048-token
/// chunk average 64).
class MoePrefillGpuBench : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(MoePrefillGpuBench, GroupedGemmsAtGlmShape) {
  const int H = 16, inter = 2048, hidden = 6144, topk = 8, E = 256, S = 1;
  const int eTot = E + S;
  for (const int T : {2048, 4096})
    for (const int BM : {64, 96, 128}) {
      std::mt19937 rng(77 + T);
      const Routing r(rng, T, topk, E, S);
      const int N = r.N();
      const int NB = int(glm::codegen::moeGroupedSlots(N, BM, eTot));
      std::vector<uint8_t> widths(size_t(eTot) * 48);
      std::vector<uint64_t> off(widths.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < widths.size(); ++i) {
        widths[i] = uint8_t(2 + rng() % 3);
        off[i] = bytes;
        bytes += uint64_t(hidden / 16) * 8 * 32 * widths[i];
      }
      cuda::DeviceBuffer dBlob(bytes);
      fillRandomWords(dBlob, 0xFFFFFFFFu);
      std::vector<uint64_t> tiles(widths.size());
      for (size_t i = 0; i < tiles.size(); ++i)
        tiles[i] = dBlob.ptr() + off[i];
      auto dIds = upload(r.ids), dT = upload(tiles), dW = upload(widths);
      auto dOrder = poisoned<int>(N), dEntry = poisoned<int>(N);
      auto dGu = poisoned<GemmItem>(size_t(NB) * 2 * H);
      auto dDown = poisoned<GemmItem>(size_t(H) * NB);
      {
        Args a;
        a.ptr(dIds) << T << topk << E << S << H << BM;
        a.ptr(dT).ptr(dW) << hidden << inter;
        a.ptr(dOrder).ptr(dEntry).ptr(dGu).ptr(dDown) << NB;
        a.launch(kernel(spec("moe_group", {{"threads", "512"}})), 1, 1, 512);
      }
      int valid = 0;
      for (int q = 0; q < N; ++q)
        valid += r.expert(q) >= 0;
      // fp16 activations in (-1, 1): sign, exponent <= 14 (mask 0xBBFF).
      cuda::DeviceBuffer dXg(size_t(N) * 2 * hidden * 2),
          dAct(size_t(N) * inter * 2);
      fillRandomWords(dXg, 0xBBFFBBFFu);
      fillRandomWords(dAct, 0xBBFFBBFFu);
      cuda::DeviceBuffer dZgu(size_t(N) * 2 * inter * 4),
          dZd(size_t(N) * hidden * 4);
      GLM_CU(cuMemsetD8(dZd.ptr(), 0, dZd.size()));
      const unsigned guItems = unsigned(NB) * 2 * H;
      const double guFlops = double(valid) * 2 * inter * hidden * 2;
      {
        const KernelSpec gu = gemmSpec(BM, 128);
        const double ms = medianMs([&] {
          Args a;
          a.ptr(dXg).null().ptr(dGu).ptr(dZgu)
              << int(guItems) << hidden << 128 << 2 * hidden << 2 * inter << 0
              << 8 << 64 << 0;
          a.launch(kernel(gu), guItems, 1, 128);
        });
        std::printf("[gpu-bench] moe prefill gate/up %d rows (%d entries, bm "
                    "%d): %.3f ms, %.1f TFLOP/s\n",
                    T, valid, BM, ms, guFlops / ms * 1e-9);
      }
      for (const int threads : {256, 128}) {
        if (BM * 4 % threads)
          continue; // bm 96: 128 threads only
        const KernelSpec down = gemmSpec(BM, threads, H);
        const double ms = medianMs([&] {
          Args a;
          a.ptr(dAct).null().ptr(dDown).ptr(dZd)
              << NB << 128 << hidden << inter << hidden << 1 << 8 << 0 << 64;
          a.launch(kernel(down), unsigned(NB), unsigned(hidden / threads),
                   threads);
        });
        std::printf("[gpu-bench] moe prefill down %d rows (bm %d, %d threads, "
                    "16 halves chained): %.3f ms, %.1f TFLOP/s\n",
                    T, BM, threads, ms,
                    double(valid) * inter * hidden * 2 / ms * 1e-9);
      }
    }
}

} // namespace
} // namespace glm::gputest
