//===- moe_prefill_twin_test.cpp - twins of the MoE prefill glue ----------===//
//
// moe_group on random routing (empty and out-of-range ids, a shared
// expert): the stable expert order, the counts, every item field and the
// unused slots. The whole prefill chain through the twins (hadamard128
// with signs.in, moe_group, moe_gather, gemm_trellis_grouped gate/up,
// moe_act, gemm_trellis_grouped down per half, moe_combine, hadamard128
// with signs.out) against the decode path's moe_trellis twin on the same
// exlr8 expert tables (mixed widths 2/3/4) for T = 8 rows, with all halves
// and with halves of another rank nulled on both paths. The footprints of
// the chain's launches and what they refuse.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/moe_trellis_abi.h"
#include "codegen/templates/gemm_item.cuh"
#include "runtime/twins/footprint.h"
#include "twin_test_util.h"

#include <algorithm>
#include <numeric>

using namespace glm::twintest;
using glm::GemmItem;
namespace twins = glm::rt::twins;

namespace {

/// One MoE layer's routing, exlr8 expert tables and inputs.
struct PrefillSetup {
  std::string name;
  int T = 8, topk = 3, E = 6, S = 1, hidden = 512, BM = 64;
  double owned = 1.0;  // fraction of halves on this rank
  float limit = 0;     // SwiGLU clamp
  bool empties = true; // some slots -1 or >= E
  /// max|prefill - decode| / max|decode| allowed. The prefill path rounds
  /// its GEMM inputs to fp16 where the decode path keeps hi + lo pairs
  /// (~22 bits): X = fp16(xh * su) and act = fp16(a) each carry a relative
  /// error up to 2^-11 (4.9e-4, rms 2.8e-4) per element, independent
  /// across elements, so each GEMM output moves by ~2.8e-4 of its typical
  /// size; gate/up errors pass through SiLU(g)*u (about doubling) and act's
  /// rounding adds its own: ~5e-4 of max|out| expected, 3.5e-4 .. 4.5e-4
  /// measured over 7 seeds; 1e-3 bounds it. With a SwiGLU clamp far below
  /// the pre-activations (limit 2 against sums of O(10)) a value inside
  /// the clamp window keeps the absolute error of its unclamped sum while
  /// the output shrinks: 0.84e-3 .. 1.3e-3 measured over 7 seeds; 3e-3.
  double tol = 1e-3;
};

struct PrefillProblem {
  PrefillSetup s;
  static constexpr int kInter = 2048, kH = 16;
  int eTot, U, N, NB, nBlk;
  std::vector<uint8_t> blob, widths;
  std::vector<const unsigned char *> tiles;
  std::vector<int> ids;
  std::vector<float> rw, guSvh, dSuh, guSu, dSvB, signsIn, signsOut, x;

  explicit PrefillProblem(const PrefillSetup &setup) : s(setup) {
    std::mt19937 rng(std::hash<std::string>()(s.name) & 0xFFFFFFF);
    eTot = s.E + s.S, U = s.topk + s.S, N = s.T * U;
    NB = (N + s.BM - 1) / s.BM + eTot, nBlk = s.hidden / 128;
    ids.resize(size_t(s.T) * s.topk);
    rw.resize(ids.size());
    std::uniform_real_distribution<float> wd(0.1f, 1.0f);
    for (int t = 0; t < s.T; ++t) {
      std::vector<int> perm(s.E); // distinct experts per row
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int k = 0; k < s.topk; ++k) {
        ids[t * s.topk + k] = perm[k];
        rw[t * s.topk + k] = wd(rng);
      }
    }
    if (s.empties) {
      ids[1] = -1;               // an empty slot
      ids[2 * s.topk] = s.E + 3; // out of range: empty too
    }
    // exlr8 halves: gate/up [hidden/16][8] tiles, down [8][hidden/16];
    // widths 2/3/4 per half.
    widths.assign(size_t(eTot) * 48, 0);
    std::vector<size_t> off(size_t(eTot) * 48);
    for (int e = 0; e < eTot; ++e)
      for (int p = 0; p < 3; ++p)
        for (int h = 0; h < kH; ++h) {
          const int idx = (e * 3 + p) * 16 + h, k = 2 + int(rng() % 3);
          widths[idx] = uint8_t(k);
          off[idx] = addWords(blob, rng, size_t(s.hidden / 16) * 8 * 16 * k);
        }
    tiles.assign(size_t(eTot) * 48, nullptr);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    for (int e = 0; e < eTot; ++e)
      for (int h = 0; h < kH; ++h) {
        if (u01(rng) >= s.owned)
          continue; // another rank's half: all three projections null
        for (int p = 0; p < 3; ++p)
          tiles[(e * 3 + p) * 16 + h] = &blob[off[(e * 3 + p) * 16 + h]];
      }
    std::uniform_real_distribution<float> mag(0.5f, 1.5f);
    auto signed_ = [&] { return mag(rng) * ((rng() & 1) ? -1.0f : 1.0f); };
    auto sign = [&] { return (rng() & 1) ? -1.0f : 1.0f; };
    guSvh.resize(size_t(2) * eTot * kInter);
    dSuh.resize(size_t(eTot) * kInter);
    guSu.resize(size_t(2) * eTot * nBlk);
    dSvB.resize(size_t(eTot) * nBlk);
    signsIn.resize(s.hidden);
    signsOut.resize(s.hidden);
    for (float &v : guSvh)
      v = signed_();
    for (float &v : dSuh)
      v = signed_();
    for (float &v : guSu)
      v = mag(rng);
    for (float &v : dSvB)
      v = mag(rng);
    for (float &v : signsIn)
      v = sign();
    for (float &v : signsOut)
      v = sign();
    x = randn(rng, size_t(s.T) * s.hidden);
  }

  int entryExpert(int q) const {
    const int t = q / U, k = q % U;
    if (k >= s.topk)
      return s.E + k - s.topk;
    const int id = ids[t * s.topk + k];
    return id >= 0 && id < s.E ? id : -1;
  }

  /// xh = H(x * signs.in) / sqrt(128) through the hadamard128 twin.
  std::vector<float> rotatedInput() const {
    std::vector<float> xh(x.size(), NAN);
    const glm::plan::KeyValues targs = {{"vt", "f32"}, {"threads", "128"}};
    runTwin(launch("hadamard128", targs, unsigned((s.T * nBlk + 3) / 4), 1, 128,
                   {P(x.data()), P(signsIn.data()), P(nullptr), P(xh.data()),
                    I(s.T), I(s.hidden), I(0), I(0)}));
    return xh;
  }

  /// The decode path: moe_trellis stages gu + down with signs.out.
  std::vector<float> decodePath(const std::vector<float> &xh) const {
    glm::codegen::MoeTrellisDims d;
    d.batch = s.T, d.topk = s.topk, d.nRouted = s.E, d.nShared = s.S;
    d.hidden = s.hidden, d.guSplit = 4, d.downGroup = 2, d.threads = 128;
    EXPECT_TRUE(d.valid());
    std::vector<float> scratch(d.scratchFloats(), NAN);
    std::vector<int> counters(d.counterInts(), 0);
    std::vector<float> out(size_t(s.T) * s.hidden, NAN);
    for (int st = 0; st < 2; ++st) {
      const glm::plan::KeyValues targs = {
          {"widths", "234"}, {"codebook", "mcg"},
          {"e4m3", "1"},     {"batch", "8"},
          {"sv", "f32"},     {"stage", st == 0 ? "gu" : "down"},
          {"pipe", "2"},     {"minblocks", "0"},
          {"threads", "128"}};
      runTwin(launch("moe_trellis", targs,
                     st == 0 ? d.gridGateUp() : d.gridDown(), 1, 128,
                     {P(xh.data()),
                      P(ids.data()),
                      P(rw.data()),
                      P(tiles.data()),
                      P(widths.data()),
                      P(guSvh.data()),
                      P(guSu.data()),
                      P(dSuh.data()),
                      P(dSvB.data()),
                      P(nullptr),
                      P(signsOut.data()),
                      P(scratch.data()),
                      P(counters.data()),
                      P(out.data()),
                      I(s.T),
                      I(s.topk),
                      I(s.E),
                      I(s.S),
                      I(s.hidden),
                      I(kInter),
                      I(s.hidden),
                      I(0),
                      I(0),
                      I(8),
                      I(64),
                      I(8),
                      I(64),
                      I(4),
                      I(2),
                      I(0),
                      F(s.limit)}));
    }
    return out;
  }

  /// Every buffer of the prefill chain.
  struct Chain {
    std::vector<int> order, entryOf;
    std::vector<GemmItem> guItems, downItems;
    std::vector<uint16_t> X, act;
    std::vector<float> zgu, zd, out, y;
  };

  Launch groupLaunch(const glm::plan::KeyValues &targs, Chain &c) const {
    return launch("moe_group", targs, 1, 1, 512,
                  {P(ids.data()), I(s.T), I(s.topk), I(s.E), I(s.S), I(kH),
                   I(s.BM), P(tiles.data()), P(widths.data()), I(s.hidden),
                   I(kInter), P(c.order.data()), P(c.entryOf.data()),
                   P(c.guItems.data()), P(c.downItems.data()), I(NB)});
  }

  /// The prefill path through the twins; poisoned outputs (NaN, 0x7e00
  /// fp16 NaN, items of 0xff bytes) so that an unwritten element shows.
  /// Down as the plan runs it (one launch, halves = H: each block adds an
  /// expert row block's halves in registers) or one launch per half.
  Chain prefillPath(const std::vector<float> &xh,
                    bool downPerHalf = false) const {
    Chain c;
    c.order.assign(N, 0x7eadbeef);
    c.entryOf.assign(N, 0x7eadbeef);
    GemmItem junk;
    std::memset(&junk, 0xff, sizeof junk);
    c.guItems.assign(size_t(NB) * 2 * kH, junk);
    c.downItems.assign(size_t(kH) * NB, junk);
    c.X.assign(size_t(N) * 2 * s.hidden, 0x7e00);
    c.act.assign(size_t(N) * kInter, 0x7e00);
    c.zgu.assign(size_t(N) * 2 * kInter, NAN);
    c.zd.assign(size_t(N) * s.hidden, NAN);
    c.out.assign(size_t(s.T) * s.hidden, NAN);
    const glm::plan::KeyValues t512 = {{"threads", "512"}},
                               t256 = {{"threads", "256"}};
    runTwin(groupLaunch(t512, c));
    runTwin(launch(
        "moe_gather", t256, unsigned(N), unsigned((s.hidden + 511) / 512), 256,
        {P(xh.data()), P(ids.data()), P(c.order.data()), P(guSu.data()),
         P(c.X.data()), I(N), I(s.topk), I(s.E), I(s.S), I(s.hidden)}));
    const glm::plan::KeyValues gu = {
        {"widths", "234"}, {"codebook", "mcg"},          {"e4m3", "1"},
        {"xt", "f16"},     {"bm", std::to_string(s.BM)}, {"threads", "128"}};
    runTwin(launch("gemm_trellis_grouped", gu, unsigned(NB * 2 * kH), 1, 128,
                   {P(c.X.data()), P(nullptr), P(c.guItems.data()),
                    P(c.zgu.data()), I(NB * 2 * kH), I(s.hidden), I(128),
                    I(2 * s.hidden), I(2 * kInter), I(0), I(8), I(64), I(0)}));
    runTwin(launch("moe_act", t512, unsigned(N), 1, 512,
                   {P(c.zgu.data()), P(ids.data()), P(c.order.data()),
                    P(tiles.data()), P(guSvh.data()), P(dSuh.data()),
                    P(c.act.data()), P(c.zd.data()), I(N), I(s.topk), I(s.E),
                    I(s.S), I(kInter), I(s.hidden), F(s.limit)}));
    glm::plan::KeyValues down = gu;
    const int dt = int(glm::codegen::moeGroupedDownThreads(s.BM));
    down["threads"] = std::to_string(dt);
    if (!downPerHalf)
      down["halves"] = std::to_string(kH);
    for (int h = 0; h < (downPerHalf ? kH : 1); ++h)
      runTwin(launch("gemm_trellis_grouped", down, unsigned(NB),
                     unsigned(s.hidden / dt), unsigned(dt),
                     {P(c.act.data()), P(nullptr),
                      P(c.downItems.data() + size_t(h) * NB), P(c.zd.data()),
                      I(NB), I(128), I(s.hidden), I(kInter), I(s.hidden), I(1),
                      I(8), I(0), I(64)}));
    runTwin(launch("moe_combine", t256, unsigned(s.T),
                   unsigned((s.hidden + 1023) / 1024), 256,
                   {P(c.zd.data()), P(c.entryOf.data()), P(ids.data()),
                    P(rw.data()), P(dSvB.data()), P(c.out.data()), I(s.T),
                    I(s.topk), I(s.E), I(s.S), I(s.hidden), I(0)}));
    c.y.assign(c.out.size(), NAN);
    const glm::plan::KeyValues h128 = {{"vt", "f32"}, {"threads", "128"}};
    runTwin(launch("hadamard128", h128, unsigned((s.T * nBlk + 3) / 4), 1, 128,
                   {P(c.out.data()), P(nullptr), P(signsOut.data()),
                    P(c.y.data()), I(s.T), I(s.hidden), I(0), I(0)}));
    return c;
  }
};

// ------------------------------------------------------------ moe_group

TEST(MoePrefillTwin, GroupSortsStablyAndBuildsEveryItem) {
  PrefillSetup st;
  st.name = "group";
  st.T = 37, st.topk = 4, st.E = 20, st.S = 1, st.BM = 8, st.hidden = 256;
  st.owned = 0.6;
  PrefillProblem pr(st);
  // More empties: a tenth of the slots -1 or past the routed experts.
  std::mt19937 rng(5);
  for (int &id : pr.ids)
    if (rng() % 10 == 0)
      id = (rng() & 1) ? -1 : st.E + int(rng() % 3);
  PrefillProblem::Chain c;
  c.order.assign(pr.N, 12345);
  c.entryOf.assign(pr.N, 12345);
  GemmItem junk;
  std::memset(&junk, 0xff, sizeof junk);
  const int H = PrefillProblem::kH;
  c.guItems.assign(size_t(pr.NB) * 2 * H, junk);
  c.downItems.assign(size_t(H) * pr.NB, junk);
  const glm::plan::KeyValues targs = {{"threads", "256"}};
  runTwin(pr.groupLaunch(targs, c));

  // The expected order: valid entries, stably sorted by expert.
  std::vector<int> valid;
  for (int q = 0; q < pr.N; ++q)
    if (pr.entryExpert(q) >= 0)
      valid.push_back(q);
  std::stable_sort(valid.begin(), valid.end(), [&](int a, int b) {
    return pr.entryExpert(a) < pr.entryExpert(b);
  });
  ASSERT_LT(int(valid.size()), pr.N); // the routing has empties
  for (int i = 0; i < pr.N; ++i)
    ASSERT_EQ(c.order[i], i < int(valid.size()) ? valid[i] : -1) << i;
  for (int q = 0; q < pr.N; ++q) {
    if (pr.entryExpert(q) < 0) {
      ASSERT_EQ(c.entryOf[q], -1) << q;
      continue;
    }
    ASSERT_GE(c.entryOf[q], 0) << q;
    ASSERT_EQ(c.order[c.entryOf[q]], q) << q;
  }
  // Items: the blocks of every expert in expert order, then empty slots.
  std::vector<int> cnt(pr.eTot, 0);
  for (int q : valid)
    ++cnt[pr.entryExpert(q)];
  int b = 0, row = 0, counted = 0;
  auto same = [](const GemmItem &a, const GemmItem &e) {
    return a.tiles == e.tiles && a.z_off == e.z_off &&
           a.row_start == e.row_start && a.rows == e.rows &&
           a.x_col == e.x_col && a.k == e.k;
  };
  for (int e = 0; e < pr.eTot; ++e) {
    counted += cnt[e];
    for (int j = 0; j * st.BM < cnt[e]; ++j, ++b) {
      const int r0 = row + j * st.BM,
                rows = std::min(st.BM, cnt[e] - j * st.BM);
      for (int h = 0; h < H; ++h) {
        for (int p = 0; p < 2; ++p) {
          const int idx = (e * 3 + p) * 16 + h;
          const GemmItem want{pr.tiles[idx],
                              (long long)r0 * 2 * PrefillProblem::kInter +
                                  p * PrefillProblem::kInter + 128 * h,
                              r0,
                              rows,
                              p * st.hidden,
                              pr.widths[idx]};
          ASSERT_TRUE(same(c.guItems[(size_t(b) * 2 + p) * H + h], want))
              << "gate/up item of expert " << e << " block " << j << " p " << p
              << " h " << h;
        }
        const int idx = (e * 3 + 2) * 16 + h;
        const GemmItem want{
            pr.tiles[idx], (long long)r0 * st.hidden, r0, rows, 128 * h,
            pr.widths[idx]};
        ASSERT_TRUE(same(c.downItems[size_t(h) * pr.NB + b], want))
            << "down item of expert " << e << " block " << j << " h " << h;
      }
    }
    row += cnt[e];
  }
  EXPECT_EQ(counted, int(valid.size()));
  EXPECT_GT(b, pr.eTot); // experts with more than one block
  const GemmItem zero{};
  for (int bb = b; bb < pr.NB; ++bb)
    for (int h = 0; h < H; ++h) {
      for (int p = 0; p < 2; ++p)
        ASSERT_TRUE(same(c.guItems[(size_t(bb) * 2 + p) * H + h], zero));
      ASSERT_TRUE(same(c.downItems[size_t(h) * pr.NB + bb], zero));
    }
  std::printf("[twin] moe_group: %zu valid of %d entries, %d of %d slots\n",
              valid.size(), pr.N, b, pr.NB);

  // NB below what the routing can need: CUDA traps, the twin refuses.
  PrefillProblem small = pr;
  small.NB = b - 1;
  EXPECT_THROW(runTwin(small.groupLaunch(targs, c)), glm::rt::Error);
}

TEST(MoePrefillTwin, GroupWithoutEntries) {
  PrefillSetup st;
  st.name = "group_empty";
  st.S = 0, st.T = 3, st.hidden = 128;
  PrefillProblem pr(st);
  std::fill(pr.ids.begin(), pr.ids.end(), -1);
  PrefillProblem::Chain c;
  c.order.assign(pr.N, 7);
  c.entryOf.assign(pr.N, 7);
  c.guItems.assign(size_t(pr.NB) * 32, GemmItem{});
  c.downItems.assign(size_t(pr.NB) * 16, GemmItem{});
  c.guItems[3].rows = 99;
  const glm::plan::KeyValues targs = {{"threads", "512"}};
  runTwin(pr.groupLaunch(targs, c));
  for (int i = 0; i < pr.N; ++i) {
    EXPECT_EQ(c.order[i], -1);
    EXPECT_EQ(c.entryOf[i], -1);
  }
  EXPECT_EQ(c.guItems[3].rows, 0);
}

// --------------------------------------------------------- whole chain

class MoePrefillChain : public ::testing::TestWithParam<PrefillSetup> {};

TEST_P(MoePrefillChain, MatchesTheDecodePath) {
  const PrefillProblem pr(GetParam());
  const std::vector<float> xh = pr.rotatedInput();
  const PrefillProblem::Chain c = pr.prefillPath(xh);
  const std::vector<float> ref = pr.decodePath(xh);
  std::vector<double> refD(ref.begin(), ref.end());
  double maxRef = 0;
  for (double v : refD)
    maxRef = std::max(maxRef, std::fabs(v));
  ASSERT_GT(maxRef, 0.0);
  expectRel(pr.s.name + " prefill chain vs moe_trellis", c.y.data(),
            refD.data(), refD.size(), pr.s.tol);
  // Down in one launch (halves added in fp64, one rounding) against one
  // launch per half (each half rounded, then added in fp32): the same
  // products, two fp32 roundings orders.
  const PrefillProblem::Chain perHalf = pr.prefillPath(xh, true);
  std::vector<double> zdHalf(perHalf.zd.begin(), perHalf.zd.end());
  int nWritten = 0;
  while (nWritten < pr.N && c.order[nWritten] >= 0)
    ++nWritten;
  expectRel(pr.s.name + " down in one launch vs per half", c.zd.data(),
            zdHalf.data(), size_t(nWritten) * pr.s.hidden, 2e-6);

  // Each step as its ABI states, on the chain's own buffers.
  int nValid = 0;
  while (nValid < pr.N && c.order[nValid] >= 0)
    ++nValid;
  const int H = PrefillProblem::kH, inter = PrefillProblem::kInter;
  for (int i = 0; i < pr.N; ++i) {
    if (i >= nValid) { // not written by moe_gather / moe_act
      ASSERT_EQ(c.X[size_t(i) * 2 * pr.s.hidden], 0x7e00) << i;
      ASSERT_EQ(c.act[size_t(i) * inter], 0x7e00) << i;
      continue;
    }
    const int q = c.order[i], e = pr.entryExpert(q), t = q / pr.U;
    for (int j = 0; j < 2 * pr.s.hidden; j += 37) {
      const int p = j / pr.s.hidden, col = j % pr.s.hidden;
      const float v = xh[size_t(t) * pr.s.hidden + col] *
                      pr.guSu[(size_t(p) * pr.eTot + e) * pr.nBlk + col / 128];
      ASSERT_EQ(c.X[size_t(i) * 2 * pr.s.hidden + j], glm::rt::floatToHalf(v));
    }
    for (int h = 0; h < H; ++h)
      if (!pr.tiles[(e * 3) * 16 + h])
        for (int j = 0; j < 128; ++j)
          ASSERT_EQ(c.act[size_t(i) * inter + 128 * h + j], 0) << i << " " << h;
  }
  // accumulate adds the same sum exactly.
  std::vector<float> twice = c.out;
  const glm::plan::KeyValues t256 = {{"threads", "256"}};
  runTwin(
      launch("moe_combine", t256, unsigned(pr.s.T), 1, 256,
             {P(c.zd.data()), P(c.entryOf.data()), P(pr.ids.data()),
              P(pr.rw.data()), P(pr.dSvB.data()), P(twice.data()), I(pr.s.T),
              I(pr.s.topk), I(pr.s.E), I(pr.s.S), I(pr.s.hidden), I(1)}));
  for (size_t i = 0; i < twice.size(); ++i)
    ASSERT_EQ(twice[i], c.out[i] + c.out[i]) << i;
}

std::vector<PrefillSetup> chainSetups() {
  std::vector<PrefillSetup> v;
  PrefillSetup a;
  a.name = "t8_k234_e6_shared_bm64";
  v.push_back(a);
  PrefillSetup b = a; // tensor parallel: a rank's halves only
  b.name = "t8_k234_e6_shared_bm64_tp_halves";
  b.owned = 0.6;
  v.push_back(b);
  PrefillSetup c = a; // no shared expert, BM 128, the SwiGLU clamp
  c.name = "t8_k234_e9_noshared_bm128_clamp";
  c.E = 9, c.S = 0, c.topk = 4, c.BM = 128, c.limit = 2.0f;
  c.empties = false;
  c.tol = 3e-3;
  v.push_back(c);
  PrefillSetup d = a; // BM 96 (a 2048-token chunk's items), 128-thread down
  d.name = "t8_k234_e6_shared_bm96";
  d.BM = 96;
  v.push_back(d);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, MoePrefillChain,
                         ::testing::ValuesIn(chainSetups()),
                         [](const auto &info) { return info.param.name; });

// ----------------------------------------------------------- footprints

twins::Footprint footprint(const Launch &l) {
  return twins::footprintOf(*twins::findFootprint(l.family), l);
}

TEST(MoePrefillFootprint, CoversTheChainsBuffers) {
  PrefillSetup st;
  st.name = "fp";
  const PrefillProblem pr(st);
  PrefillProblem::Chain c; // sizes only: footprints read no memory
  c.order.resize(pr.N), c.entryOf.resize(pr.N);
  c.guItems.resize(size_t(pr.NB) * 32), c.downItems.resize(size_t(pr.NB) * 16);
  const glm::plan::KeyValues t512 = {{"threads", "512"}};
  const twins::Footprint g = footprint(pr.groupLaunch(t512, c));
  EXPECT_EQ(g.bytes[0], uint64_t(pr.s.T) * pr.s.topk * 4);
  EXPECT_EQ(g.bytes[7], uint64_t((pr.eTot * 3 - 1) * 16 + 16) * 8);
  EXPECT_EQ(g.bytes[11], uint64_t(pr.N) * 4);
  EXPECT_EQ(g.bytes[13], uint64_t(pr.NB) * 32 * 32);
  EXPECT_EQ(g.bytes[14], uint64_t(pr.NB) * 16 * 32);

  const int hidden = pr.s.hidden, inter = PrefillProblem::kInter;
  Launch act = launch("moe_act", t512, unsigned(pr.N), 1, 512,
                      {P(&c), P(&c), P(&c), P(&c), P(&c), P(nullptr), P(&c),
                       P(&c), I(pr.N), I(pr.s.topk), I(pr.s.E), I(pr.s.S),
                       I(inter), I(hidden), F(0)});
  twins::Footprint a = footprint(act);
  EXPECT_EQ(a.bytes[0], uint64_t(pr.N) * 2 * inter * 4);
  EXPECT_EQ(a.bytes[1], uint64_t(pr.s.T) * pr.s.topk * 4);
  EXPECT_EQ(a.bytes[4], uint64_t(2) * pr.eTot * inter * 4);
  EXPECT_TRUE(a.nullable[5]);
  EXPECT_EQ(a.bytes[6], uint64_t(pr.N) * inter * 2);
  EXPECT_EQ(a.bytes[7], uint64_t(pr.N) * hidden * 4);
  act.grid[1] = 1, act.block[0] = 256; // 8 of the 16 halves
  a = footprint(act);
  EXPECT_EQ(a.bytes[6], uint64_t(pr.N - 1) * inter * 2 + 8 * 128 * 2);

  const glm::plan::KeyValues t256 = {{"threads", "256"}};
  const twins::Footprint gx =
      footprint(launch("moe_gather", t256, unsigned(pr.N), 1, 256,
                       {P(&c), P(&c), P(&c), P(&c), P(&c), I(pr.N),
                        I(pr.s.topk), I(pr.s.E), I(pr.s.S), I(hidden)}));
  EXPECT_EQ(gx.bytes[0], uint64_t(pr.s.T) * hidden * 4);
  EXPECT_EQ(gx.bytes[4], uint64_t(pr.N) * 2 * hidden * 2);
  // The gate and up rows of the su_block table, nothing past them (the
  // plan sizes the table so).
  EXPECT_EQ(gx.bytes[3], uint64_t(2) * pr.eTot * (hidden / 128) * 4);
  const twins::Footprint cb =
      footprint(launch("moe_combine", t256, unsigned(pr.s.T), 1, 256,
                       {P(&c), P(&c), P(&c), P(&c), P(&c), P(&c), I(pr.s.T),
                        I(pr.s.topk), I(pr.s.E), I(pr.s.S), I(hidden), I(0)}));
  EXPECT_EQ(cb.bytes[0], uint64_t(pr.N) * hidden * 4);
  EXPECT_EQ(cb.bytes[1], uint64_t(pr.N) * 4);
  EXPECT_EQ(cb.bytes[5], uint64_t(pr.s.T) * hidden * 4);
}

TEST(MoePrefillFootprint, RefusesWhatTheKernelsTrapOnOrMisread) {
  PrefillSetup st;
  st.name = "fp_refuse";
  PrefillProblem pr(st);
  PrefillProblem::Chain c;
  const glm::plan::KeyValues t512 = {{"threads", "512"}};
  auto refusedArg = [&](const Launch &l) -> int {
    try {
      footprint(l);
    } catch (const twins::BadLaunchArg &b) {
      return int(b.arg);
    }
    return -1;
  };
  EXPECT_EQ(refusedArg(pr.groupLaunch(t512, c)), -1);
  pr.NB -= 1; // below ceil(N/BM) + E + S
  EXPECT_EQ(refusedArg(pr.groupLaunch(t512, c)), 15);
  pr.NB += 1;
  pr.s.E = 600; // more experts than moe_group's tables
  EXPECT_EQ(refusedArg(pr.groupLaunch(t512, c)), 3);
  pr.s.E = 6;
  Launch l = pr.groupLaunch(t512, c);
  l.args[10].i = 1024; // inter != 128*H
  EXPECT_EQ(refusedArg(l), 10);
  l.args[10].i = 2048;
  l.args[5].i = 17; // more halves than the tables hold
  EXPECT_EQ(refusedArg(l), 5);
}

TEST(MoePrefillTwin, ParameterListsAreTheFamiliesAbi) {
  const std::map<std::string, std::vector<std::string>> want = {
      {"moe_group",
       {"expert_ids", "T", "topk", "E", "S", "H", "BM", "tiles", "widths",
        "hidden", "inter", "order", "entry_of", "gu_items", "down_items",
        "NB"}},
      {"moe_gather",
       {"xh", "expert_ids", "order", "gu_su_block", "X", "N", "topk", "E", "S",
        "hidden"}},
      {"moe_act",
       {"Zgu", "expert_ids", "order", "tiles", "gu_svh", "down_suh", "act",
        "zd", "N", "topk", "E", "S", "inter", "hidden", "swiglu_limit"}},
      {"moe_combine",
       {"zd", "entry_of", "expert_ids", "route_w", "down_sv_block", "out", "T",
        "topk", "E", "S", "hidden", "accumulate"}},
  };
  for (const auto &[family, params] : want) {
    EXPECT_EQ(glm::codegen::familyInfo(family).kernelParams, params) << family;
    EXPECT_NE(twins::findTwin(family), nullptr) << family;
    // Helpers: built with --fmad=false (their twins round every op).
    const glm::plan::KernelDef k = glm::codegen::buildKernel(
        {family, {{"threads", "256"}}, {"sm_90"}}, false);
    EXPECT_EQ(k.nvrtcOptions.back(), "--fmad=false") << family;
  }
}

} // namespace
