//===- perf_model_test.cpp - SASS counts per pipe and the kernel model ----===//
//
// The parser on real nvdisasm listings (tests/data/sass: stream.cu built
// with nvcc for sm_90 and sm_121, disassembled by the toolkit's nvdisasm):
// every instruction's pipe, the streaming loop and its load bytes. The
// model's arithmetic on hand-computed cases: a launch the H200 runs
// ALU-bound is memory-bound on the GB10 (its 8x integer issue per byte),
// f32->int conversions cost 8x more on sm_12x. And, where this machine has
// NVRTC and nvdisasm, a real codegen family through the whole path.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/disassemble.h"
#include "plans/perf_model.h"
#include "plans/sass_profile.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"

#include <gtest/gtest.h>

using namespace glm::plan;

namespace {

std::string listing(const std::string &arch) {
  const std::string path =
      std::string(GLM_TEST_DATA_DIR) + "/sass/stream." + arch + ".sass";
  return glm::rt::readFileBounded(path, 1 << 20, "a SASS listing");
}

double at(const PipeCounts &c, Pipe p) { return c[size_t(p)]; }

} // namespace

TEST(SassProfile, OpcodesGoToTheirPipes) {
  EXPECT_EQ(pipeOf("FFMA"), Pipe::Fp32);
  EXPECT_EQ(pipeOf("HFMA2.MMA"), Pipe::Half2);
  EXPECT_EQ(pipeOf("HADD2.F32"), Pipe::Cvt16);
  EXPECT_EQ(pipeOf("IMAD.WIDE.U32"), Pipe::Imad);
  EXPECT_EQ(pipeOf("LOP3.LUT"), Pipe::Logic);
  EXPECT_EQ(pipeOf("SHF.R.U32.HI"), Pipe::Logic);
  EXPECT_EQ(pipeOf("PRMT"), Pipe::Logic);
  EXPECT_EQ(pipeOf("IADD3"), Pipe::IntAdd);
  EXPECT_EQ(pipeOf("F2FP.BF16.F32.PACK_AB"), Pipe::Logic); // the ALU (ncu)
  EXPECT_EQ(pipeOf("F2FP.SATFINITE.E4M3.F16.UNPACK_B_MERGE_C"), Pipe::Logic);
  EXPECT_EQ(pipeOf("I2F.U32"), Pipe::F2fp);
  EXPECT_EQ(pipeOf("F2F.F32.F16"), Pipe::Cvt16);
  EXPECT_EQ(pipeOf("F2I.TRUNC.NTZ"), Pipe::F2i);
  EXPECT_EQ(pipeOf("SHFL.BFLY"), Pipe::Shuffle);
  EXPECT_EQ(pipeOf("MUFU.EX2"), Pipe::Mufu);
  EXPECT_EQ(pipeOf("LDGSTS.E.BYPASS.128"), Pipe::Memory);
  EXPECT_EQ(pipeOf("HMMA.16816.F32"), Pipe::Tensor);
  EXPECT_EQ(pipeOf("BSYNC.RECONVERGENT"), Pipe::Control);
  EXPECT_EQ(pipeOf("ULDC.64"), Pipe::Uniform);
  EXPECT_EQ(pipeOf("LDCU.64"), Pipe::Uniform);
}

TEST(SassProfile, CountsEveryPipeAndFindsTheStreamingLoop) {
  for (const std::string arch : {"sm_90", "sm_121"}) {
    SCOPED_TRACE(arch);
    auto fns = parseSass(listing(arch), arch);
    ASSERT_EQ(fns.size(), 1u);
    const SassKernel &k = fns.at("k");
    // 30 instructions, 10 padding NOPs left out; two back edges: the
    // grid-stride loop and the trap loop after EXIT (a branch to itself,
    // not a loop body).
    EXPECT_EQ(total(k.all), 30);
    EXPECT_EQ(k.loops, 1u);
    // The loop: IMAD.WIDE, LDG.E.128, IADD3, ISETP, FMUL, FFMA, FADD, BRA.
    EXPECT_EQ(k.loopLoadBytes, 16u);
    EXPECT_EQ(total(k.hot), 8);
    EXPECT_EQ(at(k.hot, Pipe::Fp32), 3);
    EXPECT_EQ(at(k.hot, Pipe::Imad), 1);
    EXPECT_EQ(at(k.hot, Pipe::Memory), 1);
    EXPECT_EQ(at(k.hot, Pipe::IntAdd), 1);
    EXPECT_EQ(at(k.hot, Pipe::Logic), 1);
    EXPECT_EQ(at(k.hot, Pipe::Control), 1);
    EXPECT_EQ(at(k.all, Pipe::Fp32), 4);
    EXPECT_EQ(at(k.all, Pipe::Memory), 2); // the LDG and the final STG
    EXPECT_EQ(at(k.all, Pipe::Shuffle), 1);
    EXPECT_EQ(at(k.all, Pipe::Imad), 2);
  }
  // sm_90 loads constants through ULDC, sm_121 through LDCU: both uniform.
  for (const std::string arch : {"sm_90", "sm_121"})
    EXPECT_EQ(at(parseSass(listing(arch), arch).at("k").all, Pipe::Uniform),
              2);
}

TEST(SassProfile, TextWithoutCodeIsRefusedByName) {
  try {
    parseSass("\t.target sm_90\n", "kernel.cubin");
    FAIL() << "accepted a listing without code";
  } catch (const glm::rt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("kernel.cubin"), std::string::npos);
  }
}

// A streaming kernel of 64 logic ops per 16-byte load per thread: on the
// H200 the logic pipe (64/clk/SM x 132 SMs) is slower than 4.2 TB/s; on the
// GB10, 220 GB/s is far slower than its 48 SMs' logic pipes.
TEST(PerfModel, AluBoundOnH200IsMemoryBoundOnGb10) {
  SassKernel k;
  k.loopLoadBytes = 16;
  k.hot[size_t(Pipe::Logic)] = 128;
  k.hot[size_t(Pipe::Memory)] = 1;
  k.hot[size_t(Pipe::Control)] = 1;
  k.all = k.hot;
  LaunchDims d;
  d.gridX = 132;
  d.blockX = 256;
  const uint64_t bytes = 132ull * 8 * 32 * 16 * 100; // 100 iterations a warp
  const double iterations = double(bytes) / (32 * 16);

  const Target &h = *findTarget("h200");
  LaunchPrediction p = predictLaunch(h, &k, d, bytes);
  EXPECT_DOUBLE_EQ(p.warpInstr[size_t(Pipe::Logic)], iterations * 128);
  const double logicUs = iterations * 128 * 32 / (64 * 132 * 1980.0);
  EXPECT_NEAR(p.pipeUs[size_t(Pipe::Logic)], logicUs, 1e-9);
  EXPECT_NEAR(p.memoryUs, double(bytes) / 4200e3, 1e-9);
  EXPECT_NEAR(p.issueUs, iterations * 130 / (4 * 132 * 1980.0), 1e-9);
  EXPECT_EQ(p.bound, "logic");
  EXPECT_NEAR(p.us, logicUs + h.launchUs, 1e-9);

  const Target &g = *findTarget("gb10");
  LaunchPrediction q = predictLaunch(g, &k, d, bytes);
  EXPECT_EQ(q.bound, "memory");
  EXPECT_NEAR(q.us, double(bytes) / 220e3 + g.launchUs, 1e-9);
  EXPECT_NEAR(q.pipeUs[size_t(Pipe::Logic)],
              iterations * 128 * 32 / (64 * 48 * 2300.0), 1e-9);
}

TEST(PerfModel, FewBlocksUseFewSmsAndSchedulers) {
  SassKernel k;
  k.all[size_t(Pipe::Fp32)] = 1000; // no loop: once per warp
  LaunchDims d;
  d.gridX = 4;
  d.blockX = 64; // 2 warps a block: 2 of an SM's 4 schedulers
  const Target &h = *findTarget("h200");
  LaunchPrediction p = predictLaunch(h, &k, d, 4096);
  EXPECT_DOUBLE_EQ(p.warpInstr[size_t(Pipe::Fp32)], 8 * 1000);
  EXPECT_NEAR(p.issueUs, 8000 / (2 * 4 * 1980.0), 1e-9);
  EXPECT_NEAR(p.memoryUs, 4096 / (4 * h.perSmGBps * 1e3), 1e-9);
  EXPECT_EQ(p.bound, "launch"); // 1 us of issue, 4.5 us of launch
}

// A kernel of activations only (no plan bytes) still runs its loop once a
// warp: the loop counts as often as there are warps, not zero times.
TEST(PerfModel, ALoopRunsAtLeastOnceAWarp) {
  SassKernel k;
  k.loopLoadBytes = 16;
  k.hot[size_t(Pipe::Fp32)] = 40;
  k.all = k.hot;
  k.all[size_t(Pipe::Control)] = 5;
  LaunchDims d;
  d.gridX = 10;
  d.blockX = 128; // 40 warps
  LaunchPrediction p = predictLaunch(*findTarget("h200"), &k, d, 0);
  EXPECT_DOUBLE_EQ(p.warpInstr[size_t(Pipe::Fp32)], 40 * 40);
  EXPECT_DOUBLE_EQ(p.warpInstr[size_t(Pipe::Control)], 40 * 5);
}

TEST(PerfModel, FloatToIntIsEightTimesSlowerOnSm12x) {
  SassKernel k;
  k.all[size_t(Pipe::F2i)] = 100;
  LaunchDims d;
  d.gridX = 1000;
  d.blockX = 128;
  const double h =
      predictLaunch(*findTarget("h200"), &k, d, 0).pipeUs[size_t(Pipe::F2i)];
  const double g =
      predictLaunch(*findTarget("gb10"), &k, d, 0).pipeUs[size_t(Pipe::F2i)];
  // Per SM and clock: 16 against 2; chip-wide 132 x 1.98 GHz vs 48 x 2.3.
  EXPECT_NEAR(g / h, (16.0 * 132 * 1.98) / (2.0 * 48 * 2.3), 1e-9);
}

TEST(PerfModel, SharedMemoryBeyondTheTargetDoesNotFit) {
  LaunchDims d;
  d.gridX = 1;
  d.blockX = 128;
  d.smemBytes = 150 * 1024;
  EXPECT_TRUE(predictLaunch(*findTarget("h200"), nullptr, d, 0).fits);
  EXPECT_FALSE(predictLaunch(*findTarget("gb10"), nullptr, d, 0).fits);
  EXPECT_EQ(findTarget("tpu"), nullptr);
  EXPECT_EQ(targetNames(), "h200 | gb10");
}

// The whole path on a real family: NVRTC -> CUBIN -> nvdisasm -> profile.
TEST(PerfModel, RealFamilyThroughNvrtcAndNvdisasm) {
  if (!glm::codegen::nvrtcAvailable() || glm::codegen::findNvdisasm().empty())
    GTEST_SKIP() << "needs NVRTC and nvdisasm (scripts/setup installs it)";
  KernelDef k;
  k.name = "glm_test_stream";
  k.source = "extern \"C\" __global__ void glm_test_stream(const float4 *a, "
             "float *out, int n) {\n"
             "  float s = 0;\n"
             "  for (int i = threadIdx.x; i < n; i += blockDim.x) {\n"
             "    float4 v = __ldg(a + i); s += v.x * v.y + v.z * v.w; }\n"
             "  if (threadIdx.x == 0) out[blockIdx.x] = s; }\n";
  for (const std::string arch : {"sm_90", "sm_121"}) {
    SCOPED_TRACE(arch);
    SassKernel s = glm::codegen::sassProfile(k, arch);
    EXPECT_EQ(s.name, k.name);
    // However far NVRTC unrolls the loop: 16 bytes and 3 fp32 per step.
    ASSERT_GT(s.loopLoadBytes, 0u);
    EXPECT_EQ(s.loopLoadBytes % 16, 0u);
    EXPECT_GE(at(s.hot, Pipe::Fp32), 3.0 * s.loopLoadBytes / 16);
    EXPECT_GE(at(s.hot, Pipe::Memory), s.loopLoadBytes / 16.0);
  }
}

// A kernel with one streaming path per trellis width: each width's share of
// the bytes goes through its own loop (the tensor loops in code order), the
// rest of the kernel counts once a warp; without shares, or with a count
// that does not match the loops, the longest loop streams everything.
TEST(PerfModel, EachWidthStreamsItsShareThroughItsOwnLoop) {
  SassKernel k;
  StreamLoop k2, k4, epilogue;
  k2.hot[size_t(Pipe::Imad)] = 500;
  k2.hot[size_t(Pipe::Tensor)] = 8;
  k2.loadBytes = 16;
  k2.tensor = true;
  k4 = k2;
  k4.hot[size_t(Pipe::Imad)] = 600;
  k4.loadBytes = 32;
  epilogue.hot[size_t(Pipe::Fp32)] = 900; // longer, but no tensor work
  epilogue.loadBytes = 48;
  k.streams = {k2, k4, epilogue};
  k.hot = k4.hot; // the longest tensor loop
  k.loopLoadBytes = k4.loadBytes;
  for (const StreamLoop &l : k.streams)
    for (size_t i = 0; i < kPipes; ++i)
      k.all[i] += l.hot[i];
  k.all[size_t(Pipe::Control)] += 100;
  LaunchDims d;
  d.gridX = 100;
  d.blockX = 128; // 400 warps
  const uint64_t bytes = 64 << 20;
  const Target &h = *findTarget("h200");
  const LaunchPrediction p = predictLaunch(h, &k, d, bytes, "", {0.25, 0.75});
  const double it2 = 0.25 * bytes / (32.0 * 16), it4 = 0.75 * bytes / (32.0 * 32);
  EXPECT_DOUBLE_EQ(at(p.warpInstr, Pipe::Imad), it2 * 500 + it4 * 600);
  EXPECT_DOUBLE_EQ(at(p.warpInstr, Pipe::Tensor), (it2 + it4) * 8);
  EXPECT_DOUBLE_EQ(at(p.warpInstr, Pipe::Fp32), 400 * 900.0); // once a warp
  EXPECT_DOUBLE_EQ(at(p.warpInstr, Pipe::Control), 400 * 100.0);
  // Shares that do not match the tensor loops: the longest streams all.
  const LaunchPrediction q = predictLaunch(h, &k, d, bytes, "", {0.5, 0.25, 0.25});
  EXPECT_DOUBLE_EQ(at(q.warpInstr, Pipe::Imad),
                   400 * 500.0 + bytes / (32.0 * 32) * 600);
}

// The real moe_trellis kernel of GLM-5.3's mixed manifest (K2, K3, K4 in
// one kernel): one decode + MMA loop per width, staged through cp.async, in
// width order; the kernel's streaming loop is a tensor loop (an epilogue
// loop of the kernel is longer and loads more per iteration), and a byte of
// K2 costs more instructions than a byte of K4 (more tiles a byte).
TEST(PerfModel, MixedWidthMoeKernelHasALoopPerWidth) {
  if (!glm::codegen::nvrtcAvailable() || glm::codegen::findNvdisasm().empty())
    GTEST_SKIP() << "needs NVRTC and nvdisasm (scripts/setup installs it)";
  glm::codegen::KernelSpec spec{
      "moe_trellis",
      {{"widths", "234"}, {"codebook", "mcg"}, {"e4m3", "1"}, {"batch", "1"},
       {"sv", "f32"}, {"stage", "gu"}, {"pipe", "4"}, {"minblocks", "4"},
       {"threads", "128"}},
      {"sm_90", "sm_121"}};
  const KernelDef k = glm::codegen::buildKernel(spec, /*compile=*/false);
  for (const std::string arch : {"sm_90", "sm_121"}) {
    SCOPED_TRACE(arch);
    const SassKernel s = glm::codegen::sassProfile(k, arch);
    std::vector<const StreamLoop *> paths;
    for (const StreamLoop &l : s.streams)
      if (l.tensor)
        paths.push_back(&l);
    ASSERT_EQ(paths.size(), 3u);
    // 8 tiles of 8K words a row a warp: K2 one 16-byte copy a lane, K3
    // and K4 two (K3's second predicated off on a quarter of the lanes).
    EXPECT_EQ(paths[0]->loadBytes, 16u);
    EXPECT_EQ(paths[1]->loadBytes, 32u);
    EXPECT_EQ(paths[2]->loadBytes, 32u);
    EXPECT_GT(at(s.hot, Pipe::Tensor), 0);
    auto perByte = [](const StreamLoop &l, double bytesPerIter) {
      return total(l.hot) / bytesPerIter;
    };
    EXPECT_GT(perByte(*paths[0], 16), perByte(*paths[2], 32));
    LaunchDims d;
    d.gridX = 1728;
    d.blockX = 128;
    const Target &t = *findTarget(arch == "sm_90" ? "h200" : "gb10");
    const double allK2 = predictLaunch(t, &s, d, 86 << 20, "", {1, 0, 0}).issueUs;
    const double allK4 = predictLaunch(t, &s, d, 86 << 20, "", {0, 0, 1}).issueUs;
    EXPECT_GT(allK2, 1.2 * allK4);
  }
}

// All-reduce over the Sparks by message size: users' points, linear between
// them, the bus bandwidth past the last; one figure on the H200.
TEST(PerfModel, AllReduceTimeFollowsMessageSize) {
  const Target &g = *findTarget("gb10");
  EXPECT_DOUBLE_EQ(allReduceUs(g, 1024), 32);
  EXPECT_DOUBLE_EQ(allReduceUs(g, 16384), 31);
  EXPECT_DOUBLE_EQ(allReduceUs(g, 24576), 31 + 0.5 * (38.5 - 31));
  EXPECT_DOUBLE_EQ(allReduceUs(g, 65536 + 20000), 66.5 + 20000 / 20e3);
  const Target &h = *findTarget("h200");
  EXPECT_DOUBLE_EQ(allReduceUs(h, 1 << 20), h.collectiveUs);
}
