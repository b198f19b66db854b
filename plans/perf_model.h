//===- perf_model.h - per-kernel time on a target, from SASS and bytes ----===//
//
// The performance model of `glmc inspect --target` and the Spark
// projection: for one launch of a plan kernel,
//
//   time = max(memory, busiest pipe, issue) + launch
//
// memory = bytes / min(bandwidth, active SMs x per-SM bandwidth); pipe p =
// warp instructions on p x 32 / (rate_p x active SMs x clock); issue = all
// warp instructions / (schedulers in use x active SMs x clock). Warp
// instructions come from the kernel's SASS for the target's arch
// (sass_profile.h): every instruction once per warp, plus the streaming
// loop's body once per iteration, iterations = bytes / (the loop's load
// bytes per thread x 32), at least one per warp. A kernel with one
// streaming path per trellis width streams each width's share of the bytes
// through its own loop. Figures of each target: targetTable() in
// perf_model.cpp, each with its source.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"
#include "plans/sass_profile.h"

#include <string>
#include <vector>

namespace glm::plan {

struct Target {
  std::string name;          // "h200", "gb10"
  std::string arch;          // the CUBIN arch its kernels compile for
  std::string description;
  uint32_t sms = 0;
  double clockGHz = 0;       // sustained under load
  double bandwidthGBps = 0;  // achievable DRAM streaming, 1e9 B/s
  double perSmGBps = 0;      // what one SM pulls at most (few-block launches)
  PipeCounts rate{};         // results per clock per SM, by pipe (0 = issue only)
  double issuePerSm = 4;     // warp instructions per clock per SM
  uint32_t sharedPerBlock = 0; // bytes
  uint32_t warpsPerSm = 0;
  /// Per launch: a kernel alone, timed by events around it (what
  /// `glm-engine bench --plan --measured-out` reports: fill, drain, the
  /// first loads' latency), and what a launch adds inside a CUDA-graph step
  /// with programmatic launches (the rest overlaps the previous kernel).
  double launchUs = 0;
  double graphLaunchUs = 0;
  double collectiveUs = 0;   // per all-reduce of a decode step (<= 32 KB)
  /// All-reduce time by message size (bytes, us), ascending; between points
  /// linear, past the last at busGBps. Empty: collectiveUs for any size.
  std::vector<std::pair<uint64_t, double>> allReduceCurve;
  double busGBps = 0;
};

/// One all-reduce of `bytes` on `t` (its curve, else collectiveUs).
double allReduceUs(const Target &t, uint64_t bytes);

/// The targets glmc models, and one by name (nullptr when unknown).
const std::vector<Target> &targetTable();
const Target *findTarget(const std::string &name);
std::string targetNames(); // "h200 | gb10"

/// One launch by the model.
struct LaunchPrediction {
  PipeCounts warpInstr{};  // dynamic warp instructions by pipe
  double memoryUs = 0, issueUs = 0, launchUs = 0;
  PipeCounts pipeUs{};     // raw: counts at the pipe rates, not calibrated
  double efficiency = 1;   // computeEfficiency(family) applied to compute
  Pipe busiest = Pipe::Count;
  /// max(memory, max(busiest pipe, issue) / efficiency) + launch
  double us = 0;
  std::string bound;       // "memory", "issue", a pipe name, or "launch"
  bool fits = true;        // shared memory per block within the target's
};

/// The share of its modelled compute time (busiest pipe or issue) a
/// family's kernels reach, measured on the H200 (calibrationTable() in
/// perf_model.cpp: the run, the command, the figure per family); 1 for a
/// family never measured. Stalls on latency, barriers and dependent loads
/// are what the counts do not see; the memory term is not scaled (a
/// streaming shortfall of the H200's 4.2 TB/s is not a GB10's at 220 GB/s).
double computeEfficiency(const std::string &family);

/// `sass` may be null (no disassembly: memory and launch only); `family`
/// selects the compute efficiency ("" = 1). `pathShares`: for a kernel with
/// one streaming path per trellis width, each width's share of `bytes`
/// (ascending widths, summing to 1); used when the SASS has exactly that
/// many tensor streaming loops, else the longest loop streams all bytes.
LaunchPrediction predictLaunch(const Target &t, const SassKernel *sass,
                               const LaunchDims &launch, uint64_t bytes,
                               const std::string &family = "",
                               const std::vector<double> &pathShares = {});

} // namespace glm::plan
