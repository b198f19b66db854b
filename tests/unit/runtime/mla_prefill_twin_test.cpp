//===- mla_prefill_twin_test.cpp - the tensor-core prefill attention ------===//
//
// mla_prefill's twin (the kernel's fp16 roundings) and the split decode
// attention's (mla_scores, mla_softmax, mla_values) against mla_core's twin
// (fp32 inputs, one launch) on the same rows, selections and caches:
// GLM-5.3's shape (64 heads, kvr 512 + 64 rope), a rank's 8 heads of 64,
// the tiny test models' shapes, f32 / bf16 / e4m3 caches, selections of 1
// to a few hundred keys (ragged 16-key tiles). Heads outside the table keep
// their rows. Then the footprint: what the launch covers and what it
// refuses.
//
//===----------------------------------------------------------------------===//
#include "codegen/mla_prefill_abi.h"
#include "codegen/templates/mla_split_layout.cuh"
#include "runtime/twins/footprint.h"
#include "runtime/twins/kv_rows.h"
#include "twin_test_util.h"

#include <algorithm>
#include <cstring>
#include <numeric>

using namespace glm::twintest;
namespace twins = glm::rt::twins;
namespace cg = glm::codegen;

namespace {

struct Shape {
  std::string name;
  int H, hb, he; // heads [hb, he) of H in the table
  int dn, dr, kvr;
  std::vector<int> nsel; // selected keys per row
  int kv = 0;            // cache form
  float qMag = 1.0f, kMag = 1.0f; // magnitudes of q and of the cache rows
};

struct Problem {
  Shape s;
  int B, maxCtx = 512, slots = 2, lat;
  std::vector<float> q, qabs;
  std::vector<uint8_t> cache;
  std::vector<int> seq, sel, nsel, heads;
  std::vector<int> pages; // paged(): the slots' page tables
  int pageShift = 0;

  explicit Problem(const Shape &sh) : s(sh) {
    std::mt19937 rng(std::hash<std::string>()(s.name) & 0xFFFFFFF);
    std::normal_distribution<float> g(0.0f, 1.0f);
    B = int(s.nsel.size());
    lat = s.kvr + s.dr;
    q.resize(size_t(B) * s.H * (s.dn + s.dr));
    qabs.resize(size_t(B) * s.H * s.kvr);
    for (float &v : q)
      v = g(rng) * s.qMag;
    for (float &v : qabs)
      v = g(rng) * s.qMag;
    cache.resize(size_t(slots) * maxCtx * twins::kvRowBytes(s.kv, lat));
    std::vector<float> row(lat);
    for (int r = 0; r < slots * maxCtx; ++r) {
      for (float &v : row)
        v = g(rng) * s.kMag;
      twins::kvWriteRow(cache.data(), s.kv, r, row.data(), lat);
    }
    sel.assign(size_t(B) * maxCtx, 0);
    for (int b = 0; b < B; ++b) {
      seq.push_back(b % slots);
      nsel.push_back(s.nsel[b]);
      std::vector<int> ids(maxCtx);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy(ids.begin(), ids.begin() + s.nsel[b], sel.begin() + b * maxCtx);
    }
    for (int h = s.hb; h < s.he; ++h)
      heads.push_back(h);
  }
  int nh() const { return int(heads.size()); }
  /// The same rows in a paged cache (kv::SlotRows): pages of 2^shift rows
  /// in a pool of `spare` more pages than the slots need, each slot's pages
  /// at shuffled places of it.
  Problem paged(int shift, int spare) const {
    Problem p = *this;
    p.pageShift = shift;
    const int P = 1 << shift, per = maxCtx / P, n = slots * per + spare;
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(77);
    std::shuffle(order.begin(), order.end(), rng);
    p.pages.assign(order.begin(), order.begin() + slots * per);
    const size_t rb = size_t(twins::kvRowBytes(s.kv, lat));
    p.cache.assign(size_t(n) * P * rb, 0xAB);
    for (int sl = 0; sl < slots; ++sl)
      for (int t = 0; t < maxCtx; ++t)
        std::memcpy(p.cache.data() +
                        (size_t(p.pages[sl * per + t / P]) * P + t % P) * rb,
                    cache.data() + (size_t(sl) * maxCtx + t) * rb, rb);
    return p;
  }
  void pageArgs(std::vector<Arg> &a) const {
    a.push_back(P(pages.empty() ? nullptr : pages.data()));
    a.push_back(I(pageShift));
  }

  /// mla_core's or mla_prefill's launch over ctx / p (mla_prefill's rows
  /// of p `pStride` apart; 0: maxCtx).
  Launch run(const std::string &family, const glm::plan::KeyValues &t,
             std::vector<float> &ctx, std::vector<float> &p,
             int pStride = 0) const {
    if (pStride == 0)
      pStride = maxCtx;
    ctx.assign(size_t(B) * s.H * s.kvr, -7.0f);
    p.assign(size_t(B) * s.H * (family == "mla_prefill" ? pStride : maxCtx),
             0.0f);
    const double scale = 1.0 / std::sqrt(double(s.dn + s.dr));
    std::vector<Arg> a = {P(q.data()),   P(qabs.data()), P(cache.data()),
                          P(seq.data()), P(sel.data()),  P(nsel.data()),
                          P(p.data()),   I(maxCtx),      P(ctx.data()),
                          P(heads.data())};
    if (family == "mla_prefill") {
      const int threads = cg::mlaPrefillThreads(nh());
      a.push_back(I(nh()));
      for (int v : {s.H, s.dn, s.dr, s.kvr})
        a.push_back(I(v));
      a.push_back(F(scale));
      a.push_back(I(pStride));
      pageArgs(a);
      return launch(family, t, cg::mlaPrefillGridX(nh(), threads), B, threads,
                    a, unsigned(cg::mlaPrefillSmem(threads, s.kvr, s.dr)));
    }
    for (int v : {s.H, s.dn, s.dr, s.kvr})
      a.push_back(I(v));
    a.push_back(F(scale));
    pageArgs(a);
    return launch(family, t, nh(), B, 1024, a);
  }
  /// The split decode attention's three launches over ctx / p (the
  /// compiler's grids: glm-emit-plan), kv as coreArgs() names it. Returns
  /// the mla_scores launch (for its footprint).
  Launch runSplit(std::vector<float> &ctx, std::vector<float> &p,
                  std::vector<float> &inv, const glm::plan::KeyValues &t256,
                  const glm::plan::KeyValues &t1024) const {
    namespace ms = glm::mla_split;
    ctx.assign(size_t(B) * s.H * s.kvr, -7.0f);
    p.assign(size_t(B) * s.H * maxCtx, 0.0f);
    inv.assign(size_t(B) * s.H, -7.0f);
    const double scale = 1.0 / std::sqrt(double(s.dn + s.dr));
    const int maxSel = *std::max_element(nsel.begin(), nsel.end());
    std::vector<Arg> a = {P(q.data()),    P(qabs.data()), P(cache.data()),
                          P(seq.data()),  P(sel.data()),  P(nsel.data()),
                          P(p.data()),    I(maxCtx),      P(heads.data()),
                          I(nh()),        I(s.H),         I(s.dn),
                          I(s.dr),        I(s.kvr),       F(scale)};
    pageArgs(a);
    const Launch scores = launch(
        "mla_scores", t256, unsigned(ms::scoreGridX(nh(), maxSel)), B,
        ms::kScoreThreads, a, unsigned(ms::scoreSmem(s.kvr, s.dr)));
    runTwin(scores);
    runTwin(launch("mla_softmax", t1024, nh(), B, 1024,
                   {P(p.data()), P(nsel.data()), I(maxCtx), P(heads.data()),
                    I(s.H), P(inv.data())}));
    std::vector<Arg> v = {P(cache.data()), P(seq.data()),  P(sel.data()),
                          P(nsel.data()),  P(p.data()),    P(inv.data()),
                          I(maxCtx),       P(ctx.data()),  P(heads.data()),
                          I(nh()),         I(s.H),         I(s.dr),
                          I(s.kvr)};
    pageArgs(v);
    runTwin(launch("mla_values", t256, unsigned(ms::valueGridX(nh(), s.kvr)),
                   B, ms::kValueThreads, v));
    return scores;
  }
  glm::plan::KeyValues splitArgs(int threads) const {
    glm::plan::KeyValues t = {{"threads", std::to_string(threads)}};
    if (s.kv && threads == 256)
      t["kv"] = s.kv == 1 ? "bf16" : "e4m3";
    return t;
  }
  glm::plan::KeyValues prefillArgs() const {
    glm::plan::KeyValues t = {
        {"vt", std::to_string(s.kvr / 16)},
        {"threads", std::to_string(cg::mlaPrefillThreads(nh()))}};
    if (s.kv)
      t["kv"] = s.kv == 1 ? "bf16" : "e4m3";
    return t;
  }
  glm::plan::KeyValues coreArgs() const {
    glm::plan::KeyValues t = {{"threads", "1024"}};
    if (s.kv)
      t["kv"] = s.kv == 1 ? "bf16" : "e4m3";
    return t;
  }
};

class MlaPrefillTwin : public ::testing::TestWithParam<Shape> {};

/// fp16 q, keys and probabilities against fp32: each enters with a
/// relative rounding error up to 2^-11 (rms ~2.8e-4), so a score moves by
/// ~3e-4 of its typical size and ctx (a convex mix of values of size ~1)
/// by a few 1e-4 of max|ctx|, whatever the magnitudes (each row enters
/// scaled by a power of two); 1.5e-3 bounds what was measured (below).
TEST_P(MlaPrefillTwin, MatchesMlaCoreWithinTheFp16Rounding) {
  const Problem pr(GetParam());
  const glm::plan::KeyValues tc = pr.coreArgs(), tp = pr.prefillArgs();
  std::vector<float> want, got, pw, pg;
  runTwin(pr.run("mla_core", tc, want, pw));
  runTwin(pr.run("mla_prefill", tp, got, pg));
  const Shape &s = pr.s;
  double worst = 0, peak = 0;
  for (int b = 0; b < pr.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int c = 0; c < s.kvr; ++c) {
        const size_t i = (size_t(b) * s.H + h) * s.kvr + c;
        if (h < s.hb || h >= s.he) { // not this launch's head
          ASSERT_EQ(got[i], -7.0f) << s.name << " b " << b << " h " << h;
          continue;
        }
        ASSERT_TRUE(std::isfinite(got[i])) << s.name;
        worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        peak = std::max(peak, double(std::fabs(want[i])));
      }
  ASSERT_GT(peak, 0.0);
  const double rel = worst / peak;
  std::printf("[ mla_prefill ] %-22s max|prefill - core| / max|core| = %.3g\n",
              s.name.c_str(), rel);
  EXPECT_LT(rel, 1.5e-3) << s.name;
  EXPECT_GT(rel, 0.0) << s.name << ": fp16 inputs cannot be exact";
  // The scores left in p are the softmax's inputs: q . k * scale.
  for (int b = 0; b < pr.B; ++b)
    for (int i = 0; i < pr.nh(); ++i)
      for (int j = 0; j < pr.nsel[b]; ++j) {
        const float sc =
            pg[(size_t(b) * s.H + pr.heads[i]) * pr.maxCtx + size_t(j)];
        ASSERT_TRUE(std::isfinite(sc));
      }
}

/// mla_rows16 then mla_prefill<keys = rows16> gives the bits the cache path
/// gives, for a chunk of one slot: the per-row forms are the same bits
/// whether made per tile or once; the rows past the chunk's last position
/// are left as they were.
TEST_P(MlaPrefillTwin, Rows16PathHasTheCachePathsBits) {
  Problem pr(GetParam());
  const Shape &s = pr.s;
  for (int &q : pr.seq)
    q = 1; // one slot, as a prefill chunk has
  // The chunk's positions: the selections stay below the last + 1.
  int top = 0;
  for (int b = 0; b < pr.B; ++b)
    for (int j = 0; j < pr.nsel[b]; ++j)
      top = std::max(top, pr.sel[size_t(b) * pr.maxCtx + j]);
  std::vector<int> pos(pr.B);
  for (int b = 0; b < pr.B; ++b)
    pos[b] = top - (pr.B - 1 - b);
  std::vector<uint8_t> rows16(size_t(glm::rows16::bytes(pr.maxCtx, s.kvr, s.dr)),
                              0xEE);
  glm::plan::KeyValues tr = {{"threads", "256"}};
  if (s.kv)
    tr["kv"] = s.kv == 1 ? "bf16" : "e4m3";
  runTwin(launch("mla_rows16", tr,
                 unsigned((pr.maxCtx + glm::rows16::kRowsPerBlock - 1) /
                          glm::rows16::kRowsPerBlock),
                 1, 256,
                 {P(pr.cache.data()), P(pr.seq.data()), P(pos.data()),
                  I(pr.B), I(pr.maxCtx), I(s.kvr), I(s.dr), P(rows16.data()),
                  P(nullptr), I(0)}));
  const size_t kh = size_t(glm::rows16::keyHalves(s.kvr, s.dr));
  for (size_t i = size_t(top + 1) * kh * 2; i < size_t(pr.maxCtx) * kh * 2; ++i)
    ASSERT_EQ(rows16[i], 0xEE) << s.name << ": past the last position";
  std::vector<float> want, got, pw, pg;
  runTwin(pr.run("mla_prefill", pr.prefillArgs(), want, pw));
  Problem from16 = pr;
  from16.cache = rows16;
  glm::plan::KeyValues t16 = pr.prefillArgs();
  t16.erase("kv");
  t16["keys"] = "rows16";
  runTwin(from16.run("mla_prefill", t16, got, pg));
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
        << s.name << " ctx " << i << ": " << want[i] << " vs " << got[i];
  ASSERT_EQ(std::memcmp(pw.data(), pg.data(), pw.size() * 4), 0) << s.name;
}

/// The split decode attention sums as mla_core does at 1024 threads where
/// kvr / 4 columns leave 8 row groups (kvr in (448, 512]: GLM-5.3's and
/// GLM-5.3-Flash's 512): scores, weights and ctx are mla_core's bits. Other
/// shapes keep the split's 8 groups (mla_core's depend on kvr), so ctx
/// differs from mla_core's by the order of its sums only; the weights p are
/// the same bits at every shape. Paged caches give the unpaged bits.
TEST_P(MlaPrefillTwin, SplitDecodeAttentionIsMlaCoreInThreeLaunches) {
  const Problem pr(GetParam());
  const Shape &s = pr.s;
  const glm::plan::KeyValues tc = pr.coreArgs(), t256 = pr.splitArgs(256),
                             t1024 = pr.splitArgs(1024);
  std::vector<float> want, pw, got, pg, inv;
  runTwin(pr.run("mla_core", tc, want, pw));
  pr.runSplit(got, pg, inv, t256, t1024);
  ASSERT_EQ(std::memcmp(pw.data(), pg.data(), pw.size() * 4), 0) << s.name;
  const bool sameOrder = 1024 / (s.kvr / 4) == glm::mla_split::kValueGroups;
  double worst = 0, peak = 0;
  for (int b = 0; b < pr.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int c = 0; c < s.kvr; ++c) {
        const size_t i = (size_t(b) * s.H + h) * s.kvr + c;
        if (h < s.hb || h >= s.he) {
          ASSERT_EQ(got[i], -7.0f) << s.name << " h " << h;
          continue;
        }
        if (sameOrder)
          ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
              << s.name << " ctx " << i << ": " << want[i] << " vs " << got[i];
        worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        peak = std::max(peak, double(std::fabs(want[i])));
      }
  // fp32 sums of up to a few hundred products in another order.
  EXPECT_LE(worst, 1e-5 * peak) << s.name;
  for (int shift : {6, 7}) {
    const Problem pgd = pr.paged(shift, 3);
    std::vector<float> c2, p2, inv2;
    pgd.runSplit(c2, p2, inv2, t256, t1024);
    ASSERT_EQ(std::memcmp(got.data(), c2.data(), got.size() * 4), 0)
        << s.name << " pages of " << (1 << shift);
  }
}

/// p's rows only as long as the longest selection (the plan's DSA top-k)
/// give the same bits as rows of maxCtx; a shorter stride caps each row's
/// keys at it (the kernel never writes past a row).
/// A paged cache (glmc compile --kv-page-tokens) holding the same rows at
/// shuffled pages gives mla_core, mla_prefill and mla_rows16 the bits of
/// the unpaged cache.
TEST_P(MlaPrefillTwin, PagedCacheGivesTheUnpagedBits) {
  const Problem pr(GetParam());
  const Shape &s = pr.s;
  for (int shift : {6, 7}) {
    const Problem pg = pr.paged(shift, 3);
    std::vector<float> a, b, pa, pb;
    runTwin(pr.run("mla_core", pr.coreArgs(), a, pa));
    runTwin(pg.run("mla_core", pr.coreArgs(), b, pb));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
        << s.name << " mla_core, pages of " << (1 << shift);
    runTwin(pr.run("mla_prefill", pr.prefillArgs(), a, pa));
    runTwin(pg.run("mla_prefill", pr.prefillArgs(), b, pb));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
        << s.name << " mla_prefill, pages of " << (1 << shift);
    // mla_rows16 of slot 1 up to its last row.
    const std::vector<int> pos = {pr.maxCtx - 1};
    const std::vector<int> slot1 = {1};
    glm::plan::KeyValues tr = {{"threads", "256"}};
    if (s.kv)
      tr["kv"] = s.kv == 1 ? "bf16" : "e4m3";
    const size_t bytes = size_t(glm::rows16::bytes(pr.maxCtx, s.kvr, s.dr));
    std::vector<uint8_t> ra(bytes, 0xEE), rb(bytes, 0xEE);
    for (const Problem *x : {&pr, &pg}) {
      std::vector<Arg> args = {P(x->cache.data()), P(slot1.data()),
                               P(pos.data()),      I(1),
                               I(pr.maxCtx),       I(s.kvr),
                               I(s.dr),            P((x == &pr ? ra : rb).data())};
      x->pageArgs(args);
      runTwin(launch("mla_rows16", tr, unsigned(pr.maxCtx / 8), 1, 256, args));
    }
    ASSERT_EQ(ra, rb) << s.name << " mla_rows16, pages of " << (1 << shift);
  }
}

TEST_P(MlaPrefillTwin, ScoreRowsOfTheLongestSelectionGiveTheSameBits) {
  const Problem pr(GetParam());
  const int most = *std::max_element(pr.nsel.begin(), pr.nsel.end());
  std::vector<float> want, got, pw, pg;
  runTwin(pr.run("mla_prefill", pr.prefillArgs(), want, pw));
  runTwin(pr.run("mla_prefill", pr.prefillArgs(), got, pg, most));
  ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
      << pr.s.name;
  for (size_t r = 0; r < pg.size() / size_t(most); ++r)
    ASSERT_EQ(std::memcmp(pw.data() + r * pr.maxCtx, pg.data() + r * most,
                          size_t(most) * 4),
              0)
        << pr.s.name << " p row " << r;
  if (most > 1) { // capped: the first most - 1 keys of every row
    runTwin(pr.run("mla_prefill", pr.prefillArgs(), got, pg, most - 1));
    EXPECT_NE(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
        << pr.s.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaPrefillTwin,
    ::testing::Values(
        Shape{"glm53_64_heads", 64, 0, 64, 192, 64, 512, {1, 37, 300}},
        Shape{"glm53_rank_of_8", 64, 8, 16, 192, 64, 512, {16, 129}},
        Shape{"glm53_bf16", 64, 0, 64, 192, 64, 512, {200}, 1},
        Shape{"glm53_e4m3", 64, 40, 64, 192, 64, 512, {17, 250}, 2},
        Shape{"tiny_dsa_a", 4, 0, 4, 16, 8, 32, {1, 2, 8, 23}},
        Shape{"tiny_dsa_b", 6, 0, 6, 16, 16, 48, {5, 12, 31}},
        Shape{"no_rope", 20, 0, 20, 32, 0, 64, {3, 64, 65}},
        // Magnitudes past fp16's range and below its normals: each row's
        // power-of-two scale keeps them (the softmax sees scores of the
        // same size: q 1e5 x keys 1e-5).
        Shape{"huge_q_tiny_keys", 64, 0, 64, 192, 64, 512, {40, 300}, 0, 1e5f,
              1e-5f},
        Shape{"huge_keys", 64, 0, 64, 192, 64, 512, {40, 300}, 2, 1e-6f,
              1e6f}),
    [](const auto &i) { return i.param.name; });

// ----------------------------------------------------------- footprints

twins::Footprint footprint(const Launch &l) {
  return twins::footprintOf(*twins::findFootprint(l.family), l);
}

TEST(MlaPrefillFootprint, CoversTheRowsHeadsAndCache) {
  const Problem pr(Shape{"fp", 64, 8, 16, 192, 64, 512, {16, 129}});
  const glm::plan::KeyValues t = pr.prefillArgs();
  std::vector<float> ctx, p;
  const Launch l = pr.run("mla_prefill", t, ctx, p);
  EXPECT_EQ(l.block[0], 64u); // 8 heads: one group of 16
  EXPECT_EQ(l.grid[0], 1u);
  const twins::Footprint f = footprint(l);
  const uint64_t rows = uint64_t(pr.B) * 64;
  EXPECT_EQ(f.bytes[0], rows * (192 + 64) * 4);
  EXPECT_EQ(f.bytes[1], rows * 512 * 4);
  EXPECT_EQ(f.bytes[6], rows * uint64_t(pr.maxCtx) * 4);
  EXPECT_EQ(f.bytes[8], rows * 512 * 4);
  EXPECT_EQ(f.bytes[9], 8u * 4);
  EXPECT_EQ(f.kvForm[2], 0);
}

TEST(MlaSplitFootprint, CoversTheRowsHeadsAndCacheAndRefusesOtherShapes) {
  namespace ms = glm::mla_split;
  const Problem pr(Shape{"fp", 64, 8, 16, 192, 64, 512, {16, 129}});
  const glm::plan::KeyValues t256 = pr.splitArgs(256),
                             t1024 = pr.splitArgs(1024);
  std::vector<float> ctx, p, inv;
  Launch l = pr.runSplit(ctx, p, inv, t256, t1024);
  EXPECT_EQ(l.grid[0], 9u); // 8 heads: one block of 16; 129 rows: 9 of 16
  const twins::Footprint f = footprint(l);
  const uint64_t rows = uint64_t(pr.B) * 64;
  EXPECT_EQ(f.bytes[0], rows * (192 + 64) * 4);
  EXPECT_EQ(f.bytes[1], rows * 512 * 4);
  EXPECT_EQ(f.bytes[6], rows * uint64_t(pr.maxCtx) * 4);
  EXPECT_EQ(f.bytes[8], 8u * 4);
  auto refused = [&](Launch bad) {
    try {
      footprint(bad);
    } catch (const twins::BadLaunchArg &e) {
      return int(e.arg);
    }
    return -1;
  };
  Launch x = l;
  x.smemBytes -= 4;
  EXPECT_EQ(refused(x), 0);
  x = l;
  x.block[0] = 512;
  EXPECT_EQ(refused(x), 8);
  x = l;
  x.args[13].i = 520; // kvr past the lanes' 16 channels
  EXPECT_EQ(refused(x), 13);
  x = l;
  x.args[12].i = 96; // rope past 64
  EXPECT_EQ(refused(x), 12);
  x = l;
  x.args[9].i = 20; // 20 heads: 2 blocks of 16, which do not divide 9
  EXPECT_EQ(refused(x), 9);
  // mla_values: its grid is the heads' and columns' blocks.
  std::vector<Arg> v = {P(pr.cache.data()), P(pr.seq.data()), P(pr.sel.data()),
                        P(pr.nsel.data()),  P(p.data()),      P(inv.data()),
                        I(pr.maxCtx),       P(ctx.data()),    P(pr.heads.data()),
                        I(8),               I(64),            I(64),
                        I(512),             P(nullptr),       I(0)};
  Launch vl = launch("mla_values", t256, unsigned(ms::valueGridX(8, 512)),
                     pr.B, 256, v);
  const twins::Footprint fv = footprint(vl);
  EXPECT_EQ(fv.bytes[7], rows * 512 * 4);
  EXPECT_EQ(fv.bytes[5], rows * 4);
  vl.grid[0] -= 1;
  EXPECT_EQ(refused(vl), 12);
}

TEST(MlaPrefillFootprint, Rows16CoversItsBuffer) {
  Problem pr(Shape{"fp16", 64, 0, 64, 192, 64, 512, {16, 129}});
  const uint64_t bytes = uint64_t(glm::rows16::bytes(pr.maxCtx, 512, 64));
  EXPECT_EQ(bytes, uint64_t(pr.maxCtx) * (576 * 2 + 512 * 2 + 8));
  std::vector<int> pos = {300, 301};
  std::vector<uint8_t> rows16(bytes);
  glm::plan::KeyValues tr = {{"threads", "256"}};
  Launch conv = launch("mla_rows16", tr, unsigned(pr.maxCtx / 8), 1, 256,
                       {P(pr.cache.data()), P(pr.seq.data()), P(pos.data()),
                        I(2), I(pr.maxCtx), I(512), I(64), P(rows16.data()),
                        P(nullptr), I(0)});
  twins::Footprint f = footprint(conv);
  EXPECT_EQ(f.bytes[0], uint64_t(pr.maxCtx) * 576 * 4);
  EXPECT_EQ(f.bytes[2], 2u * 4);
  EXPECT_EQ(f.bytes[7], bytes);
  conv.block[0] = 128;
  EXPECT_THROW(footprint(conv), twins::BadLaunchArg);
  conv.block[0] = 256;
  conv.args[5].i = 520; // not whole 16-column tiles
  EXPECT_THROW(footprint(conv), twins::BadLaunchArg);
  glm::plan::KeyValues t = pr.prefillArgs();
  t["keys"] = "rows16";
  std::vector<float> ctx, p;
  pr.cache = rows16;
  const Launch l = pr.run("mla_prefill", t, ctx, p);
  EXPECT_EQ(footprint(l).bytes[2], bytes);
}

TEST(MlaPrefillFootprint, RefusesShapesTheKernelDoesNotTake) {
  const Problem pr(Shape{"fp_refuse", 64, 0, 64, 192, 64, 512, {16}});
  std::vector<float> ctx, p;
  auto refusedArg = [&](const glm::plan::KeyValues &t,
                        auto &&edit) -> int {
    Launch l = pr.run("mla_prefill", t, ctx, p);
    edit(l);
    try {
      footprint(l);
    } catch (const twins::BadLaunchArg &b) {
      return int(b.arg);
    }
    return -1;
  };
  const glm::plan::KeyValues t = pr.prefillArgs();
  EXPECT_EQ(refusedArg(t, [](Launch &) {}), -1);
  glm::plan::KeyValues wrongVt = t;
  wrongVt["vt"] = "16"; // kvr 512 is 32 tiles
  EXPECT_EQ(refusedArg(wrongVt, [](Launch &) {}), 14);
  EXPECT_EQ(refusedArg(t, [](Launch &l) { l.smemBytes -= 16; }), 0);
  EXPECT_EQ(refusedArg(t, [](Launch &l) { l.block[0] = 512; }), 10);
  EXPECT_EQ(refusedArg(t, [](Launch &l) { l.args[13].i = 62; }), 13);
  EXPECT_EQ(refusedArg(t, [](Launch &l) { l.args[13].i = 68; }), 13);
  // Past 99 KB (the Sparks' limit) the compiler keeps mla_core.
  EXPECT_TRUE(cg::mlaPrefillTakes(512, 64, 64));
  EXPECT_FALSE(cg::mlaPrefillTakes(512, 64 + 512, 64));
  EXPECT_FALSE(cg::mlaPrefillTakes(520, 64, 64));
  EXPECT_FALSE(cg::mlaPrefillTakes(256, 128, 64)); // rope past 64
  EXPECT_EQ(cg::mlaPrefillThreadsFor(64, 8), 64);
  EXPECT_EQ(cg::mlaPrefillThreadsFor(64, 1), 256);
  EXPECT_EQ(cg::mlaPrefillThreadsFor(6, 1), 64);
}

} // namespace
