//===- plan_inspect.h - what a plan costs, from the plan alone ------------===//
//
// The renderers behind `glmc inspect`: per rank and layer the fused kernels,
// weight bytes read per decoded token and the predicted time at a bandwidth;
// memory per rank; a summary (bytes per token per rank, predicted decode
// tok/s on N ranks). Formats: text, json, Graphviz dot (a rank's decode
// graph), one self-contained html page. Pure functions of the plan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"

#include <climits>
#include <map>
#include <string>
#include <vector>

namespace glm::plan {

/// Assumed integer throughput for trellis decode predictions: 1e12 int32
/// operations per second per rank (DGX Spark estimate; H200 ~17) and the
/// integer operations one decoded trellis weight costs (docs/plan-format.md).
constexpr double kDefaultIntRateTops = 15.0;
constexpr double kDefaultOpsPerWeight = 8.0;

/// Bytes in the inspector's units: "3.85 MiB", "106.31 GiB" (binary
/// prefixes, two decimals). glmc compile's budget lines use it too, so the
/// figures read the same in both.
std::string humanBytes(uint64_t bytes);

struct InspectOptions {
  int rank = -1;             // -1 = every rank
  int layer = INT_MIN;       // INT_MIN = every layer (-1 = outside layers)
  double bandwidthGBps = 273; // 1e9 bytes/s per rank
  double intRateTops = kDefaultIntRateTops;   // 1e12 int ops/s per rank
  double opsPerWeight = kDefaultOpsPerWeight; // int ops per trellis weight
  std::string planPath;      // shown in headers
  /// Measured µs per launch by kernel name (`--measured FILE.json`);
  /// empty = no measured column.
  std::map<std::string, double> measuredUs;
  std::string measuredSource; // file name, for headers
};

/// Reads a measured-times file: {"kernels": {NAME: µs per launch, ...}}
/// (optionally "device", "plan"), or a flat {NAME: µs} object. Throws
/// glm::rt::Error naming `source` on malformed JSON or a non-numeric or
/// negative time.
std::map<std::string, double> parseMeasured(const std::string &text,
                                            const std::string &source);

/// Predicted and measured cost of one kernel over one rank's batch-1 decode
/// step (all its launches).
struct KernelCost {
  std::string name;
  std::string family;
  uint32_t launches = 0;       // launches per step (repeats counted)
  uint64_t bytes = 0;          // weight bytes read per step
  uint64_t decodedWeights = 0; // trellis weights decoded per step
  double bandwidthUs = 0;      // bytes ÷ bandwidth
  double integerUs = 0;        // decoded weights × ops ÷ integer rate
  double predictedUs = 0;      // Σ per launch max(bandwidth, integer)
  bool integerBound = false;   // integer time exceeds bandwidth time
  double measuredUs = -1;      // measured × launches, -1 = not measured
  double ratio = 0;            // measured ÷ predicted, 0 = n/a
};
/// Per distinct kernel of `r`'s smallest decode graph, in first-launch
/// order.
std::vector<KernelCost> kernelCosts(const Plan &plan, const RankPlan &r,
                                    const InspectOptions &opt);

/// Totals the summary reports.
struct InspectSummary {
  std::vector<uint64_t> bytesPerTokenPerRank;
  uint64_t bytesPerTokenTotal = 0;   // sum over ranks
  uint64_t maxRankBytesPerToken = 0; // the slowest rank bounds a step
  uint32_t slowestRank = 0;
  double predictedStepUs = 0;        // slowest rank at the bandwidth
  double predictedTokPerS = 0;       // 1e6 / predictedStepUs
};
InspectSummary summarize(const Plan &plan, double bandwidthGBps);

std::string inspectText(const Plan &plan, const InspectOptions &opt);
std::string inspectJson(const Plan &plan, const InspectOptions &opt);
/// Graphviz digraph of the ops of one rank's smallest decode graph (rank
/// opt.rank, 0 when -1); edges follow buffers from writer to reader.
std::string inspectDot(const Plan &plan, const InspectOptions &opt);
/// One page with inline CSS; `svg` (the rendered dot, may be empty) is
/// inlined, else the graph is shown as a table.
std::string inspectHtml(const Plan &plan, const InspectOptions &opt,
                        const std::string &svg);

} // namespace glm::plan
