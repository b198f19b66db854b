//===- kda_chunk_gpu_test.cpp - the KDA prefill families vs their twins ---===//
//
// kda_prep and kda_chunk, built as a plan builds them (--fmad=false) and
// launched with the grids their templates document, against their C++
// twins (runtime/twins/twin_flash.cpp) on the same inputs, over two
// consecutive prompts of one sequence (the second from the twin's states
// of the first). Tolerances: kda_prep the same bits (kda_decode's
// arithmetic, IEEE-exact operations only) with a gate lower bound, 1e-6
// in the softplus form; kda_chunk, relative to max|twin| over outputs and
// state, 1e-4 with mma = tf32x3 and 2e-3 with mma = tf32. The twin rounds
// the MMA operands as cvt.rna.tf32 does and sums their products in fp64;
// the tensor cores sum in fp32, so the state drifts by fp32 roundings from
// chunk to chunk, and with plain tf32 an operand that drifted across a
// rounding boundary moves by a whole tf32 ulp (2^-11): rare, but 4000
// times the drift. With vsplit > 1, kda_gnorm after it on the twin's
// un-normalised rows: the same bits.
//
//===----------------------------------------------------------------------===//
#include "gpu_dual.h"
#include "gpu_test_util.h"

#include "codegen/templates/flash_math.cuh"

namespace glm::gputest {
namespace {

class KdaChunkGpu : public ::testing::Test {
protected:
  GLM_GPU_SUITE_SETUP
};

TEST_F(KdaChunkGpu, PrepAndChunkMatchTwinsOverTwoPrompts) {
  struct Case {
    int H, h0, n, dk, dv, K, chunk;
    const char *mma;
    int threads, wdt;
    float lower;
    int T1, T2, vsplit;
  };
  for (const Case c :
       {Case{4, 1, 2, 128, 128, 4, 32, "tf32", 256, 2, -5.0f, 300, 77, 1},
        Case{4, 1, 2, 128, 128, 4, 32, "tf32x3", 256, 0, -5.0f, 96, 1, 1},
        Case{3, 0, 3, 128, 128, 4, 16, "tf32", 256, 0, -5.0f, 45, 16, 1},
        Case{2, 0, 2, 64, 64, 4, 16, "tf32x3", 128, 1, -5.0f, 1, 33, 1},
        Case{3, 1, 2, 24, 32, 3, 32, "tf32", 128, 0, 0.0f, 50, 7, 1},
        Case{4, 1, 3, 128, 128, 4, 32, "tf32", 128, 2, -5.0f, 200, 9, 2},
        Case{2, 0, 2, 128, 128, 4, 16, "tf32x3", 256, 0, -5.0f, 70, 3, 4}}) {
    const int n = c.n, dk = c.dk, dv = c.dv, K1 = c.K - 1, slots = 3;
    const std::vector<int> seq = {2};
    std::mt19937 rng(dk * 10 + c.chunk + c.T1);
    const std::string tag =
        "dk" + std::to_string(dk) + " dv" + std::to_string(dv) + " c" +
        std::to_string(c.chunk) + " " + c.mma + " t" +
        std::to_string(c.threads) + " v" + std::to_string(c.vsplit) + " " +
        dtName(c.wdt) + (c.lower == 0.0f ? " softplus" : "");
    auto w = [&](size_t count, float sd, float mean) {
      std::vector<float> v = randn(rng, count, sd);
      for (float &x : v)
        x += mean;
      return storeAs(c.wdt, v);
    };
    const float aMean = c.lower == 0.0f ? -1.5f : 1.0f;
    const auto convQ = w((size_t)c.H * dk * c.K, 0.5f, 0.0f),
               convK = w((size_t)c.H * dk * c.K, 0.5f, 0.0f),
               convV = w((size_t)c.H * dv * c.K, 0.5f, 0.0f),
               aLog = w(c.H, 0.5f, aMean),
               dtBias = w((size_t)c.H * dk, 0.5f, 0.0f),
               oNorm = w(dv, 0.2f, 1.0f);
    const int ins = 3 * n * dk + 2 * n * dv + 7, bs = n + 2;
    std::vector<float> convState((size_t)slots * n * (2 * dk + dv) * K1, NAN),
        state((size_t)slots * n * dk * dv, NAN);
    int done = 0;
    for (int T : {c.T1, c.T2}) {
      const std::string tt =
          tag + " T" + std::to_string(T) + " at " + std::to_string(done);
      const std::vector<float> in = randn(rng, (size_t)T * ins);
      const std::vector<int> pos = {done};
      Dual p("kda_prep", 256);
      const int x = p.hold(in);
      p.arg(x, 0)
          .arg(x, 4 * n * dk)
          .arg(x, 4 * 2 * n * dk)
          .arg(x, 4 * (2 * n * dk + n * dv))
          .i32(ins)
          .buf(randn(rng, (size_t)T * bs))
          .i32(bs)
          .buf(convQ)
          .buf(convK)
          .buf(convV)
          .buf(aLog)
          .buf(dtBias)
          .i32(c.wdt)
          .buf(convState)
          .buf(seq)
          .buf(pos)
          .out<float>((size_t)T * n * dk)
          .out<float>((size_t)T * n * dk)
          .out<float>((size_t)T * n * dv)
          .out<float>((size_t)T * n * dk)
          .out<float>((size_t)T * n)
          .i32(T)
          .i32(c.h0)
          .i32(dk)
          .i32(dv)
          .i32(c.K)
          .f32(c.lower);
      p.run(n, (T + 7) / 8, 1, 256);
      const double gtol = c.lower == 0.0f ? 1e-6 : 0.0;
      p.check(13, "conv state " + tt, 0);
      for (size_t k : {16, 17, 18, 20})
        p.check(k, "out " + std::to_string(k) + " " + tt, 0);
      p.check(19, "g " + tt, gtol, gtol ? "softplus: fp64 libm" : "");
      convState = p.host<float>(13);

      Dual ch("kda_chunk", c.threads,
              {{"chunk", std::to_string(c.chunk)},
               {"mma", c.mma},
               {"vsplit", std::to_string(c.vsplit)}});
      const int gIn = ch.hold(in);
      ch.buf(p.host<float>(16))
          .buf(p.host<float>(17))
          .buf(p.host<float>(18))
          .buf(p.host<float>(19))
          .buf(p.host<float>(20))
          .arg(gIn, 4 * (3 * n * dk + n * dv))
          .i32(ins)
          .buf(oNorm)
          .i32(c.wdt)
          .buf(state)
          .buf(seq)
          .buf(pos)
          .out<float>((size_t)T * n * dv)
          .i32(T)
          .i32(dk)
          .i32(dv)
          .f32(1e-5f)
          .i32(n * dv);
      ch.run(n, c.vsplit, 1, c.threads,
             4u * (unsigned)fm::kdaChunkSmemFloats(c.chunk, dk, dv / c.vsplit));
      const bool x3 = std::string(c.mma) == "tf32x3";
      const double tol = x3 ? 1e-4 : 2e-3;
      const char *why = x3 ? "tensor cores: fp32 MMA sums"
                           : "tensor cores: fp32 MMA sums, tf32 ulp flips";
      ch.check(12, "out " + tt, tol, why);
      ch.check(9, "state " + tt, tol, why);
      state = ch.host<float>(9);
      if (c.vsplit > 1) { // the gated norm after it, in place
        Dual gn("kda_gnorm", 128);
        const int o = gn.hold(ch.host<float>(12)), gi = gn.hold(in);
        gn.arg(o)
            .arg(gi, 4 * (3 * n * dk + n * dv))
            .i32(ins)
            .buf(oNorm)
            .i32(c.wdt)
            .arg(o)
            .i32(n)
            .i32(dv)
            .f32(1e-5f);
        gn.run((n + 3) / 4, T, 1, 128);
        gn.check(0, "gnorm " + tt, 0);
      }
      done += T;
    }
  }
}

} // namespace
} // namespace glm::gputest
