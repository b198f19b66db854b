//===- setup.cpp - from command-line options to a ready Generator ---------===//
#include "runtime/engine/setup.h"

#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/command_line.h"
#include "runtime/base/host_memory.h"
#include "runtime/base/progress.h"
#include "runtime/cpu/model_weights.h"
#include "runtime/cpu/generator.h"
#include "runtime/cpu/tp.h"
#include "runtime/dist/comm.h"
#ifdef GLM_HAVE_CUDA_BENCH
#include "runtime/cuda/plan_backend.h"
#endif
#ifdef GLM_HAVE_PLANS
#include "plans/plan.h"
#include "runtime/exec/cpu_backend.h"
#include "runtime/exec/launch_bounds.h"
#include "runtime/exec/batching_generator.h"
#include "runtime/exec/plan_generator.h"
#endif
#ifdef GLM_HAVE_TOKENIZER
#include "runtime/serve/tokenizer.h"
#endif

#include "plans/engine_image.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace glm::rt {

void addEngineOptions(CLI::App &sub, EngineOptions &o) {
  // An engine written by `glmc compile --emit engine` carries its plan:
  // PLAN may be left out (plans/engine_image.h).
  const std::string self = plan::selfEmbeddedPlanPath();
  CLI::Option *planOpt = sub.add_option(
      "PLAN", o.plan,
      self.empty() ? "Plan file from `glmc compile` (`-` = no plan: run the "
                     "pack directly, emulating --sparks ranks)"
                   : "Plan file from `glmc compile`; default: the plan this "
                     "engine carries (`-` = no plan: run the pack directly)");
  if (self.empty())
    planOpt->required();
  else
    o.plan = self;
  sub.add_option("--pack", o.pack,
                 "Pack directory the plan was compiled for (HF, EXL3 or "
                 "exlr8 layout)")
      ->required();
  sub.add_option("--backend", o.backend,
                 "Executor: `cpu` runs the plan's graphs through the C++ twin "
                 "of each kernel (every rank of the plan in this process); "
                 "`cuda` runs them on one GPU (a build with "
                 "-DGLM_WITH_CUDA=ON); `reference` is the hand-written fp32/"
                 "fp64 forward the plan is checked against (works with PLAN "
                 "`-`). Default: cpu with a plan, reference with PLAN `-`")
      ->check(CLI::IsMember({"cpu", "cuda", "reference"}));
  sub.add_option("--trace", o.trace,
                 "Write one JSON line per kernel launch or collective the "
                 "plan executor runs ({rank, graph, op, kernel, grid, block, "
                 "bytes}) to FILE (cpu and cuda backends; on cuda it "
                 "launches op by op, as --no-cuda-graphs); one rank of "
                 "several processes (launch, --rank R --world N) writes "
                 "FILE with .rankR before its extension (t.rank1.jsonl)");
  sub.add_flag("--no-cuda-graphs", o.noCudaGraphs,
               "--backend cuda: launch each step op by op instead of "
               "replaying the CUDA graph captured at its first step "
               "(profilers that cannot see inside graphs)");
  sub.add_option("--prefill", o.prefill,
                 "How a prompt is fed: `chunked` runs it through the plan's "
                 "prefill graphs (glmc compile --prefill-chunks) a chunk at a "
                 "time, where at least half of a chunk's rows are "
                 "prompt tokens; what is left, and every prompt of a plan "
                 "without prefill graphs, goes token by token. `tokens`: "
                 "every prompt token as one decode step (for comparison)")
      ->check(CLI::IsMember({"chunked", "tokens"}))
      ->capture_default_str();
  sub.add_option("--draft", o.draft,
                 "`mtp`: draft --draft-tokens tokens per step with the "
                 "plan's MTP draft graph (glmc compile --draft mtp) and "
                 "verify them in one decode step of k + 1 rows; greedy "
                 "output is token for token the output without drafting, "
                 "sampled output keeps its distribution (speculative "
                 "sampling). `none`: one token per step")
      ->check(CLI::IsMember({"none", "mtp"}))
      ->capture_default_str();
  sub.add_option("--draft-tokens", o.draftTokens,
                 "Tokens drafted per step with --draft mtp (the plan needs a "
                 "decode batch of k + 1)")
      ->check(cliInt(1, 7))
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
  check(avail == 0 || need <= avail, "--backend reference dequantizes every "
        "weight of ", pack.dir(), " to fp32: that needs ", gibText(need),
        ranks, " of host memory and ", gibText(avail), " are available (",
        availableHostMemorySource(), "); loading it would exhaust the "
        "machine's memory. Run it on the GPU with --backend cuda (glmc "
        "compile sizes each Spark's memory), or use the cpu backend with a "
        "smaller pack");
}

std::string effectiveBackend(const std::string &backend,
                             const std::string &plan) {
  if (!backend.empty())
    return backend;
  return plan == "-" ? "reference" : "cpu";
}

/// Where rank `rank` of several processes writes --trace FILE: ".rankR"
/// before the extension of FILE's name ("t.jsonl" -> "t.rank1.jsonl"),
/// else after it; every rank writes its own file, none overwrites another's.
static std::string rankTracePath(const std::string &file, uint32_t rank) {
  const size_t slash = file.find_last_of('/');
  const size_t dot = file.find_last_of('.');
  const bool ext = dot != std::string::npos &&
                   (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".rank" + std::to_string(rank);
  return ext ? file.substr(0, dot) + tag + file.substr(dot) : file + tag;
}

#ifdef GLM_HAVE_PLANS
/// The plan executor for this process's ranks of `plan`: every rank with
/// the cpu backend unless a HostComm makes this process one rank; one rank
/// per process on cuda.
static std::unique_ptr<Generator>
makePlanEngine(const EngineOptions &o, std::shared_ptr<plan::Plan> plan,
               const ModelConfig &cfg, int64_t maxContext) {
  // A damaged plan is refused before any memory is sized or allocated.
  exec::checkLaunchBounds(*plan);
  // A GLM-5.3-Flash plan has prefill graphs on one rank (kda_prep +
  // kda_chunk); on several, or with KDA heads kda_chunk does not take, it
  // has decode graphs only and the generator feeds prompts token by token.
  if (o.prefill == "chunked" && !plan->ranks.empty()) {
    bool prefillGraphs = false, recurrent = false;
    for (const plan::GraphDef &g : plan->ranks[0].graphs)
      prefillGraphs |= g.kind == plan::GraphKind::Prefill;
    for (const plan::BufferDef &b : plan->ranks[0].buffers)
      recurrent |= b.kind == plan::BufferKind::KvCache &&
                   b.name.rfind("kda_state.", 0) == 0;
    if (recurrent && !prefillGraphs)
      std::fprintf(stderr,
                   "glm-engine: note: %s has no prefill graphs (KDA layers, "
                   "GLM-5.3-Flash, on several ranks or with heads kda_chunk "
                   "does not take): the prompt runs token by token, as "
                   "--prefill tokens\n",
                   o.plan.c_str());
  }
  if (o.maxBatch > 1) {
    check(o.draft != "mtp", "--max-batch ", o.maxBatch, " with --draft mtp: "
          "drafting runs one sequence at a time; use one of them");
    const bool oneProcess = !o.hostComm && !o.deviceComm &&
                            (plan->numRanks <= 1 || o.backend != "cuda");
    check(oneProcess,
          "--max-batch ", o.maxBatch, ": batching runs a plan whose ranks "
          "share this process (one rank, or --backend cpu without "
          "launch); ", o.plan, " has ", plan->numRanks, " ranks in separate "
          "processes: serve it with --max-batch 1");
  }
  std::vector<uint32_t> ranks;
  std::vector<std::unique_ptr<exec::Backend>> backends;
  std::unique_ptr<exec::Collectives> coll;
  if (o.backend == "cuda") {
#ifdef GLM_HAVE_CUDA_BENCH
    static std::unique_ptr<cuda::CudaDevice> device;
    device = std::make_unique<cuda::CudaDevice>(o.device >= 0 ? o.device : 0);
    const uint32_t r = o.deviceComm ? uint32_t(o.deviceComm->rank()) : 0;
    ranks.push_back(r);
    backends.push_back(cuda::makeCudaBackend(*plan, *device));
    coll = cuda::deviceCollectives(o.deviceComm);
#else
    fail("--backend cuda: this glm-engine was built without CUDA: rebuild "
         "with -DGLM_WITH_CUDA=ON");
#endif
  } else {
    if (o.hostComm) {
      ranks.push_back(uint32_t(o.hostComm->rank()));
      coll = exec::hostCommCollectives(o.hostComm);
    } else {
      for (uint32_t r = 0; r < plan->numRanks; ++r)
        ranks.push_back(r);
      coll = exec::inProcessCollectives();
    }
    // The arenas live in host memory: refuse before allocating what the
    // machine does not have (a Spark freezes rather than fails).
    uint64_t need = 0;
    for (uint32_t r : ranks)
      need += plan->ranks[r].arenaBytes;
    const uint64_t avail = availableHostMemory();
    check(avail == 0 || need <= avail, "--backend cpu holds the arenas of ",
          ranks.size(), " rank(s) of ", o.plan, " in host memory: ",
          gibText(need), " and ", gibText(avail), " are available (",
          availableHostMemorySource(), "); run it with --backend cuda on a "
          "GPU, or one rank per process (glm-engine launch)");
    for (size_t i = 0; i < ranks.size(); ++i)
      backends.push_back(exec::makeCpuBackend(*plan));
  }
  // This process's one rank when it runs one of several processes.
  const uint32_t firstRank = ranks.empty() ? 0 : ranks.front();
  auto ex = std::make_unique<exec::PlanExecutor>(
      plan, o.pack, std::move(ranks), std::move(backends), std::move(coll));
  ex->useGraphs(!o.noCudaGraphs);
  if (!o.trace.empty()) {
    // One rank of several processes (glm-engine launch, --rank/--world).
    const bool rankOfMany = o.hostComm || o.deviceComm;
    const std::string path =
        rankOfMany ? rankTracePath(o.trace, firstRank) : o.trace;
    auto out = std::make_shared<std::ofstream>(path);
    check(bool(*out), path, ": cannot write the trace file");
    if (rankOfMany)
      std::fprintf(stderr, "glm-engine: rank %u writes its trace to %s\n",
                   firstRank, path.c_str());
    ex->setTrace([out](const exec::TraceEvent &e) {
      *out << e.json() << '\n';
      out->flush();
    });
  }
  ex->load();
  if (o.maxBatch > 1)
    return exec::makeBatchingGenerator(std::move(ex), cfg, maxContext,
                                       o.backend, o.maxBatch,
                                       o.prefill == "chunked");
  return exec::makePlanGenerator(std::move(ex), cfg, maxContext, o.backend,
                                 o.prefill == "chunked",
                                 o.draft == "mtp" ? o.draftTokens : 0);
}
#endif

LoadedEngine loadEngine(const EngineOptions &opts) {
  EngineOptions o = opts;
  o.backend = effectiveBackend(o.backend, o.plan);
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
    if (!o.manifest.empty())
      ex.replanOverrides.push_back({"--manifest", o.manifest});
    plan = plan::readPlan(o.plan, ex);
    check(o.sparks == 0 || o.sparks == (int)plan->numRanks, o.plan,
          ": the plan is for ", plan->numRanks, " Sparks, --sparks says ",
          o.sparks, "; leave out --sparks (the plan sets it) or re-plan "
          "with: ",
          plan::replanCommand(*plan, o.pack, o.plan,
                              {{"--sparks", std::to_string(o.sparks)}}));
    check(o.maxContext == 0 || o.maxContext <= plan->model.maxContext,
          o.plan, ": --max-context ", o.maxContext, " exceeds the ",
          plan->model.maxContext, " tokens the plan's KV cache holds; leave "
          "out --max-context or re-plan with: ",
          plan::replanCommand(*plan, o.pack, o.plan,
                              {{"--max-context",
                                std::to_string(o.maxContext)}}));
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

#ifdef GLM_HAVE_PLANS
  if (o.backend != "reference") {
    check(plan.has_value(), "--backend ", o.backend, " runs a plan and "
          "PLAN is `-`: compile one with `",
          shellJoin([&] {
            std::vector<std::string> w = {"glmc", "compile", o.pack};
            if (o.sparks > 0)
              w.insert(w.end(), {"--sparks", std::to_string(o.sparks)});
            if (!o.manifest.empty())
              w.insert(w.end(), {"--manifest", o.manifest});
            if (o.maxContext > 0)
              w.insert(w.end(), {"--max-context",
                                 std::to_string(o.maxContext)});
            w.insert(w.end(), {"-o", "model.glmplan"});
            return w;
          }()),
          "`, or run the reference forward with --backend reference");
    le.generator = makePlanEngine(o, std::make_shared<plan::Plan>(
                                         std::move(*plan)),
                                  cfg, maxContext);
    le.tokenizerPath = (std::filesystem::path(o.pack) / tokFile).string();
#ifdef GLM_HAVE_TOKENIZER
    if (std::filesystem::exists(le.tokenizerPath))
      le.tokenizer = Tokenizer::fromFile(le.tokenizerPath);
#endif
    return le;
  }
#else
  check(o.backend == "reference", "--backend ", o.backend, " runs a plan: "
        "this glm-engine was built without plan support");
#endif
  check(o.draft == "none", "--draft ", o.draft, " drafts with the plan's "
        "MTP draft graph: give a plan compiled with glmc compile --draft mtp "
        "(the reference forward does not draft)");
  // The reference forward dequantizes every weight to fp32.
  auto src = cpu::packWeightSource(*le.pack);
  std::shared_ptr<const cpu::ModelWeights> weights;
  {
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
  le.generator = makeCpuGenerator(std::move(weights), std::move(tp),
                                  maxContext, o.hostComm);
  // Flash checkpoints carry a vision tower; prompts are text only for now.
  size_t vision = 0;
  for (const WeightInfo &w : le.pack->weights())
    vision += w.name.rfind("model.visual.", 0) == 0;
  if (vision)
    std::fprintf(stderr,
                 "glm-engine: note: %zu vision tensors (model.visual.*) are "
                 "not loaded: the vision tower is not run (text prompts "
                 "only)\n",
                 vision);

  le.tokenizerPath = (std::filesystem::path(o.pack) / tokFile).string();
#ifdef GLM_HAVE_TOKENIZER
  if (std::filesystem::exists(le.tokenizerPath))
    le.tokenizer = Tokenizer::fromFile(le.tokenizerPath, cfg.vocabSize);
#endif
  return le;
}

} // namespace glm::rt
