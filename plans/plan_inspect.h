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

#include "plans/perf_model.h"
#include "plans/plan.h"
#include "plans/sass_profile.h"

#include <climits>
#include <functional>
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

/// Bytes [begin, end) of one buffer an op may touch.
struct InspectRegion {
  uint32_t buffer = 0;
  uint64_t begin = 0, end = 0;
};
/// Per op of a graph, the regions it may touch (the runtime's footprints:
/// runtime/exec/launch_bounds.h opRegions).
using RegionsFn = std::function<std::vector<std::vector<InspectRegion>>(
    const RankPlan &, const GraphDef &)>;

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
  /// Tokens in the KV cache when the step runs (`--context T`): the
  /// attention reads min(T, the DSA top-k) KV rows, the indexer T index
  /// keys per layer. -1 = the plan's max context (the most a step reads).
  int64_t context = -1;
  /// Per kernel launch: the fill and drain around a dependent launch
  /// (`--launch-us`); per collective of a multi-rank plan (`--collective-us`,
  /// ~30 us per message of <= 32 KB over the Sparks' RoCE as users report).
  double launchUs = 2.0;
  double collectiveUs = 30.0;
  /// The graph the kernel table and dot show (`--graph decode.4`,
  /// `prefill.512`); "" = the smallest decode graph.
  std::string graph;
  /// Set: data edges join a writer to a reader only where their byte
  /// regions meet (scratch shared by unrelated ops draws no edge); unset:
  /// wherever a reader names a buffer the latest writer wrote.
  RegionsFn regions;
  /// Set (`--target h200|gb10`): kernels are timed by the target's model
  /// (plans/perf_model.h) from their SASS in `sass` (by kernel name; a
  /// kernel missing there is timed by its bytes and launch only), and the
  /// target's bandwidth, launch and collective figures replace the flags'.
  const Target *target = nullptr;
  std::map<std::string, SassKernel> sass;
};

/// The data edges (writer op, reader op) of graph `g`, by op index: for
/// each buffer an op reads, the earlier ops that wrote bytes it reads,
/// latest first, until writers cover its read.
std::vector<std::pair<size_t, size_t>>
dataEdges(const RankPlan &r, const GraphDef &g, const InspectOptions &opt);

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
  uint64_t bytes = 0;          // weight + context bytes read per step
  uint64_t contextBytes = 0;   // of them: KV and index-key rows
  uint64_t decodedWeights = 0; // trellis weights decoded per step
  double bandwidthUs = 0;      // bytes ÷ bandwidth
  double integerUs = 0;        // decoded weights × ops ÷ integer rate
  double launchUs = 0;         // launches × InspectOptions::launchUs
  /// Σ per launch max(bandwidth, integer) + launch overhead.
  double predictedUs = 0;
  bool integerBound = false;   // integer time exceeds bandwidth time
  /// With a target: what bounds the most of its time ("memory", "issue",
  /// a pipe, "launch"), its dynamic warp instructions by pipe and the
  /// per-pipe and issue times (Σ over launches); fits = every launch's
  /// shared memory within the target's per-block limit.
  std::string bound;
  PipeCounts warpInstr{};
  PipeCounts pipeUs{};
  double issueUs = 0;
  double efficiency = 1; // computeEfficiency of its family
  bool fits = true;
  bool hasSass = false;
  /// A kernel with one path per trellis width: the bytes each width (K)
  /// streams per step, what the model times through that width's loop.
  std::map<int, double> widthBytes;
  double measuredUs = -1;      // measured × launches, -1 = not measured
  double ratio = 0;            // measured ÷ predicted, 0 = n/a
};
/// Per distinct kernel of `r`'s graph (opt.graph, else the smallest
/// decode graph; the ops of opt.layer when one is chosen), most predicted
/// time first (ties: first launch first).
std::vector<KernelCost> kernelCosts(const Plan &plan, const RankPlan &r,
                                    const InspectOptions &opt);

/// The step of one rank's graph by the model: kernels (bytes, context
/// reads, integer work, launches) plus its collectives.
struct StepCost {
  std::string graph;          // "decode.1"
  uint32_t rows = 1;          // the graph's rows: decode batch, prefill chunk
  int64_t context = 0;        // tokens in the cache
  double kernelUs = 0;        // Σ KernelCost::predictedUs
  uint32_t launches = 0;
  uint32_t collectives = 0;   // collective ops of a multi-rank plan
  double collectiveUs = 0;
  uint64_t contextBytes = 0;
  double stepUs = 0;          // kernelUs + collectiveUs
};
StepCost stepCost(const Plan &plan, const RankPlan &r,
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
