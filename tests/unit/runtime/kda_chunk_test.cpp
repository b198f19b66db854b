//===- kda_chunk_test.cpp - the KDA prefill twins against the recurrence --===//
//
// kda_prep then kda_chunk (runtime/twins/twin_flash.cpp), each driven
// through a Launch in its family's ABI, over prompts of T tokens of one
// sequence, against the fp64 reference of GLM-5.3-Flash run token by token
// (runtime/cpu/flash_ops.h: conv step, forget gate, l2 norms and the
// recurrent delta-rule step, then the gated RMS norm): every token's output
// row, the final recurrent and conv states, T not a multiple of the chunk,
// T = 1, several heads of a larger head set, prompts continuing a sequence
// (nonzero states), and kda_decode continuing after the prefill.
// Tolerances, max|twin − ref| / max|ref| per token row and per head state:
// kda_prep's outputs 1e-5 (fp32, decode's arithmetic); kda_chunk with
// mma = tf32x3 2e-5 (near-fp32 products, fp32 elsewhere: this is the
// proof that the chunked WY form with its mid-chunk reference equals the
// recurrence); with mma = tf32 1e-2 (measured <= 3.2e-3; each MMA operand keeps
// 11 significant bits, relative error 2^-12 per operand, summed over dk = 128
// products and carried through the triangular solve and the state).
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/templates/flash_math.cuh"
#include "runtime/cpu/flash_ops.h"
#include "runtime/cpu/ops.h"

#include "twin_test_util.h"

#include <algorithm>
#include <limits>

namespace {

using namespace glm::twintest;
namespace cpu = glm::rt::cpu;
using KV = glm::plan::KeyValues;

Arg F(double v) {
  Arg a;
  a.f = v;
  return a;
}

void run(const std::string &family, const KV &targs, unsigned gx, unsigned gy,
         unsigned bx, std::vector<Arg> args, unsigned smem = 0) {
  ASSERT_EQ(args.size(), glm::codegen::familyInfo(family).kernelParams.size())
      << family;
  runTwin(launch(family, targs, gx, gy, bx, std::move(args), smem));
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct ChunkCase {
  int H, h0, n, dk, dv, K, chunk;
  const char *mma;
  int threads, wdt;
  float lower, aLogMean;
  std::vector<int> prompts; // consecutive prefills of one sequence
  double tol;
};

class KdaChunkTwin : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(KdaChunkTwin, PrefillMatchesTheRecurrenceTokenByToken) {
  const ChunkCase c = GetParam();
  const int H = c.H, h0 = c.h0, n = c.n, dk = c.dk, dv = c.dv, K = c.K;
  const int K1 = K - 1, slots = 3, slot = 1;
  const double eps = 1e-5;
  std::mt19937 rng(dk * 1000 + dv * 10 + c.chunk + K);
  auto weight = [&](size_t count, float sd, float mean = 0.0f) {
    std::vector<float> v = randn(rng, count, sd);
    for (float &x : v)
      x = roundTo(c.wdt, x + mean);
    return v;
  };
  const std::vector<float> convQ = weight((size_t)H * dk * K, 0.5f),
                           convK = weight((size_t)H * dk * K, 0.5f),
                           convV = weight((size_t)H * dv * K, 0.5f),
                           aLog = weight(H, 0.5f, c.aLogMean),
                           dtBias = weight((size_t)H * dk, 0.5f),
                           oNorm = weight(dv, 0.2f, 1.0f);
  auto stored = [&](const std::vector<float> &v) { return storeAs(c.wdt, v); };
  const std::vector<uint8_t> sQ = stored(convQ), sK = stored(convK),
                             sV = stored(convV), sA = stored(aLog),
                             sD = stored(dtBias), sN = stored(oNorm);
  // The fused projection row [q | k | v | f | gate], stride ins.
  const int oq = 0, ok = n * dk, ov = 2 * n * dk, of = ov + n * dv,
            og = of + n * dk, ins = og + n * dv + 3, bs = n + 1;
  std::vector<float> convState((size_t)slots * n * (2 * dk + dv) * K1, kNaN),
      state((size_t)slots * n * dk * dv, kNaN);
  std::vector<std::vector<double>> Sref(n,
                                        std::vector<double>((size_t)dk * dv));
  std::vector<std::vector<float>> cref(
      n, std::vector<float>((size_t)(2 * dk + dv) * std::max(K1, 1), 0.0f));
  const std::vector<int> seq = {slot};
  const KV prepArgs = {{"threads", "256"}};
  const KV chunkArgs = {{"chunk", std::to_string(c.chunk)},
                        {"mma", c.mma},
                        {"threads", std::to_string(c.threads)}};
  const unsigned smem =
      4u * (unsigned)glm::fm::kdaChunkSmemFloats(c.chunk, dk, dv);
  const std::string tag = "dk" + std::to_string(dk) + " dv" +
                          std::to_string(dv) + " K" + std::to_string(K) + " c" +
                          std::to_string(c.chunk) + " " + c.mma;

  // One token of the reference (the kda_decode test's): conv, gate, norms,
  // the recurrent step and the gated norm. Fills the prep values too.
  struct Prep {
    std::vector<double> q, k, v, g;
    double beta;
  };
  auto refToken = [&](const float *row, const float *bRow, int hl,
                      double *outRow, Prep &p) {
    const int h = h0 + hl;
    p.q.assign(dk, 0), p.k.assign(dk, 0), p.v.assign(dv, 0), p.g.assign(dk, 0);
    float *cs = cref[hl].data();
    for (int a = 0; a < dk; ++a) {
      p.q[a] =
          cpu::causalConvStep(convQ.data() + ((size_t)h * dk + a) * K,
                              cs + (size_t)a * K1, K, row[oq + hl * dk + a]);
      p.k[a] = cpu::causalConvStep(convK.data() + ((size_t)h * dk + a) * K,
                                   cs + (size_t)(dk + a) * K1, K,
                                   row[ok + hl * dk + a]);
      p.g[a] = cpu::kdaForgetGate((double)row[of + hl * dk + a] +
                                      dtBias[(size_t)h * dk + a],
                                  aLog[h], c.lower != 0.0f, c.lower);
    }
    for (int j = 0; j < dv; ++j)
      p.v[j] = cpu::causalConvStep(convV.data() + ((size_t)h * dv + j) * K,
                                   cs + (size_t)(2 * dk + j) * K1, K,
                                   row[ov + hl * dv + j]);
    cpu::kdaL2Norm(p.q.data(), dk);
    cpu::kdaL2Norm(p.k.data(), dk);
    for (double &x : p.q)
      x /= std::sqrt((double)dk);
    p.beta = cpu::sigmoid(bRow[hl]);
    std::vector<double> o(dv);
    cpu::kdaRecurrentStep(Sref[hl], p.q.data(), p.k.data(), p.v.data(),
                          p.g.data(), p.beta, dk, dv, o.data());
    double ss = 0;
    for (double x : o)
      ss += x * x;
    const double inv = 1.0 / std::sqrt(ss / dv + eps);
    for (int j = 0; j < dv; ++j)
      outRow[j] = oNorm[j] * (o[j] * inv) * cpu::sigmoid(row[og + hl * dv + j]);
  };

  int done = 0; // tokens of the sequence so far
  for (int T : c.prompts) {
    const std::string seg =
        tag + " T" + std::to_string(T) + " at " + std::to_string(done);
    const std::vector<float> in = randn(rng, (size_t)T * ins),
                             bRaw = randn(rng, (size_t)T * bs);
    const std::vector<int> pos = {done};
    std::vector<float> qo((size_t)T * n * dk, kNaN), ko(qo.size(), kNaN),
        go(qo.size(), kNaN), vo((size_t)T * n * dv, kNaN),
        betaO((size_t)T * n, kNaN), out((size_t)T * n * dv, kNaN);
    run("kda_prep", prepArgs, n, (T + 7) / 8, 256,
        {P(in.data() + oq),
         P(in.data() + ok),
         P(in.data() + ov),
         P(in.data() + of),
         I(ins),
         P(bRaw.data()),
         I(bs),
         P(sQ.data()),
         P(sK.data()),
         P(sV.data()),
         P(sA.data()),
         P(sD.data()),
         I(c.wdt),
         P(convState.data()),
         P(seq.data()),
         P(pos.data()),
         P(qo.data()),
         P(ko.data()),
         P(vo.data()),
         P(go.data()),
         P(betaO.data()),
         I(T),
         I(h0),
         I(dk),
         I(dv),
         I(K),
         F(c.lower)});
    run("kda_chunk", chunkArgs, n, 1, c.threads,
        {P(qo.data()), P(ko.data()), P(vo.data()), P(go.data()),
         P(betaO.data()), P(in.data() + og), I(ins), P(sN.data()), I(c.wdt),
         P(state.data()), P(seq.data()), P(pos.data()), P(out.data()), I(T),
         I(dk), I(dv), F(eps), I(int64_t(n) * dv)},
        smem);
    double prepErr = 0, worst = 0;
    int worstTok = -1;
    for (int t = 0; t < T; ++t) {
      std::vector<double> want((size_t)n * dv), pq, pk, pv, pg, pb;
      for (int hl = 0; hl < n; ++hl) {
        Prep p;
        refToken(in.data() + (size_t)t * ins, bRaw.data() + (size_t)t * bs, hl,
                 want.data() + (size_t)hl * dv, p);
        pq.insert(pq.end(), p.q.begin(), p.q.end());
        pk.insert(pk.end(), p.k.begin(), p.k.end());
        pv.insert(pv.end(), p.v.begin(), p.v.end());
        pb.push_back(p.beta);
        // The gate as the kernel holds it: fp32 of the fp64 log-decay.
        pg.insert(pg.end(), p.g.begin(), p.g.end());
      }
      const size_t rk = (size_t)t * n * dk, rv = (size_t)t * n * dv;
      prepErr = std::max({prepErr, relErr(qo.data() + rk, pq.data(), pq.size()),
                          relErr(ko.data() + rk, pk.data(), pk.size()),
                          relErr(vo.data() + rv, pv.data(), pv.size()),
                          relErr(go.data() + rk, pg.data(), pg.size()),
                          relErr(betaO.data() + (size_t)t * n, pb.data(), n)});
      const double e = relErr(out.data() + rv, want.data(), want.size());
      if (!(e <= worst)) // NaN counts as worst
        worst = e, worstTok = t;
    }
    std::printf("[twin] %-56s rel=%.3g tol=%.3g\n",
                ("kda_prep q k v g beta " + seg + " worst token").c_str(),
                prepErr, 1e-5);
    EXPECT_LE(prepErr, 1e-5) << seg;
    std::printf("[twin] %-56s rel=%.3g tol=%.3g (token %d)\n",
                ("kda_chunk out " + seg + " worst token").c_str(), worst, c.tol,
                worstTok);
    EXPECT_LE(worst, c.tol) << seg << " token " << worstTok;
    for (int hl = 0; hl < n; ++hl) {
      const float *S = state.data() + ((size_t)slot * n + hl) * dk * dv;
      expectRel("kda_chunk state " + seg + " head " + std::to_string(hl), S,
                Sref[hl].data(), (size_t)dk * dv, c.tol);
      // The conv state holds raw inputs: the reference's, to the bit.
      const float *cs =
          convState.data() + (size_t)slot * n * (2 * dk + dv) * K1;
      for (int ch = 0; ch < 2 * dk + dv && K1 > 0; ++ch) {
        const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2, a = ch - x * dk;
        const int width = x == 2 ? dv : dk;
        for (int j = 0; j < K1; ++j)
          ASSERT_EQ(cs[((size_t)x * n * dk + (size_t)hl * width + a) * K1 + j],
                    cref[hl][(size_t)ch * K1 + j])
              << seg << " conv state head " << hl << " channel " << ch;
      }
    }
    done += T;
  }
  // Slots 0 and 2 belong to no sequence: untouched.
  for (int sl : {0, 2})
    for (size_t i = 0; i < (size_t)n * dk * dv; ++i)
      ASSERT_TRUE(std::isnan(state[(size_t)sl * n * dk * dv + i]));

  // kda_decode continues from the prefill's states.
  const KV decArgs = {{"rows", "128"}, {"threads", "128"}};
  for (int t = 0; t < 2 && dk <= 128 && dv <= 128; ++t) {
    const std::vector<float> in = randn(rng, (size_t)ins),
                             bRaw = randn(rng, (size_t)bs);
    const std::vector<int> pos = {done};
    std::vector<float> out((size_t)n * dv, kNaN);
    run("kda_decode", decArgs, n, 1, 128,
        {P(in.data() + oq),
         P(in.data() + ok),
         P(in.data() + ov),
         P(in.data() + of),
         P(in.data() + og),
         I(ins),
         P(bRaw.data()),
         I(bs),
         P(sQ.data()),
         P(sK.data()),
         P(sV.data()),
         P(sA.data()),
         P(sD.data()),
         P(sN.data()),
         I(c.wdt),
         P(convState.data()),
         P(state.data()),
         P(seq.data()),
         P(pos.data()),
         P(out.data()),
         I(h0),
         I(dk),
         I(dv),
         I(K),
         F(c.lower),
         F(eps)});
    std::vector<double> want((size_t)n * dv);
    for (int hl = 0; hl < n; ++hl) {
      Prep p;
      refToken(in.data(), bRaw.data(), hl, want.data() + (size_t)hl * dv, p);
    }
    expectRel("kda_decode after prefill " + tag + " token " +
                  std::to_string(done),
              out.data(), want.data(), want.size(), c.tol);
    ++done;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, KdaChunkTwin,
    ::testing::Values(
        // Full-size heads, 3xTF32: 70 = 2·32 + 6, then a continuation.
        ChunkCase{3,
                  1,
                  2,
                  128,
                  128,
                  4,
                  32,
                  "tf32x3",
                  256,
                  0,
                  -5.0f,
                  1.0f,
                  {70, 33},
                  2e-5},
        ChunkCase{2,
                  0,
                  2,
                  128,
                  128,
                  4,
                  16,
                  "tf32x3",
                  256,
                  2,
                  -5.0f,
                  1.0f,
                  {37, 16},
                  2e-5},
        // Plain tf32 operands.
        ChunkCase{3,
                  1,
                  2,
                  128,
                  128,
                  4,
                  32,
                  "tf32",
                  256,
                  0,
                  -5.0f,
                  1.0f,
                  {70, 33},
                  1e-2},
        ChunkCase{
            2, 0, 2, 128, 128, 4, 16, "tf32", 256, 2, -5.0f, 1.0f, {37}, 1e-2},
        // A longer prompt: ten chunks of 32 then a tail, errors do not grow.
        ChunkCase{1,
                  0,
                  1,
                  128,
                  128,
                  4,
                  32,
                  "tf32x3",
                  256,
                  0,
                  -5.0f,
                  1.0f,
                  {333},
                  2e-5},
        // Tiny heads: T = 1 twice, then 17; and no conv state (K = 1).
        ChunkCase{3,
                  0,
                  3,
                  16,
                  32,
                  4,
                  16,
                  "tf32x3",
                  128,
                  2,
                  -5.0f,
                  1.0f,
                  {1, 1, 17},
                  2e-5},
        ChunkCase{2,
                  1,
                  1,
                  128,
                  64,
                  1,
                  16,
                  "tf32x3",
                  128,
                  0,
                  -5.0f,
                  1.0f,
                  {16, 48},
                  2e-5},
        // dk 24, K 3, the softplus gate (no lower bound; small rates, since
        // kda_chunk needs g > −5 per token), f16 weights.
        ChunkCase{2,
                  0,
                  2,
                  24,
                  16,
                  3,
                  32,
                  "tf32x3",
                  128,
                  1,
                  0.0f,
                  -1.5f,
                  {5, 50},
                  2e-5}),
    [](const auto &i) {
      const ChunkCase &c = i.param;
      std::string T;
      for (int t : c.prompts)
        T += "_" + std::to_string(t);
      return "dk" + std::to_string(c.dk) + "_dv" + std::to_string(c.dv) + "_K" +
             std::to_string(c.K) + "_c" + std::to_string(c.chunk) + "_" +
             c.mma + "_t" + std::to_string(c.threads) + "_wdt" +
             std::to_string(c.wdt) + (c.lower == 0.0f ? "_softplus" : "") +
             "_T" + T;
    });

// The chunk's mid reference keeps every factor finite at the strongest
// decay the gate allows (g → −5 on every channel of every token), where a
// chunk-start reference would overflow e^{+Γ} past C = 17.
TEST(KdaChunkTwin, StrongestDecayStaysFinite) {
  const int n = 1, dk = 32, dv = 32, C = 32, T = 64, slot = 0;
  std::mt19937 rng(7);
  auto unit = [&](size_t rows, int d) {
    std::vector<float> v = randn(rng, rows * d);
    for (size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < d; ++i)
        ss += (double)v[r * d + i] * v[r * d + i];
      for (int i = 0; i < d; ++i)
        v[r * d + i] = float(v[r * d + i] / std::sqrt(ss));
    }
    return v;
  };
  std::vector<float> q = unit(T, dk), k = unit(T, dk), v = randn(rng, T * dv),
                     g(T * dk, -4.999f), beta(T, 0.7f), gate(T * dv, 1.0f),
                     oNorm(dv, 1.0f), state(dk * dv), out(T * dv, kNaN);
  for (float &x : q)
    x /= std::sqrt((float)dk);
  std::vector<float> S0 = randn(rng, dk * dv);
  state = S0;
  const std::vector<int> seq = {slot}, pos = {5};
  const KV targs = {{"chunk", "32"}, {"mma", "tf32x3"}, {"threads", "128"}};
  run("kda_chunk", targs, n, 1, 128,
      {P(q.data()), P(k.data()), P(v.data()), P(g.data()), P(beta.data()),
       P(gate.data()), I(dv), P(oNorm.data()), I(0), P(state.data()),
       P(seq.data()), P(pos.data()), P(out.data()), I(T), I(dk), I(dv),
       F(1e-5), I(int64_t(n) * dv)},
      4u * (unsigned)glm::fm::kdaChunkSmemFloats(C, dk, dv));
  std::vector<double> S(S0.begin(), S0.end()), o(dv), want(T * dv);
  for (int t = 0; t < T; ++t) {
    std::vector<double> qd(q.begin() + t * dk, q.begin() + (t + 1) * dk),
        kd(k.begin() + t * dk, k.begin() + (t + 1) * dk),
        vd(v.begin() + t * dv, v.begin() + (t + 1) * dv),
        gd(g.begin() + t * dk, g.begin() + (t + 1) * dk);
    cpu::kdaRecurrentStep(S, qd.data(), kd.data(), vd.data(), gd.data(), 0.7,
                          dk, dv, o.data());
    double ss = 0;
    for (double x : o)
      ss += x * x;
    for (int j = 0; j < dv; ++j)
      want[t * dv + j] = o[j] / std::sqrt(ss / dv + 1e-5) * cpu::sigmoid(1.0);
  }
  expectRel("kda_chunk out at g = -5", out.data(), want.data(), want.size(),
            2e-5);
  expectRel("kda_chunk state at g = -5", state.data(), S.data(), S.size(),
            2e-5);
}

} // namespace

namespace {

// vsplit 2 (two blocks a head, each half of the v columns) then kda_gnorm
// in place: the same bits as vsplit 1, outputs and state (the columns of
// S, δ and O are independent; the norm is step 5 itself).
TEST(KdaChunkTwin, VsplitThenGnormIsVsplitOne) {
  const int n = 3, dk = 64, dv = 64, T = 45, slot = 1;
  std::mt19937 rng(11);
  std::vector<float> q = randn(rng, T * n * dk, 0.1f),
                     k = randn(rng, T * n * dk, 0.1f),
                     v = randn(rng, T * n * dv), g(T * n * dk), beta(T * n),
                     gate = randn(rng, T * (n * dv + 5)),
                     oNorm = randn(rng, dv, 0.2f),
                     state0 = randn(rng, 2 * n * dk * dv, 0.3f);
  std::uniform_real_distribution<float> gd(-4.9f, -0.01f), bd(0.05f, 0.95f);
  for (float &x : g)
    x = gd(rng);
  for (float &x : beta)
    x = bd(rng);
  const std::vector<int> seq = {slot}, pos = {7};
  const int gs = n * dv + 5;
  for (const char *mma : {"tf32", "tf32x3"}) {
    std::vector<float> state1 = state0, state2 = state0, out1(T * n * dv, kNaN),
                       out2(T * n * dv, kNaN);
    auto chunk = [&](int V, int threads, std::vector<float> &st,
                     std::vector<float> &out) {
      const KV targs = {{"chunk", "16"},
                        {"mma", mma},
                        {"vsplit", std::to_string(V)},
                        {"threads", std::to_string(threads)}};
      run("kda_chunk", targs, n, V, threads,
          {P(q.data()), P(k.data()), P(v.data()), P(g.data()), P(beta.data()),
           P(gate.data()), I(gs), P(oNorm.data()), I(0), P(st.data()),
           P(seq.data()), P(pos.data()), P(out.data()), I(T), I(dk), I(dv),
           F(1e-5), I(int64_t(n) * dv)},
          4u * (unsigned)glm::fm::kdaChunkSmemFloats(16, dk, dv / V));
    };
    chunk(1, 256, state1, out1);
    chunk(2, 128, state2, out2);
    run("kda_gnorm", {{"threads", "128"}}, (n + 3) / 4, T, 128,
        {P(out2.data()), P(gate.data()), I(gs), P(oNorm.data()), I(0),
         P(out2.data()), I(n), I(dv), F(1e-5)});
    EXPECT_EQ(0, std::memcmp(out1.data(), out2.data(), out1.size() * 4)) << mma;
    EXPECT_EQ(0, std::memcmp(state1.data(), state2.data(), state1.size() * 4))
        << mma;
    for (size_t i = 0; i < n * dk * dv; ++i) // slot 0 untouched
      ASSERT_EQ(state1[i], state0[i]);
  }
}

} // namespace
