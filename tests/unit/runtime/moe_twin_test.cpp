//===- moe_twin_test.cpp - twins of the MoE trellis families --------------===//
//
// moe_trellis (stages gu + down, full grid and persistent path),
// expert_gemv_trellis + moe_reduce (+ hadamard128 for signs.out) against a
// float64 evaluation of the routed + shared expert layer with Q from the
// trellis codec (trellis::decodeMatrix): exlr8 and EXL3 layouts, mixed
// widths, side vectors in f32/f16/bf16, rows sharing experts, a repeated
// expert and an empty slot in a row, halves not owned by the rank. Also the
// properties the GPU tests hold CUDA to: the persistent path equals the full
// grid, accumulate adds exactly, empty routing.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/moe_trellis_abi.h"
#include "twin_test_util.h"

#include <algorithm>
#include <numeric>

using namespace glm::twintest;
namespace trellis = glm::rt::trellis;
using glm::codegen::MoeTrellisDims;

namespace {

struct MoeSetup {
  std::string name;
  bool exl3 = false;
  int cb = 1;
  bool e4m3 = true;
  int sv = 0;
  std::string widths = "234";
  int H = 256, E = 6, nS = 1, topk = 2, batch = 3, batchT = 8;
  double owned = 1.0;
  bool repeats = false; // row 0 repeats an expert and has an empty slot
  bool signs = true;    // exlr8: H * signs.out in the kernel
  double limit = 0;     // SwiGLU clamp (GLM-5.3-Flash); 0 = none
};

double siluD(double x) { return x / (1.0 + std::exp(-x)); }

/// Weights, routing, inputs and the float64 reference of one MoE layer.
struct MoeProblem {
  MoeSetup s;
  int inter = 2048, eTot = 0, nBlk = 0, nSlot = 0;
  std::vector<uint8_t> blob, widths;
  std::vector<int64_t> off, tensorOff;
  std::vector<const unsigned char *> tiles;
  std::vector<int> ids;
  std::vector<float> rw, guSvh, dSuh, guSu, dSvB, dSvh, signsOut, xh;
  std::vector<uint8_t> guSvhB, dSuhB, guSuB, dSvBB, dSvhB;
  int xhRow = 0, xhSlot = 0, xhProj = 0;
  std::vector<double> ref;
  int64_t clamped = 0; // gate/up values the reference's clamp changed
  mutable std::vector<float> cache[3]; // EXL3: last decoded tensor per p
  mutable int cacheKey[3] = {-1, -1, -1};

  int slotExpert(int b, int k) const {
    return k < s.topk ? ids[b * s.topk + k] : s.E + (k - s.topk);
  }
  /// The slot's expert counts (valid id, first slot of it in the row).
  bool slotCounts(int b, int k) const {
    if (k >= s.topk)
      return true;
    const int id = ids[b * s.topk + k];
    if (id < 0 || id >= s.E)
      return false;
    for (int k2 = 0; k2 < k; ++k2)
      if (ids[b * s.topk + k2] == id)
        return false;
    return true;
  }
  std::vector<float> half(int e, int p, int h) const {
    const int k = widths[(e * 3 + p) * 16 + h];
    const auto cb = static_cast<trellis::Codebook>(s.cb);
    if (!s.exl3)
      return p < 2 ? decoded(&blob[off[(e * 3 + p) * 16 + h]], s.H, 128, k, cb,
                             s.e4m3, trellis::TileOrder::RowMajor)
                   : decoded(&blob[off[(e * 3 + p) * 16 + h]], 128, s.H, k, cb,
                             s.e4m3, trellis::TileOrder::InMajor128);
    const int64_t rows = p < 2 ? s.H : inter, cols = p < 2 ? inter : s.H;
    if (cacheKey[p] != e) { // EXL3: decode the whole tensor once
      cache[p] = decoded(&blob[tensorOff[e * 3 + p]], rows, cols, k, cb, s.e4m3,
                         trellis::TileOrder::RowMajor);
      cacheKey[p] = e;
    }
    const std::vector<float> &full = cache[p];
    std::vector<float> q(size_t(s.H) * 128);
    if (p < 2)
      for (int i = 0; i < s.H; ++i)
        std::copy_n(&full[size_t(i) * inter + 128 * h], 128,
                    &q[size_t(i) * 128]);
    else
      std::copy_n(&full[size_t(128 * h) * s.H], size_t(128) * s.H, q.data());
    return q;
  }

  explicit MoeProblem(const MoeSetup &setup) : s(setup) {
    std::mt19937 rng(std::hash<std::string>()(s.name) & 0xFFFFFFF);
    const int H = s.H, E = s.E, B = s.batch, topk = s.topk;
    eTot = E + s.nS, nBlk = H / 128, nSlot = topk + s.nS;
    std::uniform_real_distribution<float> uni(0.5f, 1.5f);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    // Routing: rows draw from a small pool so that they share experts.
    ids.resize(size_t(B) * topk);
    rw.resize(size_t(B) * topk);
    for (int b = 0; b < B; ++b) {
      std::vector<int> perm(E);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int k = 0; k < topk; ++k) {
        ids[b * topk + k] = perm[k];
        rw[b * topk + k] = std::uniform_real_distribution<float>(0.1f, 1)(rng);
      }
    }
    if (s.repeats && topk >= 3) {
      ids[1] = ids[0]; // a repeat: counts once, at slot 0's weight
      ids[2] = -1;     // an empty slot
    }
    std::vector<char> used(eTot, 0);
    for (int id : ids)
      if (id >= 0)
        used[id] = 1;
    for (int j = 0; j < s.nS; ++j)
      used[E + j] = 1;
    // Widths and tiles.
    std::vector<int> allowed;
    for (char c : s.widths)
      allowed.push_back(c - '0');
    auto pickK = [&] { return allowed[rng() % allowed.size()]; };
    widths.assign(size_t(eTot) * 48, uint8_t(allowed[0]));
    off.assign(size_t(eTot) * 48, -1);
    tensorOff.assign(size_t(eTot) * 3, -1);
    tiles.assign(size_t(eTot) * 48, nullptr);
    std::vector<char> owned(size_t(eTot) * 16, 0);
    for (int e = 0; e < eTot; ++e) {
      if (!used[e])
        continue;
      for (int p = 0; p < 3; ++p) {
        const int perTensor = pickK();
        for (int h = 0; h < 16; ++h)
          widths[(e * 3 + p) * 16 + h] =
              uint8_t(s.exl3 || p == 2 ? perTensor : pickK());
        if (s.exl3) {
          const int k = widths[(e * 3 + p) * 16];
          const int64_t rows = p < 2 ? H : inter, cols = p < 2 ? inter : H;
          const size_t o =
              addWords(blob, rng, size_t(rows / 16) * (cols / 16) * 16 * k);
          tensorOff[e * 3 + p] = int64_t(o);
          for (int h = 0; h < 16; ++h)
            off[(e * 3 + p) * 16 + h] =
                int64_t(o) + (p < 2 ? 8 * h : 8 * h * (H / 16)) * 32 * k;
        } else {
          for (int h = 0; h < 16; ++h)
            off[(e * 3 + p) * 16 + h] = int64_t(addWords(
                blob, rng,
                size_t(H / 16) * 8 * 16 * widths[(e * 3 + p) * 16 + h]));
        }
      }
      for (int h = 0; h < 16; ++h)
        owned[e * 16 + h] = u01(rng) < s.owned;
    }
    for (int e = 0; e < eTot; ++e)
      for (int p = 0; p < 3; ++p)
        for (int h = 0; h < 16; ++h)
          if (owned[e * 16 + h] && off[(e * 3 + p) * 16 + h] >= 0)
            tiles[(e * 3 + p) * 16 + h] = &blob[off[(e * 3 + p) * 16 + h]];

    // Side vectors, as stored.
    auto sgnScale = [&](int dt) {
      return roundTo(dt, uni(rng) * ((rng() & 1) ? -1.0f : 1.0f));
    };
    guSvh.resize(size_t(2) * eTot * inter);
    dSuh.resize(size_t(eTot) * inter);
    for (float &v : guSvh)
      v = sgnScale(s.sv);
    for (float &v : dSuh)
      v = sgnScale(s.sv);
    std::vector<float> x = randn(rng, size_t(B) * H), suh, signsIn(H);
    if (s.exl3) {
      dSvh.resize(size_t(eTot) * H);
      for (float &v : dSvh)
        v = sgnScale(s.sv);
      suh.resize(size_t(2) * eTot * H);
      for (float &v : suh)
        v = sgnScale(1);
    } else {
      guSu.resize(size_t(2) * eTot * nBlk);
      dSvB.resize(size_t(eTot) * nBlk);
      for (float &v : guSu)
        v = roundTo(s.sv, uni(rng));
      for (float &v : dSvB)
        v = roundTo(s.sv, uni(rng));
      for (float &v : signsIn)
        v = (rng() & 1) ? -1.0f : 1.0f;
      signsOut.resize(H);
      for (float &v : signsOut)
        v = (rng() & 1) ? -1.0f : 1.0f;
    }
    guSvhB = storeAs(s.sv, guSvh), dSuhB = storeAs(s.sv, dSuh);
    guSuB = storeAs(s.sv, guSu), dSvBB = storeAs(s.sv, dSvB);
    dSvhB = storeAs(s.sv, dSvh);

    // xh: exlr8 H(x * signs.in) per row; EXL3 H(x * suh) per (row, slot, p).
    if (s.exl3) {
      xhProj = H, xhSlot = 2 * H, xhRow = nSlot * 2 * H;
      xh.assign(size_t(B) * xhRow, 0.0f);
      for (int b = 0; b < B; ++b)
        for (int k = 0; k < nSlot; ++k) {
          const int e = slotExpert(b, k);
          if (e < 0)
            continue;
          for (int p = 0; p < 2; ++p) {
            std::vector<double> t(H);
            for (int i = 0; i < H; ++i)
              t[i] = double(x[size_t(b) * H + i]) *
                     suh[(size_t(p) * eTot + e) * H + i];
            hadamardRef(t.data(), H);
            for (int i = 0; i < H; ++i)
              xh[size_t(b) * xhRow + k * xhSlot + p * xhProj + i] = float(t[i]);
          }
        }
    } else {
      xhRow = H;
      xh.resize(size_t(B) * H);
      for (int b = 0; b < B; ++b) {
        std::vector<double> t(H);
        for (int i = 0; i < H; ++i)
          t[i] = double(x[size_t(b) * H + i]) * signsIn[i];
        hadamardRef(t.data(), H);
        for (int i = 0; i < H; ++i)
          xh[size_t(b) * H + i] = float(t[i]);
      }
    }

    // float64 reference.
    ref.assign(size_t(B) * H, 0.0);
    for (int e = 0; e < eTot; ++e) {
      if (!used[e])
        continue;
      for (int h = 0; h < 16; ++h) {
        if (!owned[e * 16 + h])
          continue;
        const std::vector<float> q[3] = {half(e, 0, h), half(e, 1, h),
                                         half(e, 2, h)};
        for (int b = 0; b < B; ++b)
          for (int k = 0; k < nSlot; ++k) {
            if (slotExpert(b, k) != e || !slotCounts(b, k))
              continue;
            const double w = k < topk ? rw[b * topk + k] : 1.0;
            double gu[2][128];
            for (int p = 0; p < 2; ++p) {
              std::fill_n(gu[p], 128, 0.0);
              for (int i = 0; i < H; ++i) {
                const double xi =
                    s.exl3 ? double(xh[size_t(b) * xhRow + k * xhSlot +
                                       p * xhProj + i])
                           : double(xh[size_t(b) * H + i]) *
                                 guSu[(size_t(p) * eTot + e) * nBlk + i / 128];
                for (int j = 0; j < 128; ++j)
                  gu[p][j] += xi * q[p][size_t(i) * 128 + j];
              }
              hadamardRef(gu[p], 128);
              for (int j = 0; j < 128; ++j)
                gu[p][j] *= guSvh[(size_t(p) * eTot + e) * inter + 128 * h + j];
            }
            if (s.limit > 0)
              for (int j = 0; j < 128; ++j) {
                const double g = std::min(gu[0][j], s.limit);
                const double u = std::clamp(gu[1][j], -s.limit, s.limit);
                clamped += (g != gu[0][j]) + (u != gu[1][j]);
                gu[0][j] = g, gu[1][j] = u;
              }
            double a[128];
            for (int j = 0; j < 128; ++j)
              a[j] = siluD(gu[0][j]) * gu[1][j] *
                     dSuh[size_t(e) * inter + 128 * h + j];
            hadamardRef(a, 128);
            std::vector<double> z(H, 0.0);
            for (int r = 0; r < 128; ++r)
              for (int o = 0; o < H; ++o)
                z[o] += a[r] * q[2][size_t(r) * H + o];
            if (s.exl3) {
              hadamardRef(z.data(), H);
              for (int o = 0; o < H; ++o)
                ref[size_t(b) * H + o] += z[o] * dSvh[size_t(e) * H + o] * w;
            } else {
              for (int o = 0; o < H; ++o)
                ref[size_t(b) * H + o] +=
                    z[o] * dSvB[size_t(e) * nBlk + o / 128] * w;
            }
          }
      }
    }
    if (!s.exl3 && s.signs)
      for (int b = 0; b < B; ++b) {
        hadamardRef(&ref[size_t(b) * H], H);
        for (int o = 0; o < H; ++o)
          ref[size_t(b) * H + o] *= signsOut[o];
      }
  }

  const void *nz(const std::vector<uint8_t> &v, bool use) const {
    return use ? v.data() : nullptr;
  }

  /// Both moe_trellis stages through the twin; out starts as `out`.
  /// persistStage -1: the *_persist stages exactly when persist > 0.
  std::vector<float> runMoe(int split, int group, int threads, int persist,
                            int accumulate, std::vector<float> out,
                            int persistStage = -1) const {
    const bool pst = persistStage < 0 ? persist > 0 : persistStage != 0;
    MoeTrellisDims d;
    d.batch = s.batch, d.topk = s.topk, d.nRouted = s.E, d.nShared = s.nS;
    d.hidden = s.H, d.guSplit = split, d.downGroup = group;
    d.threads = threads, d.persistBlocks = persist;
    EXPECT_TRUE(d.valid()) << s.name;
    std::vector<float> scratch(d.scratchFloats(), NAN);
    std::vector<int> counters(d.counterInts(), 0);
    out.resize(size_t(s.batch) * s.H, NAN);
    const int guSI = s.exl3 ? inter / 16 : 8, guSI8 = s.exl3 ? inter / 2 : 64;
    const int dSI = s.exl3 ? s.H / 16 : 8, dSJ8 = s.exl3 ? 8 : 64;
    for (int st = 0; st < 2; ++st) {
      const glm::plan::KeyValues targs = {
          {"widths", s.widths},
          {"codebook", s.cb == 0   ? "3inst"
                       : s.cb == 1 ? "mcg"
                                   : "mul1"},
          {"e4m3", s.e4m3 ? "1" : "0"},
          {"batch", std::to_string(s.batchT)},
          {"sv", dtName(s.sv)},
          {"stage",
           std::string(st == 0 ? "gu" : "down") + (pst ? "_persist" : "")},
          {"pipe", "2"},
          {"minblocks", "0"},
          {"threads", std::to_string(threads)}};
      runTwin(launch(
          "moe_trellis", targs, st == 0 ? d.gridGateUp() : d.gridDown(), 1,
          unsigned(threads),
          {P(xh.data()),
           P(ids.data()),
           P(rw.data()),
           P(tiles.data()),
           P(widths.data()),
           P(guSvhB.data()),
           P(nz(guSuB, !s.exl3)),
           P(dSuhB.data()),
           P(nz(dSvBB, !s.exl3)),
           P(nz(dSvhB, s.exl3)),
           P(!s.exl3 && s.signs ? signsOut.data() : nullptr),
           P(scratch.data()),
           P(counters.data()),
           P(out.data()),
           I(s.batch),
           I(s.topk),
           I(s.E),
           I(s.nS),
           I(s.H),
           I(inter),
           I(xhRow),
           I(xhSlot),
           I(xhProj),
           I(guSI),
           I(guSI8),
           I(dSI),
           I(dSJ8),
           I(split),
           I(group),
           I(accumulate),
           F(s.limit)},
          glm::codegen::moeTrellisDynSmem(s.e4m3, threads, persist > 0)));
    }
    for (int c : counters)
      EXPECT_EQ(c, 0) << "counters stay zero";
    return out;
  }
};

std::vector<MoeSetup> moeSetups() {
  std::vector<MoeSetup> v;
  MoeSetup a;
  a.name = "exlr8_k234_mcg_e4m3_b3_svbf16_tp_repeats";
  a.sv = 2, a.owned = 0.75, a.repeats = true, a.topk = 3;
  v.push_back(a);
  MoeSetup b;
  b.name = "exl3_k3_mul1_b2_svf16";
  b.exl3 = true, b.cb = 2, b.e4m3 = false, b.widths = "3", b.sv = 1;
  b.batch = 2, b.batchT = 4, b.owned = 0.8;
  v.push_back(b);
  MoeSetup c;
  c.name = "exlr8_k15678_3inst_b1_no_shared_no_signs";
  c.cb = 0, c.e4m3 = false, c.widths = "15678", c.batch = 1, c.batchT = 1;
  c.nS = 0, c.signs = false, c.H = 384;
  v.push_back(c);
  // GLM-5.3-Flash's SwiGLU clamp, low enough to bite on many channels.
  MoeSetup d;
  d.name = "exlr8_k234_mcg_e4m3_b3_swiglu_clamp";
  d.limit = 2.0;
  v.push_back(d);
  MoeSetup e = b;
  e.name = "exl3_k3_mul1_b2_svf16_swiglu_clamp";
  e.limit = 2.0;
  v.push_back(e);
  return v;
}

class MoeTrellisTwin : public ::testing::TestWithParam<MoeSetup> {};

TEST_P(MoeTrellisTwin, MatchesFloat64LayerOnEveryPath) {
  const MoeProblem pr(GetParam());
  const size_t n = pr.ref.size();
  // Full grid, split-k 4 and down groups of 2 halves.
  const std::vector<float> full = pr.runMoe(4, 2, 128, 0, 0, {});
  expectRel(pr.s.name + " full grid", full.data(), pr.ref.data(), n, 2e-6);
  // fp16 hi + lo activations and fp32 sums: not float64 bit for bit, but
  // the twin must not be exact by accident of a zero layer either.
  double maxRef = 0;
  for (double r : pr.ref)
    maxRef = std::max(maxRef, std::fabs(r));
  EXPECT_GT(maxRef, 0.0);
  if (pr.s.limit > 0) // the clamp case must clamp
    EXPECT_GT(pr.clamped, 100) << pr.s.name;

  // 256 threads + E4M3: the table instance (needs its dynamic smem).
  const std::vector<float> t256 = pr.runMoe(2, 4, 256, 0, 0, {});
  expectRel(pr.s.name + " t256", t256.data(), pr.ref.data(), n, 2e-6);

  // Persistent path = full grid at down_group 1, up to the sign of zeros.
  const std::vector<float> g1 = pr.runMoe(4, 1, 128, 0, 0, {});
  const std::vector<float> per = pr.runMoe(4, 1, 128, 3, 0, {});
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(per[i], g1[i]) << pr.s.name << " element " << i;

  // accumulate adds the same result exactly.
  const std::vector<float> acc = pr.runMoe(4, 2, 128, 0, 1, full);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(acc[i], full[i] + full[i]) << pr.s.name << " element " << i;
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeTrellisTwin,
                         ::testing::ValuesIn(moeSetups()),
                         [](const auto &info) { return info.param.name; });

TEST(MoeTrellisTwin, EmptyRoutingLeavesOrZeroesOut) {
  MoeSetup s;
  s.name = "empty", s.nS = 0, s.batch = 2, s.E = 4;
  MoeProblem pr(s);
  std::fill(pr.ids.begin(), pr.ids.end(), -1);
  const std::vector<float> init(size_t(2) * 256, 7.0f);
  // Full grid: no unit, no item arrives, out untouched.
  EXPECT_EQ(pr.runMoe(4, 2, 128, 0, 0, init), init);
  // Persistent path: no owned half, out = 0.
  const std::vector<float> z = pr.runMoe(4, 1, 128, 3, 0, init);
  for (float v : z)
    ASSERT_EQ(v, 0.0f);
}

TEST(MoeTrellisTwin, RefusesWhatCudaTraps) {
  MoeSetup s;
  s.name = "traps", s.widths = "2";
  MoeProblem pr(s);
  pr.s.widths = "3"; // the halves are K = 2: not in the kernel's widths
  EXPECT_THROW(pr.runMoe(4, 2, 128, 0, 0, {}), glm::rt::Error);
  pr.s.widths = "2";
  EXPECT_NO_THROW(pr.runMoe(4, 2, 128, 0, 0, {}));
  // A grid below one item per warp on a stage built without the
  // persistent path.
  EXPECT_THROW(pr.runMoe(4, 1, 128, 3, 0, {}, /*persistStage=*/0),
               glm::rt::Error);
}

// ---------------------------------------- expert_gemv_trellis path ----

TEST(ExpertGemvTrellisTwin, WithMoeReduceAndHadamardMatchesFloat64) {
  for (int sv : {0, 1}) {
    MoeSetup s;
    s.name = "expert_gemv_" + std::to_string(sv);
    s.nS = 0, s.sv = sv, s.owned = 0.7, s.batch = 3, s.topk = 2;
    s.limit = sv == 1 ? 2.0 : 0.0; // one case with the SwiGLU clamp
    const MoeProblem pr(s);
    const int H = s.H, B = s.batch, topk = s.topk, E = s.E;
    std::vector<float> partial(size_t(B) * topk * 16 * H, NAN);
    const glm::plan::KeyValues targs = {
        {"widths", s.widths}, {"codebook", "mcg"}, {"e4m3", "1"},
        {"batch", "4"},       {"sv", dtName(sv)},  {"threads", "128"}};
    runTwin(launch("expert_gemv_trellis", targs, 16, unsigned(E), 128,
                   {P(pr.xh.data()),
                    P(pr.ids.data()),
                    P(pr.rw.data()),
                    P(pr.tiles.data()),
                    P(pr.widths.data()),
                    P(pr.guSvhB.data()),
                    P(pr.guSuB.data()),
                    P(pr.dSuhB.data()),
                    P(pr.dSvBB.data()),
                    P(nullptr),
                    P(partial.data()),
                    I(B),
                    I(topk),
                    I(H),
                    I(2048),
                    I(H),
                    I(0),
                    I(0),
                    I(8),
                    I(64),
                    I(8),
                    I(64),
                    F(s.limit)}));
    std::vector<float> out(size_t(B) * H, NAN);
    const glm::plan::KeyValues rargs = {{"threads", "128"}};
    runTwin(launch("moe_reduce", rargs, unsigned((H + 127) / 128), unsigned(B),
                   128,
                   {P(partial.data()), P(pr.ids.data()), P(pr.tiles.data()),
                    P(out.data()), I(B), I(topk), I(H), I(0)}));
    // Bit-exact fixed-order sum.
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < H; o += 37) {
        float r = 0.0f;
        for (int k = 0; k < topk; ++k) {
          const int e = pr.ids[b * topk + k];
          for (int h = 0; h < 16; ++h)
            if (pr.tiles[(e * 3) * 16 + h])
              r += partial[(size_t(b * topk + k) * 16 + h) * H + o];
        }
        ASSERT_EQ(out[size_t(b) * H + o], r);
      }
    std::vector<float> y(out.size(), NAN);
    const glm::plan::KeyValues hargs = {{"vt", "f32"}, {"threads", "128"}};
    runTwin(launch("hadamard128", hargs, unsigned((B * H / 128 + 3) / 4), 1,
                   128,
                   {P(out.data()), P(nullptr), P(pr.signsOut.data()),
                    P(y.data()), I(B), I(H), I(0), I(0)}));
    expectRel(s.name + " vs float64", y.data(), pr.ref.data(), y.size(), 2e-6);
    // The fused kernel's twin gives the same layer.
    const std::vector<float> fused = pr.runMoe(4, 2, 128, 0, 0, {});
    std::vector<double> fusedD(fused.begin(), fused.end());
    expectRel(s.name + " vs moe_trellis twin", y.data(), fusedD.data(),
              y.size(), 2e-6);
  }
}

TEST(CodegenTwins, ParameterListsAreTheFamiliesAbi) {
  // The twins index their arguments in these orders; a template whose
  // PARAMS macro changes must change its twin too.
  const std::map<std::string, std::vector<std::string>> want = {
      {"moe_trellis",
       {"xh",
        "expert_ids",
        "route_w",
        "tiles",
        "widths",
        "gu_svh",
        "gu_su_block",
        "down_suh",
        "down_sv_block",
        "down_svh",
        "signs_out",
        "scratch",
        "counters",
        "out",
        "batch",
        "topk",
        "n_routed",
        "n_shared",
        "hidden",
        "inter",
        "xh_row_stride",
        "xh_slot_stride",
        "xh_proj_stride",
        "gu_sI",
        "gu_sI8",
        "down_sI",
        "down_sJ8",
        "gu_split",
        "down_group",
        "accumulate",
        "swiglu_limit"}},
      {"expert_gemv_trellis",
       {"xh",
        "expert_ids",
        "route_w",
        "tiles",
        "widths",
        "gu_svh",
        "gu_su_block",
        "down_suh",
        "down_sv_block",
        "down_svh",
        "partial",
        "batch",
        "topk",
        "hidden",
        "inter",
        "xh_row_stride",
        "xh_slot_stride",
        "xh_proj_stride",
        "gu_sI",
        "gu_sI8",
        "down_sI",
        "down_sJ8",
        "swiglu_limit"}},
      {"moe_reduce",
       {"partial", "expert_ids", "tiles", "out", "batch", "topk", "hidden",
        "accumulate"}},
      {"dense_trellis",
       {"xh", "tiles", "svh", "scratch", "counters", "y", "batch", "in", "out",
        "y_stride", "out_valid", "sI", "sI8", "sJ8", "split"}},
      {"dense_gemv_trellis",
       {"xh", "tiles", "z", "batch", "in", "out", "sI", "sI8", "sJ8"}},
      {"hadamard128",
       {"x", "pre", "post", "y", "rows", "n", "pre_stride", "post_stride"}},
      {"dense_gemv",
       {"x", "w", "scale", "y", "batch", "in", "out", "out_stride",
        "accumulate"}},
      {"dense_gemv_f32", {"x", "w", "y", "in", "out"}},
      {"gemm_trellis",
       {"xh", "tiles", "z", "m", "in", "out", "x_stride", "z_stride",
        "accumulate", "sI", "sI8", "sJ8"}},
      {"gemm_trellis_grouped",
       {"xh", "row_ids", "items", "z", "n_items", "in", "out", "x_stride",
        "z_stride", "accumulate", "sI", "sI8", "sJ8"}},
      {"embed",
       {"ids", "table", "scale", "out", "batch", "hidden", "row_begin",
        "rows"}},
      {"rms_norm", {"x", "add", "w", "y", "rows", "n", "x_stride", "eps"}},
      {"rope",
       {"x", "positions", "batch", "heads", "row_stride", "head_stride",
        "offset", "theta"}},
      {"router",
       {"logits", "bias", "ids", "weights", "batch", "experts", "scale",
        "renorm"}},
      {"topk",
       {"scores", "len", "sel", "nsel", "batch", "score_stride", "sel_stride",
        "k"}},
      {"argmax",
       {"vals", "idx_in", "out_val", "out_idx", "batch", "n", "in_stride",
        "out_stride", "index_offset"}},
      {"indexer_scores",
       {"q", "w", "keys", "len", "scores", "batch", "score_stride",
        "qk_scale"}},
      {"mla_decode",
       {"q_lat", "q_pe", "cache", "cache_scale", "sel", "nsel", "o_lat",
        "batch", "heads", "max_sel", "softmax_scale"}},
  };
  for (const auto &[family, params] : want) {
    EXPECT_EQ(glm::codegen::familyInfo(family).kernelParams, params) << family;
    EXPECT_NE(glm::rt::twins::findTwin(family), nullptr) << family;
  }
  // Every codegen family has its twin (the CPU backend runs any plan).
  for (const glm::codegen::FamilyInfo &f : glm::codegen::families())
    EXPECT_NE(glm::rt::twins::findTwin(f.family), nullptr) << f.family;
  for (const glm::rt::twins::TwinEntry *e = glm::rt::twins::kCodegenTwins;
       e->family; ++e)
    EXPECT_NO_THROW(glm::codegen::familyInfo(e->family)) << e->family;
}

} // namespace
