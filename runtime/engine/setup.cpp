//===- setup.cpp - from command-line options to a ready Generator ---------===//
#include "runtime/engine/setup.h"

#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/host_memory.h"
#include "runtime/base/progress.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/cpu/tp.h"
#include "runtime/dist/comm.h"
#ifdef GLM_HAVE_CUDA_BENCH
#include "runtime/cuda/executor.h"
#endif
#ifdef GLM_HAVE_PLANS
#include "plans/plan.h"
#endif
#ifdef GLM_HAVE_TOKENIZER
#include "runtime/serve/tokenizer.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>

namespace glm::rt {

void addEngineOptions(CLI::App &sub, EngineOptions &o) {
  sub.add_option("PLAN", o.plan,
                 "Plan file from `glmc compile` (`-` = no plan: run the pack "
                 "directly, emulating --sparks ranks)")
      ->required();
  sub.add_option("--pack", o.pack,
                 "Pack directory the plan was compiled for (HF, EXL3 or "
                 "exlr8 layout)")
      ->required();
  sub.add_option("--backend", o.backend,
                 "Executor: `cpu` (the fp32/fp64 reference; every rank in "
                 "this process) or `cuda` (one GPU; needs a build with "
                 "-DGLM_WITH_CUDA=ON)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub.add_option("--sparks", o.sparks,
                 "Ranks to emulate when PLAN is `-` (default 1); with a plan "
                 "it must equal the plan's rank count")
      ->check(cliInt(1, 64));
  sub.add_option("--manifest", o.manifest,
                 "exlr8 manifest name or path (default: the plan's, else the "
                 "pack's only manifest)");
  sub.add_option("--max-context", o.maxContext,
                 "Longest prompt + generation in tokens (default: the plan's "
                 "max context, else 4096)")
      ->check(cliInt(1, kMaxContextTokens));
}

void checkCpuBackendMemory(const Pack &pack, int localRanks) {
  // The fp32 copy of a real pack is several times the machine's memory.
  const uint64_t one =
      cpu::ModelWeights::fp32Bytes(*pack.config(), *cpu::packWeightSource(pack));
  const uint64_t need = one * uint64_t(std::max(localRanks, 1));
  const uint64_t avail = availableHostMemory();
  std::string ranks;
  if (localRanks > 1)
    ranks = " (" + gibText(one) + " for each of the " +
            std::to_string(localRanks) + " ranks of this host)";
  check(avail == 0 || need <= avail, "--backend cpu dequantizes every "
        "weight of ", pack.dir(), " to fp32: that needs ", gibText(need),
        ranks, " of host memory and ", gibText(avail), " are available (",
        availableHostMemorySource(), "); loading it would exhaust the "
        "machine's memory. Run it on the GPU with --backend cuda (glmc "
        "compile sizes each Spark's memory), or use the cpu backend with a "
        "smaller pack");
}

LoadedEngine loadEngine(const EngineOptions &o) {
  LoadedEngine le;
  PackOpenOptions po;
  po.manifest = o.manifest;
#ifdef GLM_HAVE_PLANS
  std::optional<plan::Plan> plan;
  if (o.plan != "-") {
    // The plan names its manifest; open the pack with it so the hashes the
    // reader checks are those of the same manifest.
    plan::Plan peek = plan::readPlan(o.plan);
    if (po.manifest.empty())
      po.manifest = peek.model.manifest;
  }
#endif
  if (o.plan != "-") {
#ifndef GLM_HAVE_PLANS
    fail("this glm-engine was built without plan support; run with PLAN `-`");
#endif
  }
#ifndef GLM_HAVE_CUDA_BENCH
  check(o.backend != "cuda", "--backend cuda: this glm-engine was built "
        "without CUDA: rebuild with -DGLM_WITH_CUDA=ON");
#endif
  le.pack = Pack::open(o.pack, po);
  check(le.pack->config().has_value(), o.pack,
        ": the pack has no config.json; glm-engine needs the model geometry");
  const ModelConfig &cfg = *le.pack->config();
  le.eosIds = cfg.eosTokenIds;
  int ranks = o.sparks > 0 ? o.sparks : 1;
  int64_t maxContext = o.maxContext > 0 ? o.maxContext : 4096;
  std::string tokFile = "tokenizer.json";
  cpu::TpLayout tp;
#ifdef GLM_HAVE_PLANS
  if (o.plan != "-") {
    plan::ReadExpectations ex;
    ex.configHash = le.pack->configHash();
    ex.manifestHash = le.pack->manifestHash();
    ex.indexHash = le.pack->indexHash();
    ex.packDir = o.pack;
    plan = plan::readPlan(o.plan, ex);
    check(o.sparks == 0 || o.sparks == (int)plan->numRanks, o.plan,
          ": the plan is for ", plan->numRanks, " Sparks, --sparks says ",
          o.sparks, "; re-plan with: glmc compile ", o.pack, " --sparks ",
          o.sparks, " -o PLAN");
    ranks = (int)plan->numRanks;
    tp = cpu::tpLayoutFromPlan(cfg, *plan);
    if (!plan->model.eosTokenIds.empty())
      le.eosIds = plan->model.eosTokenIds;
    if (o.maxContext == 0 && plan->model.maxContext > 0)
      maxContext = plan->model.maxContext;
    check(maxContext <= kMaxContextTokens, o.plan, ": max context ",
          maxContext, " tokens is more than the ", kMaxContextTokens,
          " glm-engine supports; the plan is damaged or was not made by "
          "glmc compile (re-plan with --max-context T)");
    if (!plan->model.tokenizerFile.empty())
      tokFile = plan->model.tokenizerFile;
    if (!plan->model.chatTemplateFile.empty())
      le.chatTemplatePath =
          (std::filesystem::path(o.pack) / plan->model.chatTemplateFile)
              .string();
  } else {
    tp = cpu::TpLayout::fromRule(cfg, ranks);
  }
#else
  tp = cpu::TpLayout::fromRule(cfg, ranks);
#endif
  le.ranks = ranks;
  check(!o.hostComm || o.hostComm->size() == ranks, o.plan, ": the plan is "
        "for ", ranks, " Sparks but --world is ",
        o.hostComm ? o.hostComm->size() : 0,
        "; start one process per Spark of the plan");
  check(o.backend != "cuda" || ranks == 1 || o.deviceComm, "--backend cuda "
        "runs one rank per process and this run has ", ranks, " ranks: start "
        "them with glm-engine launch (one process per GPU), or use a 1-Spark "
        "plan, --sparks 1 or --backend cpu");
  if (le.chatTemplatePath.empty()) {
    auto p = std::filesystem::path(o.pack) / "chat_template.jinja";
    if (std::filesystem::exists(p))
      le.chatTemplatePath = p.string();
  }

  // The cuda backend reads the pack's bytes itself (quantized on the
  // device); only the cpu backend dequantizes to fp32 here.
  auto src = cpu::packWeightSource(*le.pack);
  std::shared_ptr<const cpu::ModelWeights> weights;
  if (o.backend != "cuda") {
    checkCpuBackendMemory(*le.pack, 1);
    std::unique_ptr<Progress> bar;
    weights = cpu::ModelWeights::load(cfg, *src, [&](int64_t d, int64_t n) {
      if (!bar)
        bar = std::make_unique<Progress>("loading weights", (uint64_t)n,
                                         "tensors");
      bar->update((uint64_t)d);
    });
    if (bar)
      bar->finish();
  }
  if (o.backend == "cuda") {
#ifdef GLM_HAVE_CUDA_BENCH
    std::vector<plan::KernelDef> planKernels;
#ifdef GLM_HAVE_PLANS
    if (plan)
      planKernels = plan->kernels;
#endif
    le.generator = cuda::makeCudaGenerator(
        *le.pack, tp, maxContext, planKernels,
        o.deviceComm ? o.deviceComm->rank() : 0, o.deviceComm,
        o.device >= 0 ? o.device : 0);
#endif
  } else {
    le.generator = makeCpuGenerator(std::move(weights), std::move(tp),
                                    maxContext, o.hostComm);
  }

  le.tokenizerPath = (std::filesystem::path(o.pack) / tokFile).string();
#ifdef GLM_HAVE_TOKENIZER
  if (std::filesystem::exists(le.tokenizerPath))
    le.tokenizer = Tokenizer::fromFile(le.tokenizerPath, cfg.vocabSize);
#endif
  return le;
}

} // namespace glm::rt
