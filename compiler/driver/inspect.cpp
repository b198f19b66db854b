//===- inspect.cpp - glmc inspect: what a plan costs, rank by rank --------===//
//
// Reads a plan (verified like the runtime reads it, but without pack hashes)
// and prints per rank and layer the fused kernels, weight bytes read per
// decoded token and the predicted time at a bandwidth, memory per rank and a
// summary; as text, json, Graphviz dot or one self-contained html page.
// Needs no MLIR.
//
//===----------------------------------------------------------------------===//
#include "compiler/driver/commands.h"
#include "plans/plan.h"
#include "plans/plan_inspect.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/cli_numbers.h"
#ifdef GLM_HAVE_EXEC
#include "runtime/exec/launch_bounds.h"
#endif
#ifdef GLM_HAVE_CODEGEN
#include "codegen/disassemble.h"
#endif

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include <unistd.h>

namespace glmc {
namespace {

struct InspectArgs {
  std::string plan;
  int rank = -1;
  std::string layer;
  std::string format = "text";
  double bandwidth = 273;
  double intRate = glm::plan::kDefaultIntRateTops;
  double opsPerWeight = glm::plan::kDefaultOpsPerWeight;
  std::string measured;
  std::string output;
  int64_t context = -1;
  double launchUs = 2.0, collectiveUs = 30.0;
  std::string graph;
  std::string target;
  bool bandwidthGiven = false, launchGiven = false, collectiveGiven = false;
};

/// The SASS profile of every kernel the model times (the selected graph of
/// each rank), compiled for the target's arch through the kernel cache;
/// progress on stderr, since a cold cache compiles for seconds a kernel.
std::map<std::string, glm::plan::SassKernel>
sassOfPlan(const glm::plan::Plan &plan, const glm::plan::InspectOptions &opt) {
  std::map<std::string, glm::plan::SassKernel> out;
#ifdef GLM_HAVE_CODEGEN
  std::vector<const glm::plan::KernelDef *> todo;
  for (const glm::plan::RankPlan &r : plan.ranks) {
    const glm::plan::GraphDef *g = nullptr;
    for (const glm::plan::GraphDef &x : r.graphs)
      if (opt.graph.empty() ? x.kind == glm::plan::GraphKind::Decode &&
                                  (!g || x.size < g->size)
                            : glm::plan::graphName(x) == opt.graph)
        g = &x;
    if (!g)
      continue;
    for (const glm::plan::OpDef &op : g->ops)
      if (op.kernel >= 0 && size_t(op.kernel) < plan.kernels.size()) {
        const glm::plan::KernelDef &k = plan.kernels[op.kernel];
        if (std::none_of(todo.begin(), todo.end(),
                         [&](const auto *t) { return t->name == k.name; }))
          todo.push_back(&k);
      }
  }
  const bool tty = ::isatty(2);
  for (size_t i = 0; i < todo.size(); ++i) {
    std::fprintf(stderr, "%sglmc inspect: SASS for %s, kernel %zu of %zu: %s%s",
                 tty ? "\r\033[K" : "", opt.target->arch.c_str(), i + 1,
                 todo.size(), todo[i]->name.c_str(), tty ? "" : "\n");
    out[todo[i]->name] = glm::codegen::sassProfile(*todo[i], opt.target->arch);
  }
  if (tty && !todo.empty())
    std::fprintf(stderr, "\n");
#else
  glm::rt::fail(opt.planPath, ": this glmc was built without the code "
                "generator, so --target cannot count kernel SASS");
#endif
  return out;
}

/// Renders dot to svg with Graphviz when `dot` is on PATH; "" otherwise.
std::string renderSvg(const std::string &dotText) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec)
    return "";
  fs::path in = dir / ("glmc-inspect-" + std::to_string(::getpid()) + ".dot");
  {
    std::ofstream f(in);
    f << dotText;
    if (!f)
      return "";
  }
  std::string cmd = "dot -Tsvg '" + in.string() + "' 2>/dev/null";
  std::string svg;
  if (FILE *p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
      svg.append(buf, n);
    if (::pclose(p) != 0)
      svg.clear();
  }
  fs::remove(in, ec);
  return svg;
}

int runInspect(const InspectArgs &a) {
  glm::plan::Plan plan = glm::plan::readPlan(a.plan);
  glm::plan::InspectOptions opt;
  opt.graph = a.graph;
  opt.rank = a.rank;
  opt.bandwidthGBps = a.bandwidth;
  opt.planPath = a.plan;
  if (!a.layer.empty()) {
    if (a.layer == "embed")
      opt.layer = -1;
    else if (a.layer == "head")
      opt.layer = int(plan.model.numLayers);
    else {
      std::optional<int64_t> v = glm::rt::parseInt64(a.layer);
      glm::rt::check(v && *v >= 0 && *v < plan.model.numLayers, "--layer '",
                     a.layer, "': give a layer number in 0..",
                     plan.model.numLayers - 1, ", 'embed' or 'head'");
      opt.layer = int(*v);
    }
  }
  glm::rt::check(a.bandwidth > 0, "--bandwidth must be positive (GB/s)");
  glm::rt::check(a.intRate > 0, "--int-rate must be positive (Tops/s)");
  glm::rt::check(a.opsPerWeight > 0, "--ops-per-weight must be positive");
  opt.intRateTops = a.intRate;
  opt.context = a.context;
  opt.launchUs = a.launchUs;
  opt.collectiveUs = a.collectiveUs;
  opt.graph = a.graph;
  opt.opsPerWeight = a.opsPerWeight;
  if (!a.target.empty()) {
    const glm::plan::Target *t = glm::plan::findTarget(a.target);
    glm::rt::check(t != nullptr, "--target '", a.target, "': give one of ",
                   glm::plan::targetNames());
    // The target's figures unless a flag overrides one.
    static glm::plan::Target target;
    target = *t;
    if (a.bandwidthGiven)
      target.bandwidthGBps = a.bandwidth;
    if (a.launchGiven) {
      target.graphLaunchUs = std::max(
          0.0, target.graphLaunchUs - (target.launchUs - a.launchUs));
      target.launchUs = a.launchUs;
    }
    if (a.collectiveGiven) { // one figure for every message size
      target.collectiveUs = a.collectiveUs;
      target.allReduceCurve.clear();
    }
    opt.target = &target;
    opt.bandwidthGBps = target.bandwidthGBps;
    opt.launchUs = target.launchUs;
    opt.collectiveUs = target.collectiveUs;
    opt.sass = sassOfPlan(plan, opt);
  }
  if (!a.measured.empty()) {
    glm::rt::check(std::filesystem::exists(a.measured), a.measured,
                   ": cannot open the measured-times file (write one with "
                   "glm-engine bench --plan PLAN)");
    std::string text = glm::rt::readFileBounded(
        a.measured, glm::rt::kMaxConfigBytes, "the measured-times file");
    opt.measuredUs = glm::plan::parseMeasured(text, a.measured);
    opt.measuredSource = a.measured;
  }
  if (a.rank >= 0)
    glm::rt::check(size_t(a.rank) < plan.ranks.size(), a.plan, ": --rank ",
                   a.rank, " is out of range (the plan has ",
                   plan.ranks.size(), " ranks)");

#ifdef GLM_HAVE_EXEC
  // Data edges where a writer's bytes meet a reader's (kernel footprints).
  // A plan the launch checks refuse (the runtime would not run it) is
  // still inspected, its edges by whole buffers.
  opt.regions = [&plan, noted = false](const glm::plan::RankPlan &r,
                                       const glm::plan::GraphDef &g) mutable {
    std::vector<std::vector<glm::plan::InspectRegion>> out;
    try {
      for (const auto &op : glm::rt::exec::opRegions(plan, r, g)) {
        out.emplace_back();
        for (const auto &x : op)
          out.back().push_back({x.buffer, x.begin, x.end});
      }
    } catch (const glm::rt::Error &e) {
      if (!noted)
        std::fprintf(stderr, "glmc: note: data edges by whole buffers: %s\n",
                     e.what());
      noted = true;
      out.clear();
    }
    return out;
  };
#endif
  std::string out;
  if (a.format == "text")
    out = glm::plan::inspectText(plan, opt);
  else if (a.format == "json")
    out = glm::plan::inspectJson(plan, opt);
  else if (a.format == "dot")
    out = glm::plan::inspectDot(plan, opt);
  else
    out = glm::plan::inspectHtml(plan, opt,
                                 renderSvg(glm::plan::inspectDot(plan, opt)));

  if (a.output.empty() || a.output == "-") {
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    std::ofstream f(a.output, std::ios::trunc);
    glm::rt::check(bool(f), a.output, ": cannot open for writing");
    f << out;
    glm::rt::check(bool(f), a.output, ": write failed");
  }
  return 0;
}

} // namespace

void addInspectCommand(CLI::App &app, int &rc) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App *cmd = app.add_subcommand(
      "inspect",
      "Show what a plan costs: per rank and layer the fused kernels, weight "
      "bytes read per decoded token and the predicted time at a bandwidth; "
      "memory per rank; predicted decode tok/s on N Sparks");
  cmd->add_option("PLAN", args->plan, "plan file from glmc compile")
      ->required();
  cmd->add_option("--rank", args->rank,
                  "show one rank (default: all; dot shows rank 0)")
      ->check(glm::rt::cliInt(0, 1023));
  cmd->add_option("--layer", args->layer,
                  "show one layer: a number, 'embed' or 'head' (default: all)");
  cmd->add_option("--format", args->format, "text | json | dot | html")
      ->check(CLI::IsMember({"text", "json", "dot", "html"}))
      ->capture_default_str();
  cmd->add_option("--bandwidth", args->bandwidth,
                  "memory bandwidth per rank in GB/s for predicted times "
                  "(DGX Spark: 273 nominal)")
      ->check(glm::rt::cliNumber(0, 1e6, /*loOpen=*/true))
      ->capture_default_str();
  cmd->add_option("--int-rate", args->intRate,
                  "integer throughput per rank in 1e12 ops/s for trellis "
                  "decode predictions (DGX Spark estimate 15, H200 ~17)")
      ->check(glm::rt::cliNumber(0, 1e6, /*loOpen=*/true))
      ->capture_default_str();
  cmd->add_option("--ops-per-weight", args->opsPerWeight,
                  "integer ops one decoded trellis weight costs")
      ->check(glm::rt::cliNumber(0, 1e6, /*loOpen=*/true))
      ->capture_default_str();
  cmd->add_option("--measured", args->measured,
                  "JSON of measured microseconds per launch by kernel name "
                  "({\"kernels\": {NAME: us}}, from glm-engine bench --plan): "
                  "shown next to the predictions with their ratio");
  cmd->add_option("--context", args->context,
                  "tokens in the KV cache for the modelled step: attention "
                  "reads min(T, the DSA top-k) KV rows and the indexer T "
                  "index-key rows per layer (default: the plan's max "
                  "context)")
      ->check(glm::rt::cliInt(0, int64_t(1) << 40));
  cmd->add_option("--launch-us", args->launchUs,
                  "modelled cost of each kernel launch in microseconds")
      ->check(glm::rt::cliNumber(0, 1e6))
      ->capture_default_str();
  cmd->add_option("--collective-us", args->collectiveUs,
                  "modelled cost of each collective of a multi-rank plan in "
                  "microseconds (Sparks over RoCE: ~30 per message of <= "
                  "32 KB)")
      ->check(glm::rt::cliNumber(0, 1e6))
      ->capture_default_str();
  cmd->add_option("--graph", args->graph,
                  "graph of the kernel table and the dot/html graph: "
                  "decode.B or prefill.T (default: the smallest decode "
                  "graph)");
  cmd->add_option("--target", args->target,
                  "time each kernel by the performance model of a target "
                  "(h200 | gb10): max(bytes / its bandwidth, busiest pipe, "
                  "issue) + launch, the pipes counted in the kernel's SASS "
                  "for the target's arch (NVRTC + nvdisasm, no GPU); its "
                  "bandwidth, launch and collective figures unless given")
      ->check(CLI::IsMember({"h200", "gb10"}));
  cmd->add_option("-o,--output", args->output, "write here instead of stdout");
  cmd->footer("Examples:\n  glmc inspect model.glmplan\n"
              "  glmc inspect model.glmplan --rank 1 --layer 3\n"
              "  glmc inspect model.glmplan --format dot | dot -Tsvg > g.svg\n"
              "  glmc inspect model.glmplan --format html -o plan.html\n"
              "  glmc inspect model.glmplan --measured bench.json\n"
              "  glmc inspect model.glmplan --context 8192 --graph decode.4\n"
              "  glmc inspect model.glmplan --target gb10 --format json");
  cmd->callback([args, cmd, &rc] {
    args->bandwidthGiven = cmd->count("--bandwidth") > 0;
    args->launchGiven = cmd->count("--launch-us") > 0;
    args->collectiveGiven = cmd->count("--collective-us") > 0;
    rc = runInspect(*args);
  });
}

} // namespace glmc
