//===- perf_model.cpp - per-kernel time on a target -----------------------===//
#include "plans/perf_model.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace glm::plan {

namespace {

/// Results per clock per SM (CUDA Best Practices Guide 13.x §12.1.1, the
/// arithmetic-instruction throughput table, compute capability 9.0 and
/// 12.x; ../shared/specs/gb10-and-h200.md). Memory: one warp's loads or
/// stores per clock per SM (32 threads: 8 LSU lanes per scheduler, an
/// assumption). Tensor: HMMA.16816 warp instructions at ~60% of the chip's
/// dense fp16 peak with mma.sync (H200: 989 TFLOP/s / (132 SMs x 1.83 GHz)
/// = 4096 FLOP per clock per SM = one 16x8x16 MMA a clock; GB10's public
/// BF16 estimate 59-119 TFLOP/s is 4-8x lower: an assumption until
/// measured). Control and uniform instructions only take issue slots.
PipeCounts rates(bool sm12x) {
  PipeCounts r{};
  r[size_t(Pipe::Fp32)] = 128;
  r[size_t(Pipe::Half2)] = sm12x ? 64 : 128; // HFMA2 halves on 12.x
  r[size_t(Pipe::Imad)] = 64;
  r[size_t(Pipe::Logic)] = 64;               // the ALU: LOP3, shifts, F2FP
  r[size_t(Pipe::IntAdd)] = 128;
  r[size_t(Pipe::Cvt16)] = 64;
  r[size_t(Pipe::F2fp)] = 16;                // I2F, F2F narrowing
  r[size_t(Pipe::F2i)] = sm12x ? 2 : 16;     // float -> int32: 2 on 12.x
  r[size_t(Pipe::Shuffle)] = 32;
  r[size_t(Pipe::Mufu)] = 16;
  r[size_t(Pipe::Memory)] = 32;
  r[size_t(Pipe::Tensor)] = sm12x ? 4 : 19;
  return r;
}

/// Launch costs measured on the H200 (see calibrationTable()).
constexpr double kH200LaunchUs = 4.5;
constexpr double kH200GraphLaunchUs = 1.3;

std::vector<Target> makeTable() {
  std::vector<Target> t;
  Target h;
  h.name = "h200";
  h.arch = "sm_90";
  h.description = "NVIDIA H200 (141 GB HBM3e), one GPU";
  h.sms = 132;
  h.clockGHz = 1.98; // boost clock, held under decode load (nvidia-smi)
  // Our `glm-engine bench --suite copy` measured 4.2-4.3 TB/s read+write
  // (docs/perf.md); streaming reads reach the same.
  h.bandwidthGBps = 4200;
  // One SM with its loads in flight: ~3x its share of the chip's bandwidth
  // (an assumption; it only binds launches of fewer blocks than SMs).
  h.perSmGBps = 3 * 4200.0 / 132;
  h.rate = rates(false);
  h.sharedPerBlock = 227 * 1024; // Programming Guide, cc 9.0
  h.warpsPerSm = 64;
  // A dependent kernel launch inside a CUDA graph, timed by events: fill,
  // drain and the gap (calibrated on glm-engine bench --plan, docs/perf.md).
  h.launchUs = kH200LaunchUs;
  h.graphLaunchUs = kH200GraphLaunchUs;
  h.collectiveUs = 10; // NVLink all-reduce of <= 32 KB (assumption)
  t.push_back(h);

  Target g;
  g.name = "gb10";
  g.arch = "sm_121";
  g.description = "NVIDIA GB10 (DGX Spark, 128 GB LPDDR5X), one Spark";
  g.sms = 48;         // deviceQuery in a public DGX Spark write-up
  g.clockGHz = 2.3;   // max 2418 MHz; users pin or cap 2200-2400 MHz
  // 273 GB/s nominal; reads measured 231-234 GB/s, expert-weight streaming
  // 207-220 GB/s in tuned engines (users' reports).
  g.bandwidthGBps = 220;
  g.perSmGBps = 3 * 220.0 / 48;
  g.rate = rates(true);
  g.sharedPerBlock = 101376; // 99 KB per block, Programming Guide cc 12.x
  g.warpsPerSm = 48;
  g.launchUs = kH200LaunchUs; // as the H200 until measured on a Spark
  g.graphLaunchUs = kH200GraphLaunchUs;
  // NCCL all-reduce over the Sparks' RoCE, two Sparks (users' reports in
  // dgx-spark-playbooks): 8 KB 30-35 us, 16 KB ~31, 32 KB 37-40, 64 KB
  // 65-68; large messages at a bus bandwidth of ~19-24 GB/s. No public
  // small-message figures for four Sparks: the same curve.
  g.collectiveUs = 30;
  g.allReduceCurve = {{8192, 32}, {16384, 31}, {32768, 38.5}, {65536, 66.5}};
  g.busGBps = 20;
  t.push_back(g);
  return t;
}

/// Compute efficiency per family, measured on one H200: the full-size
/// GLM-5.3-Flash decode step (exlr8 K2, 45 layers, batch 1, position 64),
/// `glm-engine bench --plan flashk2.glmplan --measured-out m.json` at
/// commit 091281d (docs/perf.md "Session 14"), then
/// `scripts/calibrate_model.py` over `glmc inspect --target h200 --format
/// json --measured m.json`: per family, the modelled compute time over the
/// measured time less the launch, where the memory term does not explain
/// it. Families of that step only; GLM-5.3's step validates them.
/// moe_trellis and dense_trellis were recomputed from the same run when the
/// streaming loop became the tensor loop and cp.async loops their staged
/// bytes (docs/perf.md "Session 25"): the modelled compute below over the
/// same measured time.
const std::map<std::string, double> &calibrationTable() {
  static const std::map<std::string, double> table = {
      // CALIBRATION-BEGIN (scripts/calibrate_model.py)
      {"dense_gemv", 0.278}, // 567 of 2040 us
      {"dense_trellis", 0.545}, // 816 of 1498 us
      {"embed_tokens", 0.050}, // 0 of 3 us
      {"indexer_scores_ctx", 0.050}, // 6 of 205 us
      {"kda_decode", 1.081}, // 847 of 783 us
      {"kpool_store", 1.052}, // 24 of 22 us
      {"kv_store", 0.741}, // 14 of 19 us
      {"mhc_mix", 0.363}, // 224 of 617 us
      {"mla_core", 1.669}, // 131 of 79 us
      {"mla_out", 8.000}, // 905 of 90 us
      {"mla_qabs", 1.988}, // 221 of 111 us
      {"moe_trellis", 0.581}, // 2934 of 5048 us
      {"rms_norm_rows", 1.941}, // 454 of 234 us
      {"route", 0.163}, // 47 of 288 us
      // CALIBRATION-END
  };
  return table;
}

} // namespace

double computeEfficiency(const std::string &family) {
  auto it = calibrationTable().find(family);
  return it == calibrationTable().end() ? 1.0 : it->second;
}

const std::vector<Target> &targetTable() {
  static const std::vector<Target> table = makeTable();
  return table;
}

const Target *findTarget(const std::string &name) {
  for (const Target &t : targetTable())
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string targetNames() {
  std::string s;
  for (const Target &t : targetTable())
    s += (s.empty() ? "" : " | ") + t.name;
  return s;
}

double allReduceUs(const Target &t, uint64_t bytes) {
  const auto &c = t.allReduceCurve;
  if (c.empty())
    return t.collectiveUs;
  if (bytes <= c.front().first)
    return c.front().second;
  for (size_t i = 1; i < c.size(); ++i)
    if (bytes <= c[i].first) {
      const double f = double(bytes - c[i - 1].first) /
                       double(c[i].first - c[i - 1].first);
      return c[i - 1].second + f * (c[i].second - c[i - 1].second);
    }
  return c.back().second +
         (t.busGBps > 0 ? double(bytes - c.back().first) / (t.busGBps * 1e3)
                        : 0.0);
}

LaunchPrediction predictLaunch(const Target &t, const SassKernel *sass,
                               const LaunchDims &launch, uint64_t bytes,
                               const std::string &family,
                               const std::vector<double> &pathShares) {
  LaunchPrediction p;
  const double blocks = double(std::max<uint32_t>(launch.gridX, 1)) *
                        std::max<uint32_t>(launch.gridY, 1) *
                        std::max<uint32_t>(launch.gridZ, 1);
  const double threads = double(std::max<uint32_t>(launch.blockX, 1)) *
                         std::max<uint32_t>(launch.blockY, 1) *
                         std::max<uint32_t>(launch.blockZ, 1);
  const double warpsPerBlock = std::ceil(threads / 32);
  const double warps = blocks * warpsPerBlock;
  const double activeSms = std::min<double>(t.sms, blocks);
  const double clock = t.clockGHz * 1e3; // clocks per microsecond
  p.fits = launch.smemBytes <= t.sharedPerBlock;

  const double bw =
      std::min(t.bandwidthGBps, activeSms * t.perSmGBps) * 1e3; // B per us
  p.memoryUs = bw > 0 ? double(bytes) / bw : 0;
  p.efficiency = family.empty() ? 1.0 : computeEfficiency(family);
  double best = p.memoryUs;
  p.bound = "memory";
  if (sass) {
    // The loops that stream the bytes: one per width of a multi-width
    // kernel (its tensor loops, in code order = ascending width), else the
    // longest. Each warp that reaches a loop runs it at least once (a
    // kernel of activations only reads no plan bytes, yet runs its loop).
    std::vector<std::pair<const StreamLoop *, double>> paths;
    std::vector<const StreamLoop *> tensorLoops;
    for (const StreamLoop &l : sass->streams)
      if (l.tensor)
        tensorLoops.push_back(&l);
    StreamLoop longest;
    longest.hot = sass->hot;
    longest.loadBytes = sass->loopLoadBytes;
    if (pathShares.size() > 1 && tensorLoops.size() == pathShares.size()) {
      for (size_t w = 0; w < pathShares.size(); ++w)
        paths.push_back({tensorLoops[w], pathShares[w]});
    } else if (sass->loopLoadBytes) {
      paths.push_back({&longest, 1.0});
    }
    PipeCounts once = sass->all;
    for (const auto &[loop, share] : paths)
      for (size_t i = 0; i < kPipes; ++i)
        once[i] -= loop->hot[i];
    for (size_t i = 0; i < kPipes; ++i)
      p.warpInstr[i] = warps * std::max(0.0, once[i]);
    for (const auto &[loop, share] : paths) {
      const double iterations =
          std::max(warps * share,
                   share * double(bytes) / (32.0 * loop->loadBytes));
      for (size_t i = 0; i < kPipes; ++i)
        p.warpInstr[i] += iterations * loop->hot[i];
    }
    for (size_t i = 0; i < kPipes; ++i) {
      if (t.rate[i] <= 0)
        continue;
      p.pipeUs[i] = p.warpInstr[i] * 32 / (t.rate[i] * activeSms * clock);
      if (p.pipeUs[i] / p.efficiency > best) {
        best = p.pipeUs[i] / p.efficiency;
        p.busiest = Pipe(i);
        p.bound = pipeName(Pipe(i));
      }
    }
    // A scheduler issues only for its own warps: a block of 2 warps on an
    // SM keeps 2 of its 4 busy.
    const double schedulers =
        std::min(t.issuePerSm, std::ceil(warps / activeSms));
    p.issueUs = total(p.warpInstr) / (schedulers * activeSms * clock);
    if (p.issueUs / p.efficiency > best) {
      best = p.issueUs / p.efficiency;
      p.bound = "issue";
    }
  }
  p.launchUs = t.launchUs;
  if (p.launchUs > best)
    p.bound = "launch";
  p.us = best + p.launchUs;
  return p;
}

} // namespace glm::plan
