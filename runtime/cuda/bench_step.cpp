//===- bench_step.cpp - whole decode step of a full-size synthetic model --===//
//
// `glm-engine bench --suite step`: the CUDA executor (executor.h) built over
// an index-only pack's geometry with random weight bytes generated on the
// device (trellis halves at the manifest's widths, FP8/BF16 dense records),
// as many layers as fit the device, then the batch-1 decode step replayed
// from its CUDA graph. Reported: step time and tok/s, weight bytes read per
// token and their ratio to the measured copy bandwidth (the roofline), and
// launch gaps as a share of the step (1 - sum of kernel times / graph
// time), plus stream launches vs graph replay.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/tp.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/executor.h"
#include "runtime/formats/pack.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace glm::rt::cuda {

/// Bytes of the fp32 kv_b copy the attention reads per layer: BF16/F16/
/// F32/FP8 kv_b is read as stored (0), trellis kv_b or the legacy MLA
/// kernel (GLM_MLA_KERNEL) gets a copy.
static double kvbCopyBytes(const Pack &pack, const ModelConfig &c) {
  if (const WeightInfo *kvb =
          pack.find("model.layers.0.self_attn.kv_b_proj.weight"))
    if (kvb->format != WeightFormat::Trellis &&
        std::getenv("GLM_MLA_KERNEL") == nullptr)
      return 0;
  return (double)c.kvLoraRank * c.numHeads *
         (c.qkNopeHeadDim + c.vHeadDim) * 4.0;
}

int64_t benchLayersThatFit(const Pack &pack, const ModelConfig &c,
                           size_t freeBytes) {
  std::vector<double> layerBytes(c.numLayers, 0.0);
  double fixed = 0;
  for (const WeightInfo &w : pack.weights()) {
    if (w.layer >= 0 && w.layer < c.numLayers)
      layerBytes[w.layer] += (double)w.bytes();
    else if (w.layer < 0)
      fixed += (double)w.bytes();
  }
  const double kvbt = kvbCopyBytes(pack, c);
  double budget = (double)freeBytes * 0.90 - fixed - (4.0 * (1 << 30));
  int64_t layers = 0;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    budget -= layerBytes[l] + kvbt;
    if (budget < 0)
      break;
    ++layers;
  }
  return std::max<int64_t>(1, layers);
}

void runStepBench(const BenchOptions &opt, BenchResult &r, std::ostream &log) {
  check(!opt.stepPack.empty(),
        "bench --suite step needs --pack DIR: an index-only pack, e.g. "
        "glmc synth --preset glm53 --layout exlr8 --index-only -o DIR");
  PackOpenOptions po;
  po.indexOnly = true;
  po.manifest = opt.stepManifest;
  auto pack = Pack::open(opt.stepPack, po);
  check(pack->config().has_value(), opt.stepPack, ": no config.json");
  const ModelConfig &c = *pack->config();
  CudaDevice dev(opt.device);
  if (r.device.empty())
    r.device = dev.name();

  size_t freeB = 0, totalB = 0;
  GLM_CU(cuMemGetInfo(&freeB, &totalB));
  int64_t layers = opt.stepLayers >= 0 ? opt.stepLayers
                                       : benchLayersThatFit(*pack, c, freeB);
  const double kvbt = kvbCopyBytes(*pack, c);
  layers = std::max<int64_t>(1, std::min<int64_t>(layers, c.numLayers));
  int64_t moeLayers = 0;
  for (int64_t l = 0; l < layers; ++l)
    moeLayers += c.isMoeLayer(l);
  log << "step: " << opt.stepPack << " (" << c.numLayers << " layers, "
      << "manifest " << opt.stepManifest << "): building " << layers
      << " layers (" << moeLayers << " MoE) with random weights on "
      << dev.name() << "\n";

  // GLM_CUDA_GRAPHS=0: stream launches only, no capture (ncu cannot profile
  // kernels inside a graph); the "graph" figures are then stream launches.
  const char *ge = std::getenv("GLM_CUDA_GRAPHS");
  const bool useGraph = !(ge && std::string(ge) == "0");
  CudaOptions o;
  o.useGraphs = useGraph;
  o.device = opt.device;
  o.maxContext = std::max(opt.stepPosition + 2, 8);
  o.maxBatch = 1;
  o.randomWeights = true;
  o.maxLayers = layers;
  auto t0 = std::chrono::steady_clock::now();
  CudaForward fwd(*pack, cpu::TpLayout::fromRule(c, 1), o);
  const double buildS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  log << "step: experts through " << fwd.expertKernelUsed()
      << " (GLM_EXPERT_KERNEL=legacy|moe_trellis)\n";
  // Fill the caches up to the benchmark position (the step then attends
  // stepPosition + 1 keys; every replay rewrites that position).
  for (int i = 0; i < opt.stepPosition; ++i)
    fwd.stepBatch({0}, {(int64_t)(i % 100)});
  if (!useGraph)
    log << "step: GLM_CUDA_GRAPHS=0: no graph capture; the graph row is "
           "stream launches\n";
  for (int i = 0; i < 3; ++i) // capture + warm-up
    fwd.runStepOnly(1, useGraph);
  auto timeIt = [&](bool graph) {
    std::vector<double> ms;
    for (int i = 0; i < std::max(3, opt.reps); ++i) {
      auto a = std::chrono::steady_clock::now();
      fwd.runStepOnly(1, graph);
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - a)
                       .count());
    }
    return median(ms);
  };
  const double graphMs = timeIt(useGraph);
  const double streamMs = timeIt(false);
  std::vector<double> ks;
  std::vector<std::pair<std::string, double>> perKernel;
  for (int i = 0; i < 3; ++i)
    ks.push_back(fwd.kernelTimeSumMs(1, &perKernel));
  const double kernelMs = median(ks);
  // Where the step's time goes (last profiled step), largest first.
  for (size_t i = 0; i < perKernel.size() && i < 16; ++i) {
    char row[256];
    std::snprintf(row, sizeof row, "step:   %-58s %9.3f ms  %5.1f%%\n",
                  perKernel[i].first.c_str(), perKernel[i].second,
                  100.0 * perKernel[i].second / std::max(1e-9, ks.back()));
    log << row;
  }
  const int launches = fwd.launchesPerStep(1);
  const double bytes = fwd.weightBytesPerToken();
  const double roof =
      r.copyGBs > 0 ? (bytes / (graphMs * 1e-3)) / (r.copyGBs * 1e9) : 0;
  const double gap = std::max(0.0, 1.0 - kernelMs / graphMs);
  char line[512];
  std::snprintf(line, sizeof line,
                "step: %lld layers, build %.1f s, %.2f GB resident; batch 1 "
                "at position %d: graph %.3f ms (%.1f tok/s), stream %.3f ms "
                "(%.2fx), kernels %.3f ms over %d launches; %.1f MB weights "
                "per token, %.1f GB/s = %.3f of copy bandwidth %.0f GB/s; "
                "launch gaps %.1f%% of the step\n",
                (long long)layers, buildS, fwd.weightBytesResident() / 1e9,
                opt.stepPosition, graphMs, 1e3 / graphMs, streamMs,
                streamMs / graphMs, kernelMs, launches, bytes / 1e6,
                bytes / (graphMs * 1e-3) / 1e9, roof, r.copyGBs, gap * 100);
  log << line;
  std::snprintf(line, sizeof line,
                "step: of the weight bytes per token, %.1f MB are fp32 "
                "kv_b copies the attention kernels read (the pack's own "
                "bytes: %.1f MB)\n",
                kvbt * (double)layers / 1e6,
                (bytes - kvbt * (double)layers) / 1e6);
  log << line;
  const std::string tag = std::to_string(layers) + "L glm53 b1";
  r.rows.push_back({"step", tag + " graph", graphMs * 1e3, bytes, roof});
  r.rows.push_back(
      {"step", tag + " stream", streamMs * 1e3, bytes,
       r.copyGBs > 0 ? (bytes / (streamMs * 1e-3)) / (r.copyGBs * 1e9) : 0});
  // Launch gaps: the ratio column is the share of the step with no kernel.
  r.rows.push_back(
      {"step", tag + " launch-gap share", graphMs * 1e3 * gap, 0, gap});
}

} // namespace glm::rt::cuda
