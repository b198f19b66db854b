//===- bench_gemv.cpp - the streamed dense GEMVs of a decode step ---------===//
//
// `glm-engine bench --suite gemv`: dense_gemv (bf16, FP8 per row, MXFP8) at
// the shapes of a GLM-5.3 decode step — the LM head, q_a, kv_a, the
// indexer's projections, the router — for each launch choice the family
// has: rows per warp (1, 2, 4; dense_gemv_abi.h's grid) and weight loads
// through L1 or streamed past it. The row marked `plan` is what glmc
// compiles today (denseGemvRowsFor, kDenseGemvStream), so one run says
// whether the default is the best. A CUDA graph replays the launch over
// enough distinct copies of the matrix to defeat the L2; times are per
// matrix, ratios weight bytes / time / copy bandwidth.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "codegen/dense_gemv_abi.h"
#include "codegen/kernel_batch.h"
#include "runtime/base/error.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

namespace glm::rt::cuda {

namespace {

using glm::codegen::KernelSpec;

struct GemvShape {
  const char *name, *format;
  int in, out, batch;
};

KernelSpec gemvSpec(const GemvShape &s, int rows, bool stream) {
  KernelSpec k;
  k.family = "dense_gemv";
  const std::string fmt = s.format;
  k.args = {{"format", fmt},
            {"scale", fmt == "fp8_row" ? "f32" : "none"},
            {"batch", std::to_string(codegen::decodeKernelBatch(s.batch))},
            {"threads", "256"}};
  if (rows > 1)
    k.args["rows"] = std::to_string(rows);
  if (stream)
    k.args["loads"] = "stream";
  return k;
}

} // namespace

void runGemvBench(const BenchOptions &opt, BenchResult &r, std::ostream &log) {
  CudaDevice dev(opt.device);
  const std::string arch = dev.arch();
  const int sms = dev.smCount(), warps = 8;
  OwnedStream stream;
  const CUstream st = stream.get();

  const std::vector<GemvShape> shapes = {
      {"lm_head 6144->151552", "fp8_row", 6144, 151552, 1},
      {"lm_head 6144->151552", "fp8_row", 6144, 151552, 8},
      {"q_a 6144->2048", "mxfp8", 6144, 2048, 1},
      {"kv_a 6144->576", "mxfp8", 6144, 576, 1},
      {"idx_wq_b 2048->4096", "mxfp8", 2048, 4096, 1},
      {"idx_wk 6144->128", "mxfp8", 6144, 128, 1},
      {"router 6144->256", "bf16", 6144, 256, 1}};
  // rows: the kernel's rows per warp; perBlock > 0: a grid of ceil(out /
  // perBlock) blocks instead of denseGemvBlocks' (the short-output grid
  // rule: rows a block against input slices a row).
  struct Variant {
    int rows;
    bool stream;
    int perBlock = 0;
  };
  const std::vector<Variant> variants = {
      {1, false},    {1, true},     {2, false},    {2, true},
      {4, false},    {4, true},     {1, true, 8},  {1, true, 4},
      {1, true, 2},  {1, true, 1},  {2, true, 16}, {2, true, 8},
      {2, true, 4},  {2, true, 2},  {4, true, 32}, {4, true, 16},
      {4, true, 8},  {4, true, 4}};

  const KernelSpec fillSpec{"fill_random", {{"threads", "256"}}, {}};
  std::map<std::string, std::string> src;
  auto want = [&](const KernelSpec &s) {
    src.emplace(codegen::kernelName(s), codegen::generateSource(s));
  };
  want(fillSpec);
  for (const GemvShape &s : shapes)
    for (const Variant &v : variants)
      want(gemvSpec(s, v.rows, v.stream));
  log << "gemv: compiling " << src.size() << " kernels\n" << std::flush;
  std::map<std::string, std::unique_ptr<Module>> mods;
  for (const auto &[name, text] : src) {
    const auto bin = codegen::compileWithNvrtc(text, name, arch).cubin;
    mods[name] =
        std::make_unique<Module>(std::vector<char>(bin.begin(), bin.end()));
  }
  auto fn = [&](const KernelSpec &s) {
    const std::string n = codegen::kernelName(s);
    return mods.at(n)->function(n);
  };
  CUfunction fill = fn(fillSpec);
  auto fillWords = [&](const DeviceBuffer &b, unsigned mask, uint64_t seed) {
    Params a;
    a << b.ptr() << (long long)(b.size() / 4) << (unsigned long long)seed
      << mask;
    a.launch(fill, 2048, 1, 256, st);
  };

  uint64_t seed = 91;
  for (const GemvShape &s : shapes) {
    const std::string fmt = s.format;
    const size_t wBytes = size_t(s.out) * s.in * (fmt == "bf16" ? 2 : 1);
    const size_t sBytes = fmt == "fp8_row" ? size_t(s.out) * 4
                          : fmt == "mxfp8" ? size_t(s.out) * (s.in / 32)
                                           : 0;
    const size_t stride = (wBytes + sBytes + 255) / 256 * 256;
    const double bytes = double(wBytes + sBytes);
    const int copies = int(std::clamp(
        (double(1ull << 30) + bytes - 1) / bytes, 2.0, 256.0));
    DeviceBuffer w(stride * copies);
    // Finite bf16 / E4M3 / fp32 words; e8m0 exponents <= 2^0.
    fillWords(w, 0xBFBFBFBFu, seed++);
    if (fmt == "mxfp8")
      for (int c = 0; c < copies; ++c)
        GLM_CU(cuMemsetD8Async(w.ptr() + CUdeviceptr(c) * stride + wBytes,
                               120, sBytes, st));
    DeviceBuffer x(size_t(8) * s.in * 4), y(size_t(8) * s.out * 4);
    {
      std::vector<float> xv(size_t(8) * s.in);
      for (size_t i = 0; i < xv.size(); ++i)
        xv[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
      x.upload(xv.data(), xv.size() * 4);
    }
    const int planRows = codegen::denseGemvRowsFor(
        s.out, codegen::decodeKernelBatch(s.batch));
    double best = 0;
    std::string bestName;
    for (const Variant &v : variants) {
      const unsigned ruleGrid =
          codegen::denseGemvBlocks(s.out, sms, warps, v.rows);
      const unsigned grid =
          v.perBlock ? unsigned((s.out + v.perBlock - 1) / v.perBlock)
                     : ruleGrid;
      // Grid sweeps for short outputs only, each grid once.
      if (v.perBlock && (s.out > 16384 || grid == ruleGrid))
        continue;
      CUfunction f = fn(gemvSpec(s, v.rows, v.stream));
      Graph g;
      g.capture(st, [&] {
        for (int c = 0; c < copies; ++c) {
          const CUdeviceptr base = w.ptr() + CUdeviceptr(c) * stride;
          Params a;
          a << x.ptr() << base << (sBytes ? base + wBytes : CUdeviceptr(0))
            << y.ptr() << s.batch << s.in << s.out << s.out << 0;
          a.launch(f, grid, 1, 256, st);
        }
      });
      const double ms =
          timeMedianMs(st, opt.reps, 200.0, [&] { g.launch(st); }) / copies;
      const bool plan = !v.perBlock &&
                        v.rows == (planRows > 1 ? planRows : 1) &&
                        v.stream == codegen::kDenseGemvStream;
      const std::string name =
          std::string(s.name) + " " + fmt + " b" + std::to_string(s.batch) +
          " r" + std::to_string(v.rows) + (v.stream ? " stream" : " cached") +
          (v.perBlock ? " " + std::to_string(v.perBlock) + "/blk" : "") +
          (plan ? " plan" : "");
      BenchRow b;
      b.suite = "gemv";
      b.name = name;
      b.us = ms * 1e3;
      b.bytes = bytes;
      b.ratio = r.copyGBs > 0 ? bytes / (ms * 1e-3) / (r.copyGBs * 1e9) : 0;
      char line[256];
      std::snprintf(line, sizeof line,
                    "  %-6s %-52s grid %6u %9.2f us %8.1f GB/s  %.3f\n",
                    "gemv", name.c_str(), grid, b.us,
                    bytes / (ms * 1e-3) / 1e9, b.ratio);
      log << line << std::flush;
      r.rows.push_back(b);
      if (bestName.empty() || ms < best)
        best = ms, bestName = name;
    }
    log << "  best: " << bestName << "\n" << std::flush;
  }
  GLM_CU(cuStreamSynchronize(st));
}

} // namespace glm::rt::cuda
