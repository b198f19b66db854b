//===- plan_inspect.cpp - text/json/dot/html views of a plan --------------===//
//
// Times are recomputed from bytes at the requested bandwidth (the plan's own
// predictions use the bandwidth it was compiled for), so `--bandwidth 243`
// answers "what if the Spark sustains 243 GB/s" without re-planning.
//
//===----------------------------------------------------------------------===//
#include "plans/plan_inspect.h"
#include "codegen/indexer_abi.h"
#include "runtime/base/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace glm::plan {

namespace {

double usAt(uint64_t bytes, double gbps) {
  return gbps > 0 ? double(bytes) / gbps / 1000.0 : 0.0;
}

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.2f KiB", double(bytes) / (1ull << 10));
  else
    std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string layerLabel(const Plan &plan, int32_t layer) {
  if (layer < 0)
    return "embed";
  if (plan.model.numLayers > 0 && layer >= plan.model.numLayers)
    return "head";
  return std::to_string(layer);
}

const char *kindLabel(const LayerSummary &l) {
  return l.layer < 0 ? "embed" : layerKindName(l.kind);
}

std::vector<const RankPlan *> selectedRanks(const Plan &plan,
                                            const InspectOptions &opt) {
  std::vector<const RankPlan *> out;
  if (opt.rank >= 0) {
    rt::check(size_t(opt.rank) < plan.ranks.size(), opt.planPath,
              ": --rank ", opt.rank, " is out of range (the plan has ",
              plan.ranks.size(), " ranks: 0..", plan.ranks.size() - 1, ")");
    out.push_back(&plan.ranks[opt.rank]);
  } else {
    for (const RankPlan &r : plan.ranks)
      out.push_back(&r);
  }
  return out;
}

bool layerSelected(const InspectOptions &opt, int32_t layer) {
  return opt.layer == INT_MIN || opt.layer == layer;
}

/// What the MTP layers (layer >= num_layers in bindings and buffers; the
/// head's summary row uses num_layers too, but no binding or buffer does)
/// cost one rank: bound, cached per sequence, read by no decode step.
struct MtpCost {
  uint64_t weightBytes = 0; // bytes in the weights buffer (widened norms)
  uint64_t kvBytes = 0;     // latent cache and index keys, every KV slot
  uint64_t bindings = 0;
  std::set<int32_t> layers;
  bool any() const { return bindings || kvBytes; }
};

MtpCost mtpCost(const Plan &plan, const RankPlan &r) {
  MtpCost c;
  if (plan.model.numLayers <= 0)
    return c;
  for (const WeightBinding &w : r.weights)
    if (w.layer >= plan.model.numLayers) {
      c.weightBytes += transformedBytes(w.transform, w.length);
      ++c.bindings;
      c.layers.insert(w.layer);
    }
  for (const BufferDef &b : r.buffers)
    if (b.kind == BufferKind::KvCache && b.layer >= plan.model.numLayers) {
      c.kvBytes += b.bytes;
      c.layers.insert(b.layer);
    }
  return c;
}

std::string mtpLayersLabel(const MtpCost &c) {
  std::string s;
  for (int32_t l : c.layers)
    s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

std::string joinNames(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &x : v)
    s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// What the plan carries for its kernels: "PTX + CUBIN", "PTX only: JIT
/// at the engine's first start", "no binaries: compiled with --no-nvrtc"
/// (mixed plans name both counts).
std::string kernelBinariesLabel(const Plan &plan) {
  size_t withCubin = 0, ptxOnly = 0;
  for (const KernelDef &k : plan.kernels)
    for (const KernelBinary &b : k.binaries)
      ++(b.cubin.empty() ? ptxOnly : withCubin);
  if (!withCubin && !ptxOnly)
    return "no binaries: compiled with --no-nvrtc";
  if (!ptxOnly)
    return "PTX + CUBIN";
  if (!withCubin)
    return "PTX only: JIT at the engine's first start";
  return std::to_string(withCubin) + " binaries with CUBIN, " +
         std::to_string(ptxOnly) + " PTX only";
}

/// The names of a layer's kernels with repeats folded: "a, b x2".
std::string foldNames(const std::vector<std::string> &v) {
  std::vector<std::pair<std::string, int>> runs;
  for (const std::string &x : v) {
    auto it = std::find_if(runs.begin(), runs.end(),
                           [&](const auto &p) { return p.first == x; });
    if (it == runs.end())
      runs.push_back({x, 1});
    else
      ++it->second;
  }
  std::string s;
  for (const auto &[n, c] : runs)
    s += (s.empty() ? "" : ", ") + n + (c > 1 ? " x" + std::to_string(c) : "");
  return s;
}

const GraphDef *smallestDecode(const RankPlan &r) {
  const GraphDef *best = nullptr;
  for (const GraphDef &g : r.graphs)
    if (g.kind == GraphKind::Decode && (!best || g.size < best->size))
      best = &g;
  return best;
}

/// opt.graph of `r`, else its smallest decode graph; a name the rank does
/// not have is refused listing the ones it has.
const GraphDef *selectedGraph(const RankPlan &r, const InspectOptions &opt) {
  if (opt.graph.empty())
    return smallestDecode(r);
  std::string names;
  for (const GraphDef &g : r.graphs) {
    if (graphName(g) == opt.graph)
      return &g;
    names += (names.empty() ? "" : ", ") + graphName(g);
  }
  rt::fail(opt.planPath, ": --graph ", opt.graph, " is not a graph of rank ",
           r.rank, " (it has ", names, ")");
}

/// The context the model runs at: opt.context, or the plan's max.
int64_t contextOf(const Plan &plan, const InspectOptions &opt) {
  return opt.context < 0 ? plan.model.maxContext
                         : std::min<int64_t>(opt.context, plan.model.maxContext);
}

/// KV / index-key bytes `op` (an op of `g`) reads at `context` tokens: the
/// attention kernels read the KV rows the step attends to (min(context,
/// the DSA top-k) when an indexer selected them), the indexer's score kernels
/// every index-key row. Row bytes come from the cache buffers (slots x max
/// context rows). GLM-5.3-Flash's KDA decode reads and writes each row's
/// fp32 recurrent state, whatever the context.
uint64_t contextBytes(const Plan &plan, const RankPlan &r, const GraphDef &g,
                      const OpDef &op, int64_t context) {
  if (op.kernel < 0 || size_t(op.kernel) >= plan.kernels.size() || context <= 0)
    return 0;
  const std::string &family = plan.kernels[op.kernel].templateName;
  const bool attention = family == "mla_core" || family == "mla_decode" ||
                         family == "mla_attn" || family == "mla_prefill" ||
                         family == "mla_scores" || family == "mla_values";
  // (indexer_scores_mma reads a key tile once per block of 128 query rows,
  // mostly from L2: counted once, as the others.)
  const bool scores = family == "indexer_scores" ||
                      family == "indexer_scores_ctx" ||
                      family == "indexer_scores_mma";
  // GLM-5.3-Flash's recurrent KDA state: each row reads and writes its
  // slot's fp32 state ("kda_state.L") once per step.
  if (family == "kda_decode") {
    int64_t slots = 1;
    if (auto it = plan.compileOptions.find("kv_slots");
        it != plan.compileOptions.end())
      slots = std::max<int64_t>(1, std::atoll(it->second.c_str()));
    uint64_t bytes = 0;
    for (const ArgDef &a : op.args)
      if (a.kind == ArgKind::Buffer && a.buffer >= 0 &&
          size_t(a.buffer) < r.buffers.size() &&
          r.buffers[a.buffer].name.rfind("kda_state.", 0) == 0)
        bytes += 2 * r.buffers[a.buffer].bytes / uint64_t(slots) *
                 std::max<uint32_t>(g.size, 1);
    return bytes;
  }
  if (!attention && !scores)
    return 0;
  int64_t slots = 1;
  if (auto it = plan.compileOptions.find("kv_slots");
      it != plan.compileOptions.end())
    slots = std::max<int64_t>(1, std::atoll(it->second.c_str()));
  const int64_t rows = slots * std::max<int64_t>(1, plan.model.maxContext);
  // The DSA selection the attention reads: the last dsa_select before it
  // (a full layer's indexer; the shared layers after it reuse its rows).
  int64_t topk = 0;
  for (const OpDef &o : g.ops) {
    if (&o == &op)
      break;
    if (o.kernel >= 0 && size_t(o.kernel) < plan.kernels.size() &&
        plan.kernels[o.kernel].templateName == "dsa_select")
      for (const ArgDef &a : o.args)
        if (a.kind == ArgKind::I32 && a.name == "k")
          topk = a.i;
  }
  uint64_t bytes = 0;
  for (const ArgDef &a : op.args) {
    if (a.kind != ArgKind::Buffer || a.buffer < 0 ||
        size_t(a.buffer) >= r.buffers.size())
      continue;
    const BufferDef &b = r.buffers[a.buffer];
    if (b.kind != BufferKind::KvCache)
      continue;
    const bool keys = b.name.rfind("index_keys", 0) == 0;
    const int64_t read =
        attention && !keys && topk > 0 ? std::min(context, topk) : context;
    bytes += uint64_t(read) * (b.bytes / uint64_t(rows));
  }
  return bytes;
}

/// A kernel compiled with one path per trellis width (template arg
/// "widths", e.g. "234", and a "stage": gu or down): each width's share of
/// the op's bytes, ascending widths, from the weights of the op's layer and
/// stage (a shared expert's whole, the routed experts' scaled to the op's
/// expected bytes). Empty for a single-path kernel.
std::vector<double> widthShares(const RankPlan &r, const KernelDef &k,
                                const OpDef &op) {
  auto widths = k.templateArgs.find("widths");
  auto stage = k.templateArgs.find("stage");
  if (widths == k.templateArgs.end() || widths->second.size() < 2 ||
      stage == k.templateArgs.end() || op.layer < 0)
    return {};
  const bool down = stage->second == "down";
  const size_t n = widths->second.size();
  std::vector<double> routed(n, 0.0), shared(n, 0.0);
  for (const WeightBinding &w : r.weights) {
    if (w.layer != op.layer || w.widthX2 == 0 || w.expert == -1)
      continue;
    const bool isDown = w.projection == Projection::Down;
    if (isDown != down ||
        (!isDown && w.projection != Projection::Gate &&
         w.projection != Projection::Up))
      continue;
    const size_t at = widths->second.find(char('0' + w.widthX2 / 2));
    if (w.widthX2 % 2 || at == std::string::npos)
      continue;
    (w.expert == -2 ? shared : routed)[at] += double(w.length);
  }
  double S = 0, R = 0;
  for (size_t i = 0; i < n; ++i)
    S += shared[i], R += routed[i];
  if (S + R <= 0)
    return {};
  const double f =
      R > 0 ? std::clamp((double(op.bytesRead) - S) / R, 0.0, 1.0) : 0.0;
  std::vector<double> share(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += share[i] = shared[i] + f * routed[i];
  if (sum <= 0)
    return {};
  for (double &x : share)
    x /= sum;
  return share;
}

/// One op of `g` by the model: its weight + context bytes and
/// max(bandwidth, integer) + launches.
struct OpCost {
  uint64_t bytes = 0, context = 0;
  std::map<int, double> widthBytes; // a multi-width kernel's bytes by K
  double bandwidthUs = 0, integerUs = 0, launchUs = 0, us = 0;
  LaunchPrediction model; // with a target: Σ over the op's launches
};
OpCost opCost(const Plan &plan, const RankPlan &r, const GraphDef &g,
              const OpDef &op, const InspectOptions &opt, int64_t context) {
  OpCost c;
  if (op.kernel < 0 || size_t(op.kernel) >= plan.kernels.size())
    return c;
  c.context = contextBytes(plan, r, g, op, context);
  c.bytes = op.bytesRead + c.context;
  c.bandwidthUs = usAt(c.bytes, opt.bandwidthGBps);
  c.integerUs = opt.intRateTops > 0 ? double(op.decodedWeights) *
                                          opt.opsPerWeight /
                                          (opt.intRateTops * 1e6)
                                    : 0.0;
  const uint32_t launches = std::max<uint32_t>(op.repeat, 1);
  const KernelDef &kernel = plan.kernels[op.kernel];
  const std::vector<double> shares = widthShares(r, kernel, op);
  for (size_t w = 0; w < shares.size(); ++w)
    c.widthBytes[kernel.templateArgs.at("widths")[w] - '0'] =
        shares[w] * double(c.bytes);
  if (opt.target) {
    // Each launch reads its share of the op's bytes.
    const KernelDef &k = plan.kernels[op.kernel];
    auto s = opt.sass.find(k.name);
    LaunchDims dims = op.launch.gridX ? op.launch : k.launch;
    if (k.templateName == "indexer_scores_ctx") {
      // Its grid is for the plan's context; at `context` the blocks past
      // the candidates return at once (codegen/indexer_abi.h).
      auto pool = k.templateArgs.find("pool");
      const int64_t P =
          pool == k.templateArgs.end() ? 1 : std::stoll(pool->second);
      dims.gridX = std::min(dims.gridX, glm::codegen::indexerCtxGridX(
                                            context / std::max<int64_t>(P, 1)));
    }
    const LaunchPrediction one =
        predictLaunch(*opt.target, s == opt.sass.end() ? nullptr : &s->second,
                      dims, c.bytes / launches, k.templateName, shares);
    c.model = one;
    for (size_t i = 0; i < kPipes; ++i) {
      c.model.warpInstr[i] *= launches;
      c.model.pipeUs[i] *= launches;
    }
    c.model.memoryUs *= launches;
    c.model.issueUs *= launches;
    c.model.launchUs *= launches;
    c.model.us *= launches;
    c.bandwidthUs = c.model.memoryUs;
    c.launchUs = c.model.launchUs;
    c.us = c.model.us;
    return c;
  }
  c.launchUs = launches * opt.launchUs;
  c.us = std::max(c.bandwidthUs, c.integerUs) + c.launchUs;
  return c;
}

std::string escapeDot(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\')
      o += '\\';
    o += c;
  }
  return o;
}

std::string escapeHtml(const std::string &s) {
  std::string o;
  for (char c : s) {
    switch (c) {
    case '<': o += "&lt;"; break;
    case '>': o += "&gt;"; break;
    case '&': o += "&amp;"; break;
    case '"': o += "&quot;"; break;
    default: o += c;
    }
  }
  return o;
}

/// The per-kernel table of one rank's batch-1 decode step (text).
std::string kernelTable(const Plan &plan, const RankPlan &r,
                        const InspectOptions &opt) {
  std::vector<KernelCost> costs = kernelCosts(plan, r, opt);
  if (costs.empty())
    return "";
  std::ostringstream os;
  const bool measured = !opt.measuredUs.empty();
  const StepCost step = stepCost(plan, r, opt);
  os << "  kernels of " << step.graph << " at context " << step.context;
  if (opt.target)
    os << " on " << opt.target->name << " (predicted = max(bytes / "
       << fixed(opt.bandwidthGBps, 0) << " GB/s, busiest pipe, issue) + "
       << fixed(opt.target->launchUs, 1) << " us per launch alone ("
       << fixed(opt.target->graphLaunchUs, 1) << " in the step's graph), "
       << "pipes from the " << opt.target->arch << " SASS over the family's "
       << "measured compute efficiency; bytes: weights + KV / index-key "
       << "rows; most time first)\n";
  else
    os << " (predicted = max(bytes / " << fixed(opt.bandwidthGBps, 0)
       << " GB/s, decoded weights x " << fixed(opt.opsPerWeight, 0)
       << " ops / " << fixed(opt.intRateTops, 1) << " Tops/s) + "
       << fixed(opt.launchUs, 1)
       << " us per launch; bytes: weights + KV / index-key rows; most time "
          "first)\n";
  char line[256];
  std::snprintf(line, sizeof line, "    %-52s %8s %14s %12s %-11s%s %6s\n",
                "kernel", "launches", "bytes", "predicted us", "bound",
                measured ? "   measured us   ratio" : "", "share");
  os << line;
  for (const KernelCost &c : costs) {
    std::string bound = c.predictedUs <= 0 ? "-"
                        : opt.target       ? c.bound
                        : c.integerBound   ? "int"
                                           : "bw";
    if (opt.target && !c.hasSass)
      bound += "*";
    if (!c.fits)
      bound += "!";
    std::snprintf(line, sizeof line, "    %-52s %8u %14llu %12s %-11s",
                  c.name.c_str(), c.launches, (unsigned long long)c.bytes,
                  fixed(c.predictedUs, 2).c_str(), bound.c_str());
    os << line;
    if (measured) {
      if (c.measuredUs < 0)
        std::snprintf(line, sizeof line, " %14s %7s", "-", "-");
      else
        std::snprintf(line, sizeof line, " %14s %7s",
                      fixed(c.measuredUs, 2).c_str(),
                      c.ratio > 0 ? fixed(c.ratio, 2).c_str() : "-");
      os << line;
    }
    os << " " << std::setw(5)
       << fixed(step.kernelUs > 0 ? 100.0 * c.predictedUs / step.kernelUs : 0,
                1)
       << "%\n";
  }
  os << "    step: " << fixed(step.stepUs, 1) << " us = kernels "
     << fixed(step.kernelUs, 1) << " us (" << step.launches << " launches, "
     << step.contextBytes << " context bytes) + " << step.collectives
     << " collectives, " << fixed(step.collectiveUs, 1) << " us\n";
  if (opt.target) {
    // Warp instructions of the step by pipe (the SASS counts the model
    // scaled), and the kernels it could not count or that do not fit.
    PipeCounts sum{};
    size_t noSass = 0, noFit = 0;
    for (const KernelCost &c : costs) {
      for (size_t i = 0; i < kPipes; ++i)
        sum[i] += c.warpInstr[i];
      noSass += !c.hasSass;
      noFit += !c.fits;
    }
    os << "    warp instructions by pipe:";
    for (size_t i = 0; i < kPipes; ++i)
      if (sum[i] > 0)
        os << " " << pipeName(Pipe(i)) << " " << fixed(sum[i] / 1e6, 2) << "M";
    os << "\n";
    if (noSass)
      os << "    * " << noSass << " kernel(s) without SASS: bytes and launch "
         << "only\n";
    if (noFit)
      os << "    ! " << noFit << " kernel(s) need more shared memory per "
         << "block than " << opt.target->name << " has ("
         << opt.target->sharedPerBlock << " B)\n";
  }
  if (measured) {
    // How much of the step the measurement covers (every launch is a plan
    // kernel, so a full profile covers 100%).
    unsigned kernels = 0, timed = 0, launches = 0, timedLaunches = 0;
    for (const KernelCost &c : costs) {
      ++kernels;
      launches += c.launches;
      if (c.measuredUs >= 0) {
        ++timed;
        timedLaunches += c.launches;
      }
    }
    os << "    measured: " << timed << " of " << kernels << " kernels, "
       << timedLaunches << " of " << launches << " launches ("
       << fixed(launches ? 100.0 * timedLaunches / launches : 0, 1)
       << "%)\n";
  }
  return os.str();
}

} // namespace

std::string humanBytes(uint64_t bytes) { return human(bytes); }

std::map<std::string, double> parseMeasured(const std::string &text,
                                            const std::string &source) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception &e) {
    rt::fail(source, ": not valid JSON (", e.what(),
             "); expected {\"kernels\": {\"KERNEL\": MICROSECONDS, ...}} "
             "as written by glm-engine bench --plan");
  }
  rt::check(j.is_object(), source,
            ": expected a JSON object {\"kernels\": {\"KERNEL\": "
            "MICROSECONDS, ...}}");
  const json &map = j.contains("kernels") ? j["kernels"] : j;
  rt::check(map.is_object(), source, ": \"kernels\" must be an object of "
                                     "kernel name -> microseconds per launch");
  std::map<std::string, double> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Metadata next to a flat map ("device", "plan") is not a kernel.
    if (&map == &j && !it.value().is_number())
      continue;
    rt::check(it.value().is_number(), source, ": kernel '", it.key(),
              "' has no number of microseconds (", it.value().dump(), ")");
    double us = it.value().get<double>();
    rt::check(us >= 0, source, ": kernel '", it.key(),
              "' has a negative time (", us, " us)");
    out[it.key()] = us;
  }
  return out;
}

std::vector<KernelCost> kernelCosts(const Plan &plan, const RankPlan &r,
                                    const InspectOptions &opt) {
  std::vector<KernelCost> out;
  const GraphDef *g = selectedGraph(r, opt);
  if (!g)
    return out;
  const int64_t context = contextOf(plan, opt);
  std::map<int32_t, size_t> at; // kernel index → out index
  for (const OpDef &op : g->ops) {
    if (op.kernel < 0 || size_t(op.kernel) >= plan.kernels.size() ||
        !layerSelected(opt, op.layer))
      continue;
    auto [it, fresh] = at.try_emplace(op.kernel, out.size());
    if (fresh) {
      KernelCost c;
      c.name = plan.kernels[op.kernel].name;
      c.family = plan.kernels[op.kernel].templateName;
      out.push_back(c);
    }
    KernelCost &c = out[it->second];
    const OpCost oc = opCost(plan, r, *g, op, opt, context);
    c.launches += std::max<uint32_t>(op.repeat, 1);
    c.bytes += oc.bytes;
    c.contextBytes += oc.context;
    c.decodedWeights += op.decodedWeights;
    c.bandwidthUs += oc.bandwidthUs;
    c.integerUs += oc.integerUs;
    c.launchUs += oc.launchUs;
    c.predictedUs += oc.us;
    for (const auto &[K, b] : oc.widthBytes)
      c.widthBytes[K] += b;
    if (opt.target) {
      for (size_t i = 0; i < kPipes; ++i) {
        c.warpInstr[i] += oc.model.warpInstr[i];
        c.pipeUs[i] += oc.model.pipeUs[i];
      }
      c.issueUs += oc.model.issueUs;
      c.efficiency = oc.model.efficiency;
      c.fits = c.fits && oc.model.fits;
      c.hasSass = opt.sass.count(c.name) > 0;
    }
  }
  for (KernelCost &c : out) {
    c.integerBound = c.integerUs > c.bandwidthUs;
    c.bound = c.predictedUs <= 0 ? "none"
              : c.integerBound   ? "integer"
                                 : "bandwidth";
    if (opt.target) {
      // The largest of the summed terms names the bound.
      double best = c.bandwidthUs;
      c.bound = "memory";
      for (size_t i = 0; i < kPipes; ++i)
        if (c.pipeUs[i] / c.efficiency > best) {
          best = c.pipeUs[i] / c.efficiency;
          c.bound = pipeName(Pipe(i));
        }
      if (c.issueUs / c.efficiency > best) {
        best = c.issueUs / c.efficiency;
        c.bound = "issue";
      }
      if (c.launchUs > best)
        c.bound = "launch";
    }
    auto m = opt.measuredUs.find(c.name);
    if (m != opt.measuredUs.end()) {
      c.measuredUs = m->second * c.launches;
      c.ratio = c.predictedUs > 0 ? c.measuredUs / c.predictedUs : 0.0;
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelCost &a, const KernelCost &b) {
                     return a.predictedUs > b.predictedUs;
                   });
  return out;
}

StepCost stepCost(const Plan &plan, const RankPlan &r,
                  const InspectOptions &opt) {
  StepCost s;
  const GraphDef *g = selectedGraph(r, opt);
  if (!g)
    return s;
  s.graph = graphName(*g);
  s.rows = std::max<uint32_t>(g->size, 1);
  s.context = contextOf(plan, opt);
  for (const KernelCost &c : kernelCosts(plan, r, opt)) {
    // Inside the step's CUDA graph a launch costs less than alone.
    s.kernelUs += c.predictedUs;
    if (opt.target)
      s.kernelUs -= c.launches * (opt.target->launchUs -
                                  opt.target->graphLaunchUs);
    s.launches += c.launches;
    s.contextBytes += c.contextBytes;
  }
  if (plan.numRanks > 1)
    for (const OpDef &op : g->ops)
      if (op.collective >= 0 && layerSelected(opt, op.layer)) {
        ++s.collectives;
        // With a target, by message size: the graph's rows of the
        // collective's elements.
        const CollectiveDef *cd =
            size_t(op.collective) < r.collectives.size()
                ? &r.collectives[op.collective]
                : nullptr;
        s.collectiveUs +=
            opt.target && cd
                ? allReduceUs(*opt.target,
                              cd->elements * dtypeBytes(cd->dtype) *
                                  std::max<uint32_t>(g->size, 1))
                : opt.collectiveUs;
      }
  s.stepUs = s.kernelUs + s.collectiveUs;
  return s;
}

InspectSummary summarize(const Plan &plan, double bandwidthGBps) {
  InspectSummary s;
  for (const RankPlan &r : plan.ranks) {
    s.bytesPerTokenPerRank.push_back(r.bytesPerToken);
    s.bytesPerTokenTotal += r.bytesPerToken;
    if (r.bytesPerToken > s.maxRankBytesPerToken) {
      s.maxRankBytesPerToken = r.bytesPerToken;
      s.slowestRank = r.rank;
    }
  }
  s.predictedStepUs = usAt(s.maxRankBytesPerToken, bandwidthGBps);
  s.predictedTokPerS = s.predictedStepUs > 0 ? 1e6 / s.predictedStepUs : 0;
  return s;
}

std::string inspectText(const Plan &plan, const InspectOptions &opt) {
  const double bw = opt.bandwidthGBps;
  std::ostringstream os;
  os << "plan " << (opt.planPath.empty() ? "-" : opt.planPath) << ": schema "
     << plan.schemaMajor << "." << plan.schemaMinor << ", runtime ABI "
     << plan.runtimeAbi << ", " << plan.compilerVersion << "\n";
  os << "model " << plan.model.modelType << " (" << plan.model.layout;
  if (!plan.model.manifest.empty())
    os << ", manifest " << plan.model.manifest;
  os << "): " << plan.model.numLayers << " layers, hidden "
     << plan.model.hiddenSize << ", vocab " << plan.model.vocabSize
     << ", context " << plan.model.maxContext << " (kv "
     << dtypeName(plan.model.kvDtype) << ")\n";
  os << plan.numRanks << " rank(s), archs " << joinNames(plan.targetArchs)
     << ", " << plan.kernels.size() << " distinct kernels ("
     << kernelBinariesLabel(plan) << "), times at " << fixed(bw, 0)
     << " GB/s\n";
  // What the compile was told (glmc compile's options the plan records,
  // the launch tunings among them).
  if (!plan.compileOptions.empty()) {
    os << "compiled with";
    for (const auto &[k, v] : plan.compileOptions)
      if (k != "command")
        os << " " << k << "=" << v;
    os << "\n";
  }
  // The command that made the plan, pasteable (plans since it is recorded).
  if (auto c = plan.compileOptions.find("command");
      c != plan.compileOptions.end())
    os << "command: " << c->second << "\n";

  for (const RankPlan *r : selectedRanks(plan, opt)) {
    os << "\nrank " << r->rank << "\n";
    os << "  layer  kind   bytes/token      predicted us  fused kernels\n";
    for (const LayerSummary &l : r->layers) {
      if (!layerSelected(opt, l.layer))
        continue;
      char line[128];
      std::snprintf(line, sizeof line, "  %-6s %-6s %-16llu %12s  ",
                    layerLabel(plan, l.layer).c_str(), kindLabel(l),
                    (unsigned long long)l.bytesPerToken,
                    fixed(usAt(l.bytesPerToken, bw), 2).c_str());
      os << line << foldNames(l.kernels) << "\n";
    }
    // The MTP layers: in the memory plan, not in the decode step.
    if (const MtpCost mc = mtpCost(plan, *r);
        mc.any() && opt.layer == INT_MIN) {
      char line[128];
      std::snprintf(line, sizeof line, "  %-6s %-6s %-16llu %12s  ", "mtp",
                    "moe", 0ull, fixed(0, 2).c_str());
      os << line << "(layer " << mtpLayersLabel(mc)
         << ", not read per decoded token) weights " << human(mc.weightBytes)
         << " (" << mc.bindings << " bindings), kv cache " << human(mc.kvBytes)
         << "\n";
    }
    // Activation buffers share arena space by liveness: their sum is an
    // upper bound, the arena is what the rank allocates.
    os << "  memory: weights " << human(r->weightBytes)
       << ", activation buffers " << human(r->activationBytes)
       << " (sum; they share space), kv cache " << human(r->kvBytes)
       << ", arena " << human(r->arenaBytes);
    if (plan.memoryPerRank)
      os << " of " << human(plan.memoryPerRank) << " budget";
    os << "\n  per decoded token: " << r->bytesPerToken << " bytes ("
       << human(r->bytesPerToken) << "), " << fixed(usAt(r->bytesPerToken, bw), 1)
       << " us\n";
    os << kernelTable(plan, *r, opt);
  }
  if (!opt.measuredUs.empty()) {
    std::string unknown;
    for (const auto &[name, us] : opt.measuredUs)
      if (std::none_of(plan.kernels.begin(), plan.kernels.end(),
                       [&](const KernelDef &k) { return k.name == name; }))
        unknown += (unknown.empty() ? "" : ", ") + name;
    if (!unknown.empty())
      os << "\nmeasured kernels not in this plan (ignored): " << unknown
         << "\n";
  }

  const InspectSummary s = summarize(plan, bw);
  os << "\nsummary\n";
  for (size_t i = 0; i < s.bytesPerTokenPerRank.size(); ++i)
    os << "  rank " << i << ": " << s.bytesPerTokenPerRank[i]
       << " bytes/token\n";
  os << "  total: " << s.bytesPerTokenTotal << " bytes/token over "
     << plan.numRanks << " rank(s) (" << human(s.bytesPerTokenTotal) << ")\n";
  os << "  predicted decode: " << fixed(s.predictedTokPerS, 1) << " tok/s on "
     << plan.numRanks << " Spark(s) at " << fixed(bw, 0)
     << " GB/s (step " << fixed(s.predictedStepUs, 1)
     << " us, bound by rank " << s.slowestRank
     << "; weight reads only, before collectives and launch gaps)\n";
  // The model: every kernel's max(bytes incl. context reads, integer work)
  // plus launches, plus collectives; the slowest rank bounds the step (of
  // every layer, whatever --layer shows).
  InspectOptions whole = opt;
  whole.layer = INT_MIN;
  StepCost worst;
  for (const RankPlan &r : plan.ranks) {
    StepCost c = stepCost(plan, r, whole);
    if (c.stepUs > worst.stepUs)
      worst = c;
  }
  if (worst.stepUs > 0) {
    std::ostringstream step;
    step << "step " << fixed(worst.stepUs, 1) << " us: kernels "
         << fixed(worst.kernelUs, 1) << " us incl. " << human(worst.contextBytes)
         << " of KV / index-key reads and " << worst.launches << " launches x "
         << fixed(opt.target ? opt.target->graphLaunchUs : opt.launchUs, 1)
         << " us, " << worst.collectives << " collectives "
         << fixed(worst.collectiveUs, 1)
         << " us; --context, --launch-us, --collective-us";
    os << "  modelled " << worst.graph << " at context " << worst.context
       << ": ";
    if (worst.rows > 1) // R rows give R tokens: R sequences or R prompt tokens
      os << fixed(worst.rows * 1e6 / worst.stepUs, 1) << " tok/s over its "
         << worst.rows << " rows, " << fixed(1e6 / worst.stepUs, 1)
         << " a sequence ("
         << (opt.target ? "the efficiencies are calibrated on batch-1 steps; "
                          "docs/perf.md \"Session 26\" has the model against "
                          "measured batch 2-8 steps; "
                        : "")
         << step.str() << ")\n";
    else
      os << fixed(1e6 / worst.stepUs, 1) << " tok/s (" << step.str() << ")\n";
  }
  return os.str();
}

std::string inspectJson(const Plan &plan, const InspectOptions &opt) {
  using nlohmann::json;
  const double bw = opt.bandwidthGBps;
  json j;
  j["plan"] = opt.planPath;
  j["schema"] = std::to_string(plan.schemaMajor) + "." +
                std::to_string(plan.schemaMinor);
  j["runtime_abi"] = plan.runtimeAbi;
  j["compiler_version"] = plan.compilerVersion;
  j["compile_options"] = plan.compileOptions;
  if (auto c = plan.compileOptions.find("command");
      c != plan.compileOptions.end())
    j["command"] = c->second;
  j["num_ranks"] = plan.numRanks;
  j["target_archs"] = plan.targetArchs;
  j["bandwidth_gbps"] = bw;
  j["int_rate_tops"] = opt.intRateTops;
  j["ops_per_weight"] = opt.opsPerWeight;
  if (opt.target) {
    const Target &t = *opt.target;
    json rate = json::object();
    for (size_t i = 0; i < kPipes; ++i)
      if (t.rate[i] > 0)
        rate[pipeName(Pipe(i))] = t.rate[i];
    j["target"] = {{"name", t.name},
                   {"arch", t.arch},
                   {"description", t.description},
                   {"sms", t.sms},
                   {"clock_ghz", t.clockGHz},
                   {"bandwidth_gbps", t.bandwidthGBps},
                   {"per_sm_gbps", t.perSmGBps},
                   {"results_per_clock_per_sm", rate},
                   {"issue_per_clock_per_sm", t.issuePerSm},
                   {"shared_per_block", t.sharedPerBlock},
                   {"launch_us", t.launchUs},
                   {"graph_launch_us", t.graphLaunchUs},
                   {"collective_us", t.collectiveUs}};
  }
  if (!opt.measuredUs.empty())
    j["measured"] = opt.measuredSource;
  j["hashes"] = {{"config", plan.configHash},
                 {"manifest", plan.manifestHash},
                 {"index", plan.indexHash}};
  j["model"] = {{"model_type", plan.model.modelType},
                {"layout", plan.model.layout},
                {"manifest", plan.model.manifest},
                {"num_layers", plan.model.numLayers},
                {"hidden_size", plan.model.hiddenSize},
                {"vocab_size", plan.model.vocabSize},
                {"max_context", plan.model.maxContext},
                {"kv_dtype", dtypeName(plan.model.kvDtype)},
                {"active_weight_bytes", plan.model.activeWeightBytes}};
  json kernels = json::array();
  for (const KernelDef &k : plan.kernels) {
    json archs = json::array(), binaries = json::array();
    for (const KernelBinary &b : k.binaries) {
      archs.push_back(b.arch);
      binaries.push_back({{"arch", b.arch},
                          {"ptx_bytes", b.ptx.size()},
                          {"cubin_bytes", b.cubin.size()}});
    }
    kernels.push_back({{"name", k.name},
                       {"template", k.templateName},
                       {"args", k.templateArgs},
                       {"source_hash", k.sourceHash},
                       {"archs", archs},
                       {"binaries", binaries}});
  }
  j["kernels"] = kernels;
  json ranks = json::array();
  for (const RankPlan *r : selectedRanks(plan, opt)) {
    json layers = json::array();
    for (const LayerSummary &l : r->layers) {
      if (!layerSelected(opt, l.layer))
        continue;
      layers.push_back({{"layer", l.layer},
                        {"kind", layerKindName(l.kind)},
                        {"bytes_per_token", l.bytesPerToken},
                        {"predicted_us", usAt(l.bytesPerToken, bw)},
                        {"kernels", l.kernels},
                        {"ops", l.ops}});
    }
    json kcost = json::array();
    for (const KernelCost &c : kernelCosts(plan, *r, opt)) {
      json k = {{"name", c.name},
                {"template", c.family},
                {"launches", c.launches},
                {"bytes", c.bytes},
                {"decoded_weights", c.decodedWeights},
                {"bandwidth_us", c.bandwidthUs},
                {"integer_us", c.integerUs},
                {"context_bytes", c.contextBytes},
                {"launch_us", c.launchUs},
                {"predicted_us", c.predictedUs},
                {"bound", c.bound}};
      if (opt.target) {
        json pipes = json::object(), pipeUs = json::object();
        for (size_t i = 0; i < kPipes; ++i)
          if (c.warpInstr[i] > 0) {
            pipes[pipeName(Pipe(i))] = c.warpInstr[i];
            pipeUs[pipeName(Pipe(i))] = c.pipeUs[i];
          }
        k["warp_instructions"] = pipes;
        k["pipe_us"] = pipeUs;
        k["issue_us"] = c.issueUs;
        k["compute_efficiency"] = c.efficiency;
        k["memory_us"] = c.bandwidthUs;
        k["sass"] = c.hasSass;
        k["fits"] = c.fits;
      }
      if (!c.widthBytes.empty()) {
        json wb = json::object();
        for (const auto &[K, b] : c.widthBytes)
          wb[std::to_string(K)] = b;
        k["width_bytes"] = wb;
      }
      if (c.measuredUs >= 0) {
        k["measured_us"] = c.measuredUs;
        k["ratio"] = c.ratio;
      }
      kcost.push_back(k);
    }
    // Every graph op for op, with the kernel names `glm-engine run
    // --trace` prints for what actually ran.
    json graphs = json::array();
    for (const GraphDef &g : r->graphs) {
      json ops = json::array();
      for (const OpDef &o : g.ops) {
        if (!layerSelected(opt, o.layer))
          continue;
        const LaunchDims &d =
            o.launch.gridX || o.kernel < 0 ? o.launch
                                           : plan.kernels[o.kernel].launch;
        json op = {{"name", o.name},
                   {"kernel", o.kernel >= 0
                                  ? plan.kernels[o.kernel].name
                                  : o.collective >= 0
                                        ? std::string(collectiveKindName(
                                              r->collectives[o.collective]
                                                  .kind))
                                        : std::string()},
                   {"layer", o.layer},
                   {"repeat", o.repeat},
                   {"programmatic_launch", o.programmaticLaunch},
                   {"grid", {d.gridX, d.gridY, d.gridZ}},
                   {"block", {d.blockX, d.blockY, d.blockZ}},
                   {"bytes", o.bytesRead}};
        ops.push_back(op);
      }
      graphs.push_back({{"name", graphName(g)},
                        {"kind", graphKindName(g.kind)},
                        {"size", g.size},
                        {"ops", ops}});
    }
    const MtpCost mc = mtpCost(plan, *r);
    ranks.push_back({{"rank", r->rank},
                     {"mtp",
                      {{"layers", mc.layers},
                       {"weights", mc.weightBytes},
                       {"bindings", mc.bindings},
                       {"kv_cache", mc.kvBytes},
                       {"bytes_per_token", 0}}},
                     {"graphs", graphs},
                     {"kernel_costs", kcost},
                     {"memory",
                      {{"weights", r->weightBytes},
                       {"activations", r->activationBytes},
                       {"kv_cache", r->kvBytes},
                       {"arena", r->arenaBytes},
                       {"budget", plan.memoryPerRank}}},
                     {"bytes_per_token", r->bytesPerToken},
                     {"predicted_us", usAt(r->bytesPerToken, bw)},
                     {"layers", layers}});
  }
  j["ranks"] = ranks;
  const InspectSummary s = summarize(plan, bw);
  j["summary"] = {{"bytes_per_token_per_rank", s.bytesPerTokenPerRank},
                  {"bytes_per_token_total", s.bytesPerTokenTotal},
                  {"max_rank_bytes_per_token", s.maxRankBytesPerToken},
                  {"slowest_rank", s.slowestRank},
                  {"predicted_step_us", s.predictedStepUs},
                  {"predicted_tok_per_s", s.predictedTokPerS}};
  // The model (kernels with context reads, launches, collectives) per
  // rank; the slowest bounds the step.
  json modelled = json::array();
  double worstUs = 0;
  uint32_t rows = 1;
  InspectOptions whole = opt;
  whole.layer = INT_MIN;
  for (const RankPlan &r : plan.ranks) {
    const StepCost c = stepCost(plan, r, whole);
    worstUs = std::max(worstUs, c.stepUs);
    rows = c.rows;
    modelled.push_back({{"rank", r.rank},
                        {"graph", c.graph},
                        {"rows", c.rows},
                        {"context", c.context},
                        {"kernel_us", c.kernelUs},
                        {"launches", c.launches},
                        {"context_bytes", c.contextBytes},
                        {"collectives", c.collectives},
                        {"collective_us", c.collectiveUs},
                        {"step_us", c.stepUs}});
  }
  j["summary"]["modelled"] = modelled;
  j["summary"]["modelled_step_us"] = worstUs;
  // A sequence's tokens a second, and all the graph's rows' together.
  j["summary"]["modelled_tok_per_s"] = worstUs > 0 ? 1e6 / worstUs : 0.0;
  j["summary"]["modelled_rows"] = rows;
  j["summary"]["modelled_rows_tok_per_s"] =
      worstUs > 0 ? rows * 1e6 / worstUs : 0.0;
  j["launch_us"] = opt.launchUs;
  j["collective_us"] = opt.collectiveUs;
  return j.dump(2) + "\n";
}

std::vector<std::pair<size_t, size_t>>
dataEdges(const RankPlan &r, const GraphDef &g, const InspectOptions &opt) {
  using Span = std::pair<uint64_t, uint64_t>;
  std::vector<std::vector<InspectRegion>> regions;
  if (opt.regions)
    regions = opt.regions(r, g);
  // An op's spans on buffer b: its regions there, or the whole buffer.
  auto spans = [&](size_t op, uint32_t b) {
    std::vector<Span> v;
    if (op < regions.size())
      for (const InspectRegion &x : regions[op])
        if (x.buffer == b && x.end > x.begin)
          v.push_back({x.begin, x.end});
    if (v.empty() && (regions.empty() || g.ops[op].kernel < 0))
      v.push_back({0, b < r.buffers.size() ? r.buffers[b].bytes : 0});
    return v;
  };
  // Removes `w` from every span of `rest`; true when something overlapped.
  auto subtract = [](std::vector<Span> &rest, const std::vector<Span> &w) {
    bool met = false;
    for (const Span &c : w) {
      std::vector<Span> next;
      for (const Span &s : rest) {
        if (c.second <= s.first || s.second <= c.first) {
          next.push_back(s);
          continue;
        }
        met = true;
        if (s.first < c.first)
          next.push_back({s.first, c.first});
        if (c.second < s.second)
          next.push_back({c.second, s.second});
      }
      rest = std::move(next);
    }
    return met;
  };
  // A collective works in place on its buffer: it reads what it writes.
  auto inPlace = [&](size_t i, std::vector<uint32_t> v) {
    const int32_t c = g.ops[i].collective;
    if (g.ops[i].kernel < 0 && c >= 0 && size_t(c) < r.collectives.size() &&
        r.collectives[c].buffer >= 0)
      v.push_back(uint32_t(r.collectives[c].buffer));
    return v;
  };
  // Spans in arena bytes: buffers may alias (an all-reduce's input and
  // output share their bytes).
  auto arenaSpans = [&](size_t op, const std::vector<uint32_t> &bufs) {
    std::vector<Span> v;
    for (uint32_t b : bufs) {
      const uint64_t base = b < r.buffers.size() ? r.buffers[b].arenaOffset : 0;
      for (const Span &x : spans(op, b))
        v.push_back({base + x.first, base + x.second});
    }
    return v;
  };
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    std::vector<Span> rest = arenaSpans(i, inPlace(i, g.ops[i].inputs));
    for (size_t j = i; j-- > 0 && !rest.empty();)
      if (subtract(rest, arenaSpans(j, inPlace(j, g.ops[j].outputs))))
        edges.push_back({j, i});
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  return edges;
}

std::string inspectDot(const Plan &plan, const InspectOptions &opt) {
  const int rank = opt.rank < 0 ? 0 : opt.rank;
  InspectOptions one = opt;
  one.rank = rank;
  const RankPlan &r = *selectedRanks(plan, one).front();
  const GraphDef *g = selectedGraph(r, opt);
  std::ostringstream os;
  os << "digraph \"rank" << rank << "_decode\" {\n"
     << "  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", "
        "fontsize=10];\n";
  os << "  label=\"rank " << rank << " decode"
     << (g ? " batch " + std::to_string(g->size) : std::string(" (none)"))
     << "\";\n";
  if (!g) {
    os << "}\n";
    return os.str();
  }
  std::map<int32_t, std::vector<size_t>> byLayer;
  for (size_t i = 0; i < g->ops.size(); ++i)
    if (layerSelected(opt, g->ops[i].layer))
      byLayer[g->ops[i].layer].push_back(i);
  for (const auto &[layer, ops] : byLayer) {
    os << "  subgraph \"cluster_" << layer << "\" {\n    label=\"layer "
       << layerLabel(plan, layer) << "\";\n";
    for (size_t i : ops) {
      const OpDef &op = g->ops[i];
      std::string kernel =
          op.kernel >= 0 ? plan.kernels[op.kernel].name : opKindName(op.kind);
      os << "    op" << i << " [label=\"" << escapeDot(op.name) << "\\n"
         << escapeDot(kernel);
      if (op.bytesRead)
        os << "\\n" << human(op.bytesRead) << ", "
           << fixed(usAt(op.bytesRead, opt.bandwidthGBps), 2) << " us";
      os << "\"";
      if (op.collective >= 0)
        os << ", shape=ellipse";
      os << "];\n";
    }
    os << "  }\n";
  }
  const std::vector<std::pair<size_t, size_t>> edges = dataEdges(r, *g, opt);
  for (const auto &[from, to] : edges)
    if (layerSelected(opt, g->ops[from].layer) &&
        layerSelected(opt, g->ops[to].layer))
      os << "  op" << from << " -> op" << to << ";\n";
  os << "}\n";
  return os.str();
}

namespace {

/// Modelled µs of each op of `r`'s selected graph, and which earlier op
/// wrote each buffer it reads (the data edges of the dot graph).
struct OpRow {
  size_t index = 0;
  OpCost cost;
  std::vector<size_t> from; // ops whose outputs this op reads
};
std::vector<OpRow> opRows(const Plan &plan, const RankPlan &r,
                          const GraphDef &g, const InspectOptions &opt) {
  const int64_t context = contextOf(plan, opt);
  std::vector<OpRow> rows;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    OpRow row;
    row.index = i;
    row.cost = opCost(plan, r, g, g.ops[i], opt, context);
    rows.push_back(row);
  }
  for (const auto &[from, to] : dataEdges(r, g, opt))
    rows[to].from.push_back(from);
  return rows;
}

/// One layer's ops as a small drawn graph: a box per op in execution order,
/// filled by its share of the layer's modelled time (white to orange), and
/// its data edges (dataEdges) as arcs on the right; an op that reads from
/// another layer gets an arrow in from the left.
std::string layerGraphSvg(const Plan &plan, const GraphDef &g,
                          const std::vector<OpRow> &rows, int32_t layer,
                          double layerUs) {
  std::vector<size_t> ops;
  std::map<size_t, size_t> slot;
  for (const OpRow &row : rows)
    if (g.ops[row.index].layer == layer) {
      slot[row.index] = ops.size();
      ops.push_back(row.index);
    }
  if (ops.empty())
    return "";
  const int rowH = 22, boxW = 330, left = 24, arcs = 150;
  const int height = int(ops.size()) * rowH + 8;
  std::ostringstream os;
  os << "<svg class=layergraph width=\"" << left + boxW + arcs
     << "\" height=\"" << height << "\" role=img aria-label=\"data edges of "
     << "layer " << escapeHtml(layerLabel(plan, layer)) << "\">"
     << "<defs><marker id=ah viewBox=\"0 0 6 6\" refX=5 refY=3 "
        "markerWidth=6 markerHeight=6 orient=auto><path d=\"M0,0L6,3L0,6z\" "
        "fill=\"#555\"/></marker></defs>";
  for (size_t k = 0; k < ops.size(); ++k) {
    const OpRow &row = rows[ops[k]];
    const double share = layerUs > 0 ? row.cost.us / layerUs : 0;
    // White (no time) to orange (the whole layer).
    const int gch = int(255 - share * (255 - 164)), bch = int(255 - share * 159);
    const int y = 4 + int(k) * rowH;
    const OpDef &op = g.ops[ops[k]];
    os << "<g><title>" << escapeHtml(op.name) << ": "
       << fixed(row.cost.us, 2) << " us, " << fixed(100 * share, 1)
       << "% of the layer</title><rect x=" << left << " y=" << y
       << " width=" << boxW << " height=" << rowH - 6
       << " rx=3 fill=\"rgb(255," << gch << "," << bch
       << ")\" stroke=\"#888\"/><text x=" << left + 4 << " y=" << y + 12
       << " font-size=10>" << escapeHtml(op.name) << "</text></g>";
    bool outside = false;
    for (size_t f : row.from)
      outside |= !slot.count(f);
    if (outside)
      os << "<line x1=2 y1=" << y + 8 << " x2=" << left - 1 << " y2=" << y + 8
         << " stroke=\"#555\" marker-end=\"url(#ah)\"/>";
  }
  for (size_t k = 0; k < ops.size(); ++k)
    for (size_t f : rows[ops[k]].from) {
      auto it = slot.find(f);
      if (it == slot.end())
        continue;
      const int y0 = 4 + int(it->second) * rowH + 8, y1 = 4 + int(k) * rowH + 8;
      const int bulge = std::min(arcs - 8, 10 + 6 * int(k - it->second));
      const int x = left + boxW;
      os << "<path d=\"M" << x << "," << y0 << " C" << x + bulge << "," << y0
         << " " << x + bulge << "," << y1 << " " << x + 1 << "," << y1
         << "\" fill=none stroke=\"#555\" marker-end=\"url(#ah)\"/>";
    }
  os << "</svg>\n";
  return os.str();
}

/// escapeHtml, with a line break allowed after each '_': a kernel name
/// (glm_dense_trellis_k4_mcg_e4m3_b1_p2_m4_sumfixed_out_t128) wraps at its
/// parameters instead of widening its table past the window.
std::string breakableHtml(const std::string &s) {
  std::string o;
  for (char c : escapeHtml(s)) {
    o += c;
    if (c == '_')
      o += "<wbr>";
  }
  return o;
}

/// A strip of the layers' modelled time (width by share, colour by kind),
/// then each layer collapsible: its ops with their modelled time, a bar of
/// their share of the layer, and the ops they read from.
std::string layerCostsHtml(const Plan &plan, const RankPlan &r,
                           const InspectOptions &opt) {
  const GraphDef *g = selectedGraph(r, opt);
  if (!g)
    return "";
  const std::vector<OpRow> rows = opRows(plan, r, *g, opt);
  std::map<int32_t, double> layerUs;
  double total = 0;
  for (const OpRow &row : rows) {
    const OpDef &op = g->ops[row.index];
    if (!layerSelected(opt, op.layer))
      continue;
    layerUs[op.layer] += row.cost.us;
    total += row.cost.us;
  }
  if (total <= 0)
    return "";
  auto kindOf = [&](int32_t layer) -> std::string {
    for (const LayerSummary &l : r.layers)
      if (l.layer == layer)
        return kindLabel(l);
    return layer < 0 ? "embed" : "dense";
  };
  std::ostringstream os;
  os << "<p>Modelled " << escapeHtml(graphName(*g)) << " at context "
     << contextOf(plan, opt) << ": " << fixed(total, 1)
     << " us of kernels (max(bytes incl. KV / index-key rows at "
     << fixed(opt.bandwidthGBps, 0) << " GB/s, integer work) + "
     << fixed(opt.launchUs, 1) << " us a launch), by layer:</p>\n"
     << "<div class=strip>";
  for (const auto &[layer, us] : layerUs)
    os << "<div class=\"k-" << kindOf(layer) << "\" style=\"width:"
       << fixed(100.0 * us / total, 3) << "%\" title=\"layer "
       << escapeHtml(layerLabel(plan, layer)) << " (" << kindOf(layer)
       << "): " << fixed(us, 1) << " us, " << fixed(100.0 * us / total, 1)
       << "%\">" << escapeHtml(layerLabel(plan, layer)) << "</div>";
  os << "</div>\n";
  for (const auto &[layer, us] : layerUs) {
    os << "<details><summary>layer " << escapeHtml(layerLabel(plan, layer))
       << " (" << kindOf(layer) << "): " << fixed(us, 1) << " us, "
       << fixed(100.0 * us / total, 1) << "%</summary>\n"
       << "<table><tr><th>#</th><th>op</th><th>kernel</th><th>bytes</th>"
          "<th>context</th><th>modelled us</th><th>share of layer</th>"
          "<th>reads from</th></tr>\n";
    for (const OpRow &row : rows) {
      const OpDef &op = g->ops[row.index];
      if (op.layer != layer)
        continue;
      const double share = us > 0 ? 100.0 * row.cost.us / us : 0;
      std::string from;
      for (size_t f : row.from)
        from += (from.empty() ? "" : ", ") + g->ops[f].name;
      os << "<tr><td>" << row.index << "</td><td>" << escapeHtml(op.name)
         << "</td><td>"
         << breakableHtml(op.kernel >= 0 ? plan.kernels[op.kernel].name
                                         : opKindName(op.kind))
         << "</td><td class=num>" << human(op.bytesRead)
         << "</td><td class=num>"
         << (row.cost.context ? human(row.cost.context) : std::string("-"))
         << "</td><td class=num>" << fixed(row.cost.us, 2)
         << "</td><td style=\"background:linear-gradient(90deg,#f4a460 "
         << fixed(share, 1) << "%,transparent " << fixed(share, 1)
         << "%)\">" << fixed(share, 1) << "%</td><td>" << escapeHtml(from)
         << "</td></tr>\n";
    }
    os << "</table>\n" << layerGraphSvg(plan, *g, rows, layer, us)
       << "</details>\n";
  }
  return os.str();
}

/// Bytes per token of every layer on every rank, cells that differ from
/// rank 0 marked (a multi-rank plan only).
std::string rankDifferencesHtml(const Plan &plan, const InspectOptions &opt) {
  if (plan.ranks.size() < 2)
    return "";
  std::map<int32_t, std::vector<uint64_t>> byLayer;
  for (size_t i = 0; i < plan.ranks.size(); ++i)
    for (const LayerSummary &l : plan.ranks[i].layers) {
      if (!layerSelected(opt, l.layer))
        continue;
      auto &v = byLayer[l.layer];
      v.resize(plan.ranks.size(), 0);
      v[i] = l.bytesPerToken;
    }
  std::ostringstream os;
  os << "<h2>Ranks side by side</h2>\n<p>Weight bytes per token of each "
        "layer; cells that differ from rank 0 are marked.</p>\n<table><tr>"
        "<th>layer</th>";
  for (size_t i = 0; i < plan.ranks.size(); ++i)
    os << "<th>rank " << i << "</th>";
  os << "</tr>\n";
  for (const auto &[layer, v] : byLayer) {
    os << "<tr><td>" << escapeHtml(layerLabel(plan, layer)) << "</td>";
    for (size_t i = 0; i < v.size(); ++i)
      os << "<td class=\"num" << (v[i] != v[0] ? " diff" : "") << "\">"
         << human(v[i]) << "</td>";
    os << "</tr>\n";
  }
  os << "</table>\n";
  return os.str();
}

} // namespace

std::string inspectHtml(const Plan &plan, const InspectOptions &opt,
                        const std::string &svg) {
  const double bw = opt.bandwidthGBps;
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>glmc "
        "plan "
     << escapeHtml(opt.planPath) << "</title>\n<style>\n"
     << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\n"
        "table{border-collapse:collapse;margin:1em 0}\n"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;"
        "text-align:left}\nth{background:#eef}\n"
        "td.num{text-align:right;font-variant-numeric:tabular-nums;"
        "white-space:nowrap}\n"
        // The whole graph at its own size (shrunk to the window its labels
        // were unreadable), scrolled in a box of the window's size.
        "h2{margin-top:1.5em}\n"
        ".graph{overflow:auto;max-height:85vh;border:1px solid #ccc}\n"
        ".strip{display:flex;height:28px;border:1px solid #999;margin:.5em 0}\n"
        ".strip div{overflow:hidden;font-size:10px;color:#fff;"
        "border-right:1px solid #fff;white-space:nowrap}\n"
        ".k-dense{background:#4a7ab8}.k-moe{background:#c0504d}"
        ".k-head{background:#6b8e23}.k-embed{background:#888}\n"
        "details{margin:.2em 0}summary{cursor:pointer}\n"
        "td.diff{background:#fde8c8}\n"
     << "</style></head><body>\n";
  os << "<h1>glmc plan " << escapeHtml(opt.planPath) << "</h1>\n<p>"
     << escapeHtml(plan.model.modelType) << " (" << escapeHtml(plan.model.layout)
     << "), " << plan.model.numLayers << " layers, " << plan.numRanks
     << " rank(s), archs " << escapeHtml(joinNames(plan.targetArchs)) << ", "
     << plan.kernels.size() << " kernels; times at " << fixed(bw, 0)
     << " GB/s.</p>\n";
  if (auto c = plan.compileOptions.find("command");
      c != plan.compileOptions.end())
    os << "<p>Compiled by <code>" << escapeHtml(c->second) << "</code></p>\n";
  const InspectSummary s = summarize(plan, bw);
  // As the text summary: the modelled step (kernels incl. context reads and
  // launches, collectives) of every layer on each rank, the slowest bounding
  // the step; weight reads alone only as a floor.
  InspectOptions whole = opt;
  whole.layer = INT_MIN;
  std::vector<StepCost> steps;
  size_t worst = 0;
  for (const RankPlan &r : plan.ranks) {
    steps.push_back(stepCost(plan, r, whole));
    if (steps.back().stepUs > steps[worst].stepUs)
      worst = steps.size() - 1;
  }
  os << "<h2>Summary</h2>\n<table><tr><th>rank</th><th>bytes/token</th>"
        "<th>weight reads us</th><th>modelled step us</th></tr>\n";
  for (size_t i = 0; i < s.bytesPerTokenPerRank.size(); ++i)
    os << "<tr><td>" << i << "</td><td class=num>" << s.bytesPerTokenPerRank[i]
       << "</td><td class=num>" << fixed(usAt(s.bytesPerTokenPerRank[i], bw), 1)
       << "</td><td class=num>"
       << (i < steps.size() ? fixed(steps[i].stepUs, 1) : std::string("-"))
       << "</td></tr>\n";
  os << "</table>\n<p>Total " << s.bytesPerTokenTotal << " bytes/token.";
  if (!steps.empty() && steps[worst].stepUs > 0) {
    const StepCost &w = steps[worst];
    os << " Modelled " << escapeHtml(w.graph) << " at context " << w.context
       << ": <b>" << fixed(w.rows * 1e6 / w.stepUs, 1) << " tok/s</b>"
       << (w.rows > 1 ? " over its " + std::to_string(w.rows) + " rows (" +
                            fixed(1e6 / w.stepUs, 1) + " a sequence)"
                      : std::string())
       << " on "
       << plan.numRanks << " Spark(s) (step " << fixed(w.stepUs, 1)
       << " us, bound by rank " << worst << ": kernels "
       << fixed(w.kernelUs, 1) << " us incl. " << human(w.contextBytes)
       << " of KV / index-key reads and " << w.launches << " launches, "
       << w.collectives << " collectives " << fixed(w.collectiveUs, 1)
       << " us).";
  }
  os << " Weight reads alone: " << fixed(s.predictedTokPerS, 1)
     << " tok/s (step " << fixed(s.predictedStepUs, 1)
     << " us), before launches and collectives.</p>\n";
  os << rankDifferencesHtml(plan, opt);
  for (const RankPlan *r : selectedRanks(plan, opt)) {
    os << "<h2>Rank " << r->rank << "</h2>\n<p>Memory: weights "
       << human(r->weightBytes) << ", activation buffers "
       << human(r->activationBytes) << " (sum; they share space), kv cache " << human(r->kvBytes) << ", arena " << human(r->arenaBytes)
       << ".</p>\n<table><tr><th>layer</th><th>kind</th><th>bytes/token</th>"
          "<th>weight reads us</th><th>fused kernels</th></tr>\n";
    for (const LayerSummary &l : r->layers) {
      if (!layerSelected(opt, l.layer))
        continue;
      os << "<tr><td>" << escapeHtml(layerLabel(plan, l.layer)) << "</td><td>"
         << kindLabel(l) << "</td><td class=num>" << l.bytesPerToken
         << "</td><td class=num>" << fixed(usAt(l.bytesPerToken, bw), 2)
         << "</td><td>" << escapeHtml(foldNames(l.kernels)) << "</td></tr>\n";
    }
    if (const MtpCost mc = mtpCost(plan, *r); mc.any() && opt.layer == INT_MIN)
      os << "<tr><td>mtp</td><td>moe</td><td class=num>0</td><td class=num>"
            "0.00</td><td>layer "
         << mtpLayersLabel(mc) << ", not read per decoded token: weights "
         << human(mc.weightBytes) << ", kv cache " << human(mc.kvBytes)
         << "</td></tr>\n";
    os << "</table>\n";
    os << layerCostsHtml(plan, *r, opt);
    std::vector<KernelCost> costs = kernelCosts(plan, *r, opt);
    if (!costs.empty()) {
      const bool measured = !opt.measuredUs.empty();
      os << "<p>Kernels of the batch-1 decode step: predicted = max(bytes / "
         << fixed(bw, 0) << " GB/s, decoded weights &times; "
         << fixed(opt.opsPerWeight, 0) << " ops / "
         << fixed(opt.intRateTops, 1) << " Tops/s) per launch"
         << (measured ? "; measured from " + escapeHtml(opt.measuredSource)
                      : std::string())
         << ".</p>\n<table><tr><th>kernel</th><th>launches</th><th>bytes</th>"
            "<th>predicted us</th><th>bound</th>"
         << (measured ? "<th>measured us</th><th>ratio</th>" : "")
         << "</tr>\n";
      for (const KernelCost &c : costs) {
        os << "<tr><td>" << escapeHtml(c.name) << "</td><td class=num>"
           << c.launches << "</td><td class=num>" << c.bytes
           << "</td><td class=num>" << fixed(c.predictedUs, 2) << "</td><td>"
           << (c.predictedUs <= 0 ? "-"
               : opt.target     ? c.bound
               : c.integerBound ? "int"
                                : "bw")
           << "</td>";
        if (measured)
          os << "<td class=num>"
             << (c.measuredUs < 0 ? "-" : fixed(c.measuredUs, 2))
             << "</td><td class=num>"
             << (c.ratio > 0 ? fixed(c.ratio, 2) : "-") << "</td>";
        os << "</tr>\n";
      }
      os << "</table>\n";
    }
  }
  const int rank = opt.rank < 0 ? 0 : opt.rank;
  os << "<h2>Decode graph, rank " << rank << "</h2>\n";
  if (!svg.empty()) {
    // Drop the XML prolog and doctype: the <svg> element inlines as is.
    size_t at = svg.find("<svg");
    os << "<div class=graph>\n"
       << (at == std::string::npos ? svg : svg.substr(at)) << "</div>\n";
  } else if (!plan.ranks.empty() && size_t(rank) < plan.ranks.size()) {
    os << "<table><tr><th>#</th><th>layer</th><th>op</th><th>kernel</th>"
          "<th>bytes</th></tr>\n";
    if (const GraphDef *g = selectedGraph(plan.ranks[rank], opt))
      for (size_t i = 0; i < g->ops.size(); ++i) {
        const OpDef &op = g->ops[i];
        if (!layerSelected(opt, op.layer))
          continue;
        os << "<tr><td>" << i << "</td><td>"
           << escapeHtml(layerLabel(plan, op.layer)) << "</td><td>"
           << escapeHtml(op.name) << "</td><td>"
           << escapeHtml(op.kernel >= 0 ? plan.kernels[op.kernel].name
                                        : opKindName(op.kind))
           << "</td><td class=num>" << op.bytesRead << "</td></tr>\n";
      }
    os << "</table>\n";
  }
  os << "</body></html>\n";
  return os.str();
}

} // namespace glm::plan
