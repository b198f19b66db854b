//===- bench_plan.cpp - measured time per kernel of a plan's decode step --===//
//
// `glm-engine bench --plan PLAN --pack PACK --measured-out FILE.json`: the
// CUDA executor over the plan's pack geometry (index-only packs work: the
// weights are random bytes generated on the device, as in --suite step),
// with the plan's kernels (CUBINs reused where name and source match), as
// many layers as fit. The batch-1 decode step is profiled by the executor's
// own per-launch event timer (kernelTimeSumMs); the file records µs per
// launch by kernel name, which `glmc inspect PLAN --measured FILE.json`
// shows next to the plan's predictions. Kernels the executor runs that the
// plan does not name (its helper kernels) are listed apart.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/cpu/tp.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/executor.h"
#include "runtime/formats/pack.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace glm::rt::cuda {

void runPlanBench(const BenchOptions &opt, std::ostream &log) {
  check(!opt.planPath.empty(), "bench --plan: no plan file given");
  check(!opt.stepPack.empty(),
        "bench --plan ", opt.planPath,
        " needs --pack DIR: the pack the plan was compiled for (an "
        "index-only pack works, e.g. glmc synth --preset glm53 --layout "
        "exlr8 --index-only -o DIR)");
  check(!opt.measuredOut.empty(),
        "bench --plan needs --measured-out FILE.json (read by glmc inspect "
        "PLAN --measured FILE.json)");
  // The plan names its manifest: open the pack with it, so the hashes the
  // reader compares are those of the same manifest.
  const plan::Plan peek = plan::readPlan(opt.planPath);
  PackOpenOptions po;
  po.indexOnly = true;
  po.manifest = peek.model.manifest;
  auto pack = Pack::open(opt.stepPack, po);
  check(pack->config().has_value(), opt.stepPack, ": no config.json");
  plan::ReadExpectations ex;
  ex.configHash = pack->configHash();
  ex.manifestHash = pack->manifestHash();
  ex.indexHash = pack->indexHash();
  ex.packDir = opt.stepPack;
  // Throws naming both hashes when the plan is not this pack's.
  const plan::Plan p = plan::readPlan(opt.planPath, ex);
  check(p.numRanks == 1, opt.planPath, ": bench --plan times a 1-Spark plan "
        "on one GPU, this plan has ", p.numRanks, " ranks; compile one with "
        "glmc compile ", opt.stepPack, " --sparks 1 -o PLAN");
  const ModelConfig &c = *pack->config();
  int maxDecode = 1;
  for (const plan::GraphDef &g : p.ranks.at(0).graphs)
    if (g.kind == plan::GraphKind::Decode)
      maxDecode = std::max<int>(maxDecode, (int)g.size);
  maxDecode = std::min(maxDecode, 8);

  CudaDevice dev(opt.device);
  size_t freeB = 0, totalB = 0;
  GLM_CU(cuMemGetInfo(&freeB, &totalB));
  int64_t layers = opt.stepLayers >= 0
                       ? std::min<int64_t>(opt.stepLayers, c.numLayers)
                       : benchLayersThatFit(*pack, c, freeB);
  layers = std::max<int64_t>(1, std::min<int64_t>(layers, c.numLayers));
  log << "plan-bench: " << opt.planPath << " on " << opt.stepPack << " ("
      << c.numLayers << " layers, manifest " << p.model.manifest
      << "): building " << layers << " layers with random weights on "
      << dev.name() << " (the plan's decode batches go up to " << maxDecode
      << "; batch 1 is timed)\n";

  CudaOptions o;
  o.device = opt.device;
  o.maxContext = std::max(opt.stepPosition + 2, 8);
  // Batch 1 is what is timed; a larger maxBatch would only build more
  // kernels. moe_trellis eligibility is judged at the plan's largest batch
  // there: the same for GLM-5.3 (8 x 8 experts <= 64).
  o.maxBatch = 1;
  o.randomWeights = true;
  o.maxLayers = layers;
  o.planKernels = p.kernels;
  CudaForward fwd(*pack, cpu::tpLayoutFromPlan(c, p), o);
  log << "plan-bench: experts through " << fwd.expertKernelUsed() << "; "
      << fwd.planKernelsUsed() << " of the executor's codegen kernels came "
      << "from the plan (same name and source)\n"
      << "plan-bench: " << fwd.kernelBuildSummary() << "\n";
  for (int i = 0; i < opt.stepPosition; ++i)
    fwd.stepBatch({0}, {(int64_t)(i % 100)});
  for (int i = 0; i < 3; ++i) // warm-up
    fwd.runStepOnly(1, true);

  // Per kernel: the median over repetitions of its summed time per step.
  const int reps = std::max(3, std::min(opt.reps, 15));
  std::map<std::string, std::vector<double>> msOf;
  std::map<std::string, int> launches;
  std::vector<double> sums;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::pair<std::string, double>> perKernel;
    std::map<std::string, int> count;
    sums.push_back(fwd.kernelTimeSumMs(1, &perKernel, &count));
    for (auto &[name, ms] : perKernel)
      msOf[name].push_back(ms);
    launches = count;
  }

  // What the plan's batch-1 graph launches per kernel over the same layers
  // (the embedding and head always run).
  std::set<std::string> planNames;
  for (const plan::KernelDef &k : p.kernels)
    planNames.insert(k.name);
  std::map<std::string, int> planned;
  const plan::GraphDef *g1 = nullptr;
  for (const plan::GraphDef &g : p.ranks.at(0).graphs)
    if (g.kind == plan::GraphKind::Decode && g.size == 1)
      g1 = &g;
  if (g1)
    for (const plan::OpDef &op : g1->ops)
      if (op.kernel >= 0 && (size_t)op.kernel < p.kernels.size() &&
          (op.layer < 0 || op.layer < layers || op.layer >= c.numLayers))
        planned[p.kernels[op.kernel].name] += std::max<uint32_t>(op.repeat, 1);

  nlohmann::json out, kernels = nlohmann::json::object(),
                     counts = nlohmann::json::object(),
                     unplanned = nlohmann::json::array(),
                     missing = nlohmann::json::array();
  double inPlanMs = 0, allMs = 0;
  int agree = 0;
  for (auto &[name, v] : msOf) {
    const int n = std::max(1, launches[name]);
    const double ms = median(v);
    const double us = ms * 1e3 / n;
    kernels[name] = us;
    counts[name] = n;
    allMs += ms;
    const bool known = planNames.count(name) > 0;
    if (known)
      inPlanMs += ms;
    else
      unplanned.push_back(name);
    const int want = planned.count(name) ? planned[name] : 0;
    agree += known && want == n;
    char row[320];
    std::snprintf(row, sizeof row,
                  "plan-bench:   %-58s %6d launches %10.2f us/launch  %s\n",
                  name.c_str(), n, us,
                  !known ? "(executor helper: not in the plan)"
                  : want == n
                      ? "(plan: same launches)"
                      : ("(plan: " + std::to_string(want) + " launches)")
                            .c_str());
    log << row;
  }
  for (auto &[name, n] : planned)
    if (!msOf.count(name)) {
      missing.push_back(name);
      log << "plan-bench:   " << name << ": " << n
          << " launches in the plan, none by the executor\n";
    }
  char line[400];
  std::snprintf(line, sizeof line,
                "plan-bench: step kernels %.3f ms over %zu kernel names; the "
                "plan names %zu of them (%.1f%% of the kernel time), %d with "
                "the same launch count; %zu plan kernels the executor did "
                "not launch\n",
                median(sums), msOf.size(), msOf.size() - unplanned.size(),
                allMs > 0 ? 100.0 * inPlanMs / allMs : 0.0, agree,
                missing.size());
  log << line;

  out["device"] = dev.name() + " (" + dev.arch() + ")";
  out["plan"] = opt.planPath;
  out["pack"] = opt.stepPack;
  out["layers"] = layers;
  out["batch"] = 1;
  out["position"] = opt.stepPosition;
  out["plan_kernels_loaded"] = fwd.planKernelsUsed();
  out["kernels"] = kernels;
  out["launches"] = counts;
  out["not_in_plan"] = unplanned;
  out["not_launched"] = missing;
  std::ofstream f(opt.measuredOut, std::ios::trunc);
  check(bool(f), opt.measuredOut, ": cannot open for writing");
  f << out.dump(2) << "\n";
  check(bool(f), opt.measuredOut, ": write failed");
  log << "plan-bench: wrote " << opt.measuredOut << " (glmc inspect "
      << opt.planPath << " --measured " << opt.measuredOut << ")\n";
}

} // namespace glm::rt::cuda
