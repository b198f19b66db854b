//===- mla_proj_twin_test.cpp - per-head projections of a prefill chunk ---===//
//
// mla_proj's twin (3xTF32 operands, fp64 sums) against the decode kernels'
// twins on the same data: w = kn against mla_qabs (q_abs), w = nk against
// mla_out (the head outputs), for kv_b in every stored form the helpers
// read (f32, bf16, E4M3 with block-128, row and MXFP8 scales), GLM-5.3's
// shapes (a head's 192 + 256 rows of 512) over 16 of 64 heads and ragged
// row counts, and the tiny models' shapes. 3xTF32 keeps ~21 bits of each
// product: within 2e-6 of the fp32 kernels. Then what the footprint
// refuses.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/footprint.h"
#include "twin_test_util.h"

using namespace glm::twintest;
namespace twins = glm::rt::twins;

namespace {

struct ProjShape {
  std::string name;
  int H, hb, he, dn, dr, dv, kvr, R;
  std::string form; // f32, bf16, block, row, mx
};

/// kv_b [H * (dn + dv), kvr] in a stored form, with its scales.
struct KvB {
  int dt = 0, sk = 0;
  std::vector<uint8_t> w, s;
  std::string dtName() const {
    static const char *n[] = {"f32", "f16", "bf16", "e4m3"};
    return n[dt];
  }
  std::string skName() const {
    static const char *n[] = {"none", "block", "row", "mx"};
    return n[sk];
  }
};

KvB makeKvB(std::mt19937 &rng, const std::string &form, int rows, int in) {
  KvB k;
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t n = size_t(rows) * in;
  if (form == "f32" || form == "bf16") {
    k.dt = form == "f32" ? 0 : 2;
    k.w.resize(n * (k.dt == 0 ? 4 : 2));
    for (size_t i = 0; i < n; ++i) {
      const float v = g(rng) * 0.05f;
      if (k.dt == 0)
        std::memcpy(&k.w[4 * i], &v, 4);
      else {
        const uint16_t b = glm::rt::floatToBf16(v);
        std::memcpy(&k.w[2 * i], &b, 2);
      }
    }
    return k;
  }
  k.dt = 3;
  k.w.resize(n);
  for (auto &b : k.w) {
    b = uint8_t(rng());
    if ((b & 0x7F) == 0x7F) // NaN encodings: not in packs
      b &= 0xFE;
  }
  std::uniform_real_distribution<float> u(1e-4f, 1e-3f);
  auto floats = [&](size_t m) {
    k.s.resize(m * 4);
    for (size_t i = 0; i < m; ++i) {
      const float v = u(rng);
      std::memcpy(&k.s[4 * i], &v, 4);
    }
  };
  if (form == "block") {
    k.sk = 1;
    floats(size_t((rows + 127) / 128) * ((in + 127) / 128));
  } else if (form == "row") {
    k.sk = 2;
    floats(size_t(rows));
  } else {
    k.sk = 3;
    k.s.resize(size_t(rows) * (in / 32));
    for (auto &e : k.s)
      e = uint8_t(110 + rng() % 8);
  }
  return k;
}

struct ProjProblem {
  ProjShape s;
  KvB kvb;
  std::vector<float> q, ctx;
  std::vector<int> heads;
  explicit ProjProblem(const ProjShape &sh) : s(sh) {
    std::mt19937 rng(std::hash<std::string>()(s.name) & 0xFFFFFFF);
    std::normal_distribution<float> g(0.0f, 1.0f);
    kvb = makeKvB(rng, s.form, s.H * (s.dn + s.dv), s.kvr);
    q.resize(size_t(s.R) * s.H * (s.dn + s.dr));
    ctx.resize(size_t(s.R) * s.H * s.kvr);
    for (float &v : q)
      v = g(rng);
    for (float &v : ctx)
      v = g(rng);
    for (int h = s.hb; h < s.he; ++h)
      heads.push_back(h);
  }
  int nh() const { return int(heads.size()); }
  glm::plan::KeyValues projArgs(const char *w) const {
    return {{"w", w},
            {"dt", kvb.dtName()},
            {"sk", kvb.skName()},
            {"threads", "128"}};
  }
  const void *scale() const { return kvb.s.empty() ? nullptr : kvb.s.data(); }
  /// mla_proj over q (w = kn) or ctx (w = nk) into y.
  Launch proj(const glm::plan::KeyValues &t, bool headOut,
              std::vector<float> &y) const {
    const int N = headOut ? s.dv : s.kvr, K = headOut ? s.kvr : s.dn;
    const int yHead = headOut ? s.dv : s.kvr;
    y.assign(size_t(s.R) * s.H * yHead, -3.0f);
    const float *x = headOut ? ctx.data() : q.data();
    const int xHead = headOut ? s.kvr : s.dn + s.dr;
    return launch("mla_proj", t, unsigned(nh() * ((N + 63) / 64)),
                  unsigned((s.R + 63) / 64), 128,
                  {P(x), I(s.H * xHead), I(xHead), P(kvb.w.data()), I(kvb.dt),
                   P(scale()), I(kvb.sk), I(s.dn + s.dv),
                   I(headOut ? s.dn : 0), I(s.kvr), P(heads.data()),
                   P(y.data()), I(s.H * yHead), I(yHead), I(s.R), I(K),
                   I(N)});
  }
};

class MlaProjTwin : public ::testing::TestWithParam<ProjShape> {};

double relErr(const std::vector<float> &got, const std::vector<float> &want) {
  double worst = 0, peak = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    peak = std::max(peak, double(std::fabs(want[i])));
  }
  return peak > 0 ? worst / peak : worst;
}

TEST_P(MlaProjTwin, MatchesMlaQabsAndMlaOut) {
  const ProjProblem pr(GetParam());
  const ProjShape &s = pr.s;
  // q_abs: mla_qabs (64 threads, 32 columns a block) vs mla_proj kn.
  std::vector<float> want(size_t(s.R) * s.H * s.kvr, -3.0f), got;
  const glm::plan::KeyValues t64 = {{"threads", "64"}}, t256 = {{"threads",
                                                                  "256"}};
  runTwin(launch("mla_qabs", t64, unsigned(pr.nh() * ((s.kvr + 31) / 32)),
                 unsigned(s.R), 64,
                 {P(pr.q.data()), P(pr.kvb.w.data()), I(pr.kvb.dt),
                  P(pr.scale()), I(pr.kvb.sk), P(pr.heads.data()),
                  P(want.data()), I(s.H), I(s.dn), I(s.dr), I(s.dv),
                  I(s.kvr)}));
  const glm::plan::KeyValues tk = pr.projArgs("kn");
  runTwin(pr.proj(tk, false, got));
  const double eq = relErr(got, want);
  // mla_out (256 threads: 32 outputs a block) vs mla_proj nk.
  std::vector<float> wantO(size_t(s.R) * s.H * s.dv, -3.0f), gotO;
  runTwin(launch("mla_out", t256, unsigned(pr.nh() * ((s.dv + 31) / 32)),
                 unsigned(s.R), 256,
                 {P(pr.kvb.w.data()), I(pr.kvb.dt), P(pr.scale()),
                  I(pr.kvb.sk), P(pr.ctx.data()), P(pr.heads.data()),
                  P(wantO.data()), I(s.H), I(s.dn), I(s.dv), I(s.kvr)}));
  const glm::plan::KeyValues tn = pr.projArgs("nk");
  runTwin(pr.proj(tn, true, gotO));
  const double eo = relErr(gotO, wantO);
  std::printf("[ mla_proj ] %-20s q_abs %.3g, head outputs %.3g\n",
              s.name.c_str(), eq, eo);
  EXPECT_LT(eq, 2e-6) << s.name;
  EXPECT_LT(eo, 2e-6) << s.name;
  // Heads outside the table keep their rows (both compared above cover
  // them: the -3 sentinels must agree, so check one directly).
  if (s.hb > 0)
    EXPECT_EQ(got[0], -3.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, MlaProjTwin,
    ::testing::Values(
        ProjShape{"glm53_block", 64, 8, 24, 192, 64, 256, 512, 130, "block"},
        ProjShape{"glm53_mx", 64, 0, 16, 192, 64, 256, 512, 37, "mx"},
        ProjShape{"glm53_row", 64, 48, 64, 192, 64, 256, 512, 64, "row"},
        ProjShape{"glm53_bf16", 64, 20, 28, 192, 64, 256, 512, 65, "bf16"},
        ProjShape{"tiny_f32", 4, 0, 4, 16, 8, 16, 32, 9, "f32"},
        ProjShape{"tiny_b_bf16", 6, 0, 6, 16, 16, 16, 48, 16, "bf16"}),
    [](const auto &i) { return i.param.name; });

TEST(MlaProjFootprint, RefusesWhatTheKernelMisreads) {
  const ProjProblem pr(
      ProjShape{"fp", 64, 0, 64, 192, 64, 256, 512, 100, "block"});
  const glm::plan::KeyValues tk = pr.projArgs("kn"), tn = pr.projArgs("nk");
  std::vector<float> y;
  auto refused = [&](const glm::plan::KeyValues &t, bool out,
                     auto &&edit) -> int {
    Launch l = pr.proj(t, out, y);
    edit(l);
    try {
      twins::footprintOf(*twins::findFootprint(l.family), l);
    } catch (const twins::BadLaunchArg &b) {
      return int(b.arg);
    }
    return -1;
  };
  EXPECT_EQ(refused(tk, false, [](Launch &) {}), -1);
  EXPECT_EQ(refused(tn, true, [](Launch &) {}), -1);
  const twins::Footprint f =
      twins::footprintOf(*twins::findFootprint("mla_proj"), pr.proj(tn, true, y));
  EXPECT_EQ(f.bytes[0], uint64_t(100) * 64 * 512 * 4);        // ctx rows
  EXPECT_EQ(f.bytes[3], uint64_t(64) * (192 + 256) * 512);    // kv_b
  EXPECT_EQ(f.bytes[11], uint64_t(100) * 64 * 256 * 4);       // outputs
  EXPECT_EQ(refused(tk, false, [](Launch &l) { l.args[4].i = 2; }), 4);
  EXPECT_EQ(refused(tk, false, [](Launch &l) { l.args[6].i = 3; }), 6);
  EXPECT_EQ(refused(tk, false, [](Launch &l) { l.grid[1] = 1; }), 14);
  EXPECT_EQ(refused(tk, false, [](Launch &l) { l.args[15].i = 190; }), 15);
  EXPECT_EQ(refused(tn, true, [](Launch &l) { l.args[8].i = 200; }), 8);
  EXPECT_EQ(refused(tk, false, [](Launch &l) { l.block[0] = 256; }), 14);
}

} // namespace
