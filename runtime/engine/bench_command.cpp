//===- bench_command.cpp - `glm-engine bench`: device benchmarks ----------===//
//
// Prints every benchmark as a ratio to the measured device copy bandwidth
// (runtime/cuda/bench.h). Without the CUDA backend in the build the
// subcommand is still listed and says how to get it.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/engine/commands.h"

#include "plans/engine_image.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <memory>

#ifdef GLM_HAVE_CUDA_BENCH
#include "runtime/cuda/bench.h"
#endif

namespace glm::rt {

void addBenchCommand(CLI::App &app, int &rc) {
  struct Opts {
    std::string suite = "all", table;
    int device = 0, reps = 15, layers = 8;
    double copyGiB = 2.0;
    std::string stepPack;
    int stepPosition = 64;
    std::string plan, measuredOut;
    bool noGraphs = false, e4m3Only = false;
    int servePrefix = 4096;
    std::string moeConfigs;
  };
  auto o = std::make_shared<Opts>();
  CLI::App *cmd = app.add_subcommand(
      "bench", "Device benchmarks (CUDA backend): copy bandwidth, expert "
               "trellis GEMVs at GLM-5.3/Flash shapes, a whole MoE layer "
               "decode step; each printed as a ratio to the measured copy "
               "bandwidth");
  cmd->add_option("--suite", o->suite,
                  "copy | expert | moe-layer | all | prefill | step | dense | "
                  "gemv (dense_gemv rows-per-warp and load choices) | flash "
                  "(GLM-5.3-Flash decode kernels: KDA, mHC, k-pool indexer) "
                  "| prefill-step (with --plan: prompts of 512..32768 tokens "
                  "through the plan's prefill graphs, random weights: TTFT "
                  "against the token loop, fraction of the fp16 peak) "
                  "| serve (with --plan: serve --max-batch's generator, "
                  "random weights: tok/s at 1-16 concurrent streams, TTFT "
                  "under steady arrivals, a shared prefix's TTFT)")
      ->check(CLI::IsMember({"copy", "expert", "moe-layer", "all", "prefill",
                             "step", "dense", "gemv", "flash", "serve",
                             "prefill-step"}));
  cmd->add_option("--table", o->table, "Also write the result table to FILE");
  cmd->add_option("--device", o->device, "CUDA device ordinal")
      ->check(cliInt(0, 1023));
  cmd->add_option("--reps", o->reps, "Timed repetitions at most (median)")
      ->check(cliInt(1, 100000));
  cmd->add_option("--layers", o->layers,
                  "Distinct layers per moe-layer graph (defeats the L2)")
      ->check(cliInt(1, 1024));
  cmd->add_option("--copy-gib", o->copyGiB, "Bytes per copy, GiB (>= 2 "
                                            "for a bandwidth that counts)")
      ->check(cliNumber(0, 1024, /*loOpen=*/true));
  cmd->add_option("--moe-configs", o->moeConfigs,
                  "moe-layer/expert: launch configurations to compare, "
                  "split:group:threads:pipe:minblocks[:blocksPerSm] comma-"
                  "separated (the first is used for the layer rows)");
  cmd->add_flag("--e4m3-only", o->e4m3Only,
                "moe-layer: only the E4M3 (exlr8) layer cases");
  cmd->add_option("--pack", o->stepPack,
                  "step: the pack --plan was compiled for; an index-only "
                  "pack works (glmc synth --preset glm53 --layout exlr8 "
                  "--layers 36 --index-only -o DIR): weights are random");
  cmd->add_option("--position", o->stepPosition,
                  "step: decode position the step runs at (default 64)")
      ->check(cliInt(0, 1 << 30));
  cmd->add_option("--plan", o->plan,
                  "step (implied): run this 1-Spark plan of --pack through "
                  "the plan executor, random weights, and time its decode "
                  "step (glmc compile PACK --sparks 1 -o PLAN)");
  cmd->add_option("--measured-out", o->measuredOut,
                  "with --plan: JSON of us per launch by kernel name, for "
                  "glmc inspect PLAN --measured FILE");
  cmd->add_option("--prefix", o->servePrefix,
                  "serve: tokens of the shared prefix (at most the plan's "
                  "context - 64)")
      ->check(cliInt(1, 1 << 30))
      ->capture_default_str();
  cmd->add_flag("--no-cuda-graphs", o->noGraphs,
                "with --plan: launch the step op by op instead of replaying "
                "its CUDA graph (profilers that cannot see inside graphs)");
  cmd->callback([o, &rc] {
#ifdef GLM_HAVE_CUDA_BENCH
    cuda::BenchOptions bo;
    bo.suite = o->suite;
    bo.device = o->device;
    bo.reps = o->reps;
    bo.layers = o->layers;
    bo.copyGiB = o->copyGiB;
    bo.moeConfigs = o->moeConfigs;
    bo.e4m3Only = o->e4m3Only;
    // prefill (bench_prefill.cpp) has its own table of TFLOP/s.
    bo.stepPack = o->stepPack;
    bo.stepPosition = o->stepPosition;
    // An engine that carries its plan (glmc compile --emit engine) times
    // that plan's step when given its pack.
    bo.planPath = o->plan.empty() && !o->stepPack.empty()
                      ? plan::selfEmbeddedPlanPath()
                      : o->plan;
    bo.measuredOut = o->measuredOut;
    bo.graphs = !o->noGraphs;
    bo.servePrefix = o->servePrefix;
    if (!bo.planPath.empty() && bo.suite != "serve" &&
        bo.suite != "prefill-step")
      bo.suite = "step";
    std::string table;
    if (bo.suite == "serve") {
      table = cuda::runServeBench(bo, std::cout); // bench_serve.cpp
    } else if (bo.suite == "prefill-step") {
      table = cuda::runPrefillStepBench(bo, std::cout);
    } else if (bo.suite == "step") {
      // The copy bandwidth is the step's roofline.
      cuda::BenchOptions copy = bo;
      copy.suite = "copy";
      cuda::BenchResult r = cuda::runBench(copy, std::cout);
      cuda::runPlanStepBench(bo, r, std::cout); // bench_plan.cpp
      table = cuda::formatBenchTable(r);
    } else if (bo.suite != "prefill")
      table = cuda::formatBenchTable(cuda::runBench(bo, std::cout));
    if (bo.suite == "prefill" || bo.suite == "all")
      table += (table.empty() ? "" : "\n") +
               cuda::runPrefillBench(bo, std::cout);
    std::cout << "\n" << table;
    if (!o->table.empty()) {
      std::ofstream f(o->table);
      check(bool(f), "bench: cannot write the table to ", o->table);
      f << table;
    }
    rc = 0;
#else
    (void)o;
    rc = 1;
    fail("bench needs the CUDA backend: rebuild with -DGLM_WITH_CUDA=ON on a "
         "machine with the CUDA toolkit");
#endif
  });
}

} // namespace glm::rt
