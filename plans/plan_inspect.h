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
#include <string>

namespace glm::plan {

struct InspectOptions {
  int rank = -1;             // -1 = every rank
  int layer = INT_MIN;       // INT_MIN = every layer (-1 = outside layers)
  double bandwidthGBps = 273; // 1e9 bytes/s per rank
  std::string planPath;      // shown in headers
};

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
