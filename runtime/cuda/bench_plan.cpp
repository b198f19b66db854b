//===- bench_plan.cpp - the plan's whole decode step, timed ---------------===//
//
// `glm-engine bench --suite step --plan PLAN --pack DIR`: the plan executor
// (runtime/exec/plan_executor.h) runs PLAN on this GPU exactly as
// `glm-engine run --backend cuda` does, with random weight bytes generated on
// the device in place of the pack's (index-only packs work: glmc synth
// --preset glm53 --layers N --index-only). The batch-1 decode step at
// --position is replayed from its CUDA graph. Reported: graph and op-by-op
// step time, tok/s, the plan's weight bytes per token and their ratio to the
// measured copy bandwidth (the roofline), the launch-gap share (1 - sum of
// kernel times / graph time) and where the time goes by kernel. With
// --measured-out FILE: µs per launch by kernel name for `glmc inspect PLAN
// --measured FILE` (every launch of the step is a plan kernel).
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_util.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/plan_backend.h"
#include "runtime/exec/plan_executor.h"
#include "runtime/formats/pack.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

namespace glm::rt::cuda {

std::shared_ptr<plan::Plan> openBenchPlan(const BenchOptions &opt,
                                          const char *suite) {
  check(!opt.planPath.empty(), "bench --suite ", suite, " needs --plan PLAN "
        "(glmc compile PACK --sparks 1 -o PLAN)");
  check(!opt.stepPack.empty(), "bench --plan ", opt.planPath,
        " needs --pack DIR: the pack the plan was compiled for (an "
        "index-only pack works: the weights are random)");
  // The plan names its manifest: open the pack with it, so the hashes the
  // reader compares are those of the same manifest.
  const plan::Plan peek = plan::readPlan(opt.planPath);
  PackOpenOptions po;
  po.indexOnly = true;
  po.manifest = peek.model.manifest;
  auto pack = Pack::open(opt.stepPack, po);
  plan::ReadExpectations ex;
  ex.configHash = pack->configHash();
  ex.manifestHash = pack->manifestHash();
  ex.indexHash = pack->indexHash();
  ex.packDir = opt.stepPack;
  // Throws naming both hashes when the plan is not this pack's.
  auto p = std::make_shared<plan::Plan>(plan::readPlan(opt.planPath, ex));
  check(p->numRanks == 1, opt.planPath, ": bench --suite ", suite,
        " runs a 1-Spark plan on one GPU, this plan has ", p->numRanks,
        " ranks; compile one with: ",
        plan::replanCommand(*p, opt.stepPack, "step-1spark.glmplan",
                            {{"--sparks", "1"}}));
  return p;
}

void runPlanStepBench(const BenchOptions &opt, BenchResult &r,
                      std::ostream &log) {
  auto p = openBenchPlan(opt, "step");

  CudaDevice dev(opt.device);
  if (r.device.empty())
    r.device = dev.name();
  size_t freeB = 0, totalB = 0;
  GLM_CU(cuMemGetInfo(&freeB, &totalB));
  const uint64_t arena = p->ranks[0].arenaBytes;
  check(arena + (512ull << 20) <= freeB, opt.planPath, ": its arena is ",
        arena >> 20, " MiB and the GPU has ", freeB >> 20, " MiB free; "
        "synthesize fewer layers (glmc synth --layers N) and re-plan");
  log << "plan-step: " << opt.planPath << " (" << p->model.numLayers
      << " layers, manifest " << p->model.manifest << ", arena "
      << arena / 1e9 << " GB) with random weights on " << dev.name() << "\n";

  std::vector<std::unique_ptr<exec::Backend>> backends;
  backends.push_back(makeCudaBackend(*p, dev));
  exec::PlanExecutor engine(p, opt.stepPack, {0}, std::move(backends),
                            deviceCollectives(nullptr));
  engine.useRandomWeights(1);
  engine.useGraphs(opt.graphs);
  const auto t0 = std::chrono::steady_clock::now();
  engine.load();
  const double loadS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  log << "plan-step: loaded in " << loadS << " s; kernels: "
      << kernelLoadCounts(engine.backend(0)).summary() << "\n";

  // Fill the KV cache up to the position (the timed step then attends
  // position + 1 keys; every repetition rewrites that position).
  for (int i = 0; i <= opt.stepPosition; ++i)
    engine.step({i % 100}, {i}, {0});
  CUstream s = backendStream(engine.backend(0));
  auto timeIt = [&](bool graph) {
    return timeMedianMs(s, std::max(3, opt.reps), 500.0,
                        [&] { engine.runDecode(1, graph); });
  };
  const double graphMs = timeIt(opt.graphs);
  const double streamMs = timeIt(false);

  // Per launch (op by op, events around each kernel): the median over
  // repetitions of each kernel's summed time per step.
  const int reps = std::max(3, std::min(opt.reps, 15));
  const KernelTimes step =
      timeKernels([&] { return engine.profileDecode(1); }, reps);
  const double kernelMs = step.totalMs;
  const int nLaunches = step.printTo(log, "plan-step:  ");
  auto msOf = step.msOf;
  auto launches = step.launches;

  const double bytes = double(engine.decodeWeightBytes(1));
  const double roof =
      r.copyGBs > 0 ? (bytes / (graphMs * 1e-3)) / (r.copyGBs * 1e9) : 0;
  const double gap = std::max(0.0, 1.0 - kernelMs / graphMs);
  char line[640];
  std::snprintf(line, sizeof line,
                "plan-step: %lld layers, load %.1f s; batch 1 at position %d: "
                "%s %.3f ms (%.1f tok/s), op by op %.3f ms (%.2fx), kernels "
                "%.3f ms over %d launches; %.1f MB weights per token (the "
                "plan's bytesRead), %.1f GB/s = %.3f of copy bandwidth %.0f "
                "GB/s; launch gaps %.1f%% of the step\n",
                (long long)p->model.numLayers, loadS, opt.stepPosition,
                opt.graphs ? "graph" : "op by op (graphs off)", graphMs,
                1e3 / graphMs, streamMs, streamMs / graphMs, kernelMs,
                nLaunches, bytes / 1e6, bytes / (graphMs * 1e-3) / 1e9, roof,
                r.copyGBs, gap * 100);
  log << line;
  const std::string tag =
      "plan " + std::to_string(p->model.numLayers) + "L b1";
  r.rows.push_back({"step", tag + (opt.graphs ? " graph" : " no-graph"),
                    graphMs * 1e3, bytes, roof});
  r.rows.push_back(
      {"step", tag + " op by op", streamMs * 1e3, bytes,
       r.copyGBs > 0 ? (bytes / (streamMs * 1e-3)) / (r.copyGBs * 1e9) : 0});
  r.rows.push_back(
      {"step", tag + " launch-gap share", graphMs * 1e3 * gap, 0, gap});

  // Decode buckets above 1 (batching, drafting's verify step): B rows at
  // the positions after the timed one, all in slot 0 as a verify step's
  // are; graph replay as above, the ratio to batch 1 printed.
  std::vector<uint32_t> buckets;
  for (const auto &g : p->ranks[0].graphs)
    if (g.kind == plan::GraphKind::Decode && g.size > 1)
      buckets.push_back(g.size);
  std::sort(buckets.begin(), buckets.end());
  for (uint32_t B : buckets) {
    if (opt.stepPosition + int(B) >= p->model.maxContext)
      continue;
    std::vector<int32_t> toks(B), pos(B), slots(B, 0);
    for (uint32_t j = 0; j < B; ++j) {
      toks[j] = int32_t((j * 7919u + 3) % uint32_t(p->model.vocabSize));
      pos[j] = opt.stepPosition + 1 + int32_t(j);
    }
    engine.step(toks, pos, slots); // writes the rows, captures the graph
    const double ms = timeMedianMs(s, std::max(3, opt.reps), 500.0,
                                   [&] { engine.runDecode(B, opt.graphs); });
    const double bBytes = double(engine.decodeWeightBytes(B));
    char bl[320];
    std::snprintf(bl, sizeof bl,
                  "plan-batch: %u rows: %.3f ms = %.2fx batch 1 (%.1f row "
                  "tok/s, %.2fx batch 1's); %.1f MB weights per step\n",
                  B, ms, ms / graphMs, B * 1e3 / ms, B * graphMs / ms,
                  bBytes / 1e6);
    log << bl;
    r.rows.push_back({"batch", tag + " batch " + std::to_string(B),
                      ms * 1e3, bBytes, ms / graphMs});
  }

  // Drafting (--draft mtp): the MTP draft graph of one row, after a step,
  // as a ratio to the plain step; with the verify steps above (k + 1 rows)
  // the tokens per second of drafted decoding at acceptance rates a (each
  // draft accepted with probability a, independently: a round of k drafts
  // emits (1 - a^(k+1)) / (1 - a) tokens in k drafts + one verify step).
  if (engine.hasDraft() && opt.stepPosition + 2 < p->model.maxContext) {
    engine.step({7}, {opt.stepPosition + 1}, {0});
    engine.draft({11}, {opt.stepPosition + 1}, {0}, {0}); // captures
    const double draftMs = timeMedianMs(
        s, std::max(3, opt.reps), 500.0, [&] { engine.runDraft(1); });
    char dl[320];
    std::snprintf(dl, sizeof dl,
                  "plan-draft: 1 row: %.3f ms = %.2fx batch 1\n", draftMs,
                  draftMs / graphMs);
    log << dl;
    r.rows.push_back({"draft", tag + " draft 1 row", draftMs * 1e3, 0,
                      draftMs / graphMs});
    std::map<uint32_t, double> verifyMs = {{1u, graphMs}};
    for (const auto &row : r.rows)
      if (row.suite == "batch")
        verifyMs[uint32_t(std::stoul(row.name.substr(row.name.rfind(' ') + 1)))] =
            row.us * 1e-3;
    for (uint32_t k = 1; k <= 4; ++k) {
      if (!verifyMs.count(k + 1))
        continue;
      const double round = k * draftMs + verifyMs[k + 1];
      std::string rates;
      for (double a : {0.5, 0.6, 0.7, 0.8, 0.9}) {
        const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
        char c[64];
        std::snprintf(c, sizeof c, " a=%.1f %.1f tok/s (%.2fx);", a,
                      tokens * 1e3 / round, tokens * graphMs / round);
        rates += c;
      }
      char vl[640];
      std::snprintf(vl, sizeof vl,
                    "plan-draft: k=%u: verify %.3f ms = %.2fx batch 1, "
                    "round %.3f ms;%s\n",
                    k, verifyMs[k + 1], verifyMs[k + 1] / graphMs, round,
                    rates.c_str());
      log << vl;
    }
  }

  // Prefill chunks of the plan: one chunk from position 0 (random tokens),
  // op by op, against the token loop of as many decode steps.
  for (uint32_t c : engine.prefillChunks()) {
    if (c > p->model.maxContext)
      continue;
    std::vector<int32_t> toks(c);
    for (uint32_t j = 0; j < c; ++j)
      toks[j] = int32_t((j * 7919u) % uint32_t(p->model.vocabSize));
    engine.prefill(toks, 0, 0); // writes the rows (and warms up)
    const double ms = timeMedianMs(s, 3, 2000.0,
                                   [&] { engine.runPrefill(c); });
    const double loopMs = double(c) * graphMs;
    char pl[320];
    std::snprintf(pl, sizeof pl,
                  "plan-prefill: chunk %u tokens: %.2f ms = %.0f tok/s; the "
                  "token loop (%u decode steps at %.3f ms) %.1f ms: %.1fx\n",
                  c, ms, c / (ms * 1e-3), c, graphMs, loopMs, loopMs / ms);
    log << pl;
    r.rows.push_back({"prefill", tag + " chunk " + std::to_string(c),
                      ms * 1e3, 0, loopMs / ms});
    // Where the chunk's time goes (op by op, each launch timed).
    const KernelTimes chunk =
        timeKernels([&] { return engine.profilePrefill(c); }, 2);
    const std::string prefix = "plan-prefill " + std::to_string(c) + ":";
    chunk.printTo(log, prefix.c_str());
  }

  if (opt.measuredOut.empty())
    return;
  nlohmann::json out, kernels = nlohmann::json::object(),
                     counts = nlohmann::json::object();
  for (auto &[k, v] : msOf) {
    kernels[k] = median(v) * 1e3 / std::max(1, launches[k]);
    counts[k] = launches[k];
  }
  out["device"] = dev.name() + " (" + dev.arch() + ")";
  out["plan"] = opt.planPath;
  out["pack"] = opt.stepPack;
  out["layers"] = p->model.numLayers;
  out["batch"] = 1;
  out["position"] = opt.stepPosition;
  out["kernels"] = kernels;
  out["launches"] = counts;
  std::ofstream f(opt.measuredOut, std::ios::trunc);
  check(bool(f), opt.measuredOut, ": cannot open for writing");
  f << out.dump(2) << "\n";
  check(bool(f), opt.measuredOut, ": write failed");
  log << "plan-step: wrote " << opt.measuredOut << " (glmc inspect "
      << opt.planPath << " --measured " << opt.measuredOut << ")\n";
}

} // namespace glm::rt::cuda
