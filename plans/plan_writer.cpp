//===- plan_writer.cpp - plain plan structs to flatbuffer bytes -----------===//
//
// Serialization is deterministic: the builder sees the same calls in the same
// order for the same Plan (maps are sorted, vectors keep their order, strings
// are deduplicated by content only), and nothing time- or path-dependent is
// written. Also the helpers the compiler uses to complete a plan.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "plans/plan_generated.h"
#include "runtime/base/error.h"
#include "runtime/base/hash.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <tuple>
#include <unordered_map>

namespace glm::plan {

namespace fbs = glm::plan::fb;

// The plain enums mirror the schema's value for value.
static_assert(int(BufferKind::Io) == int(fbs::BufferKind::Io));
static_assert(int(WeightTag::Other) == int(fbs::WeightTag::Other));
static_assert(int(Projection::LmHead) == int(fbs::Projection::LmHead));
static_assert(int(GraphKind::Prefill) == int(fbs::GraphKind::Prefill));
static_assert(int(GraphKind::Load) == int(fbs::GraphKind::Load));
static_assert(int(GraphKind::Draft) == int(fbs::GraphKind::Draft));
static_assert(int(OpKind::Other) == int(fbs::OpKind::Other));
static_assert(int(OpKind::ExpertGemv) == int(fbs::OpKind::ExpertGemv));
static_assert(int(DType::U8) == int(fbs::DType::U8));
static_assert(int(CollectiveKind::Broadcast) ==
              int(fbs::CollectiveKind::Broadcast));
static_assert(int(LayerKind::Head) == int(fbs::LayerKind::Head));
static_assert(int(ArgKind::Runtime) == int(fbs::ArgKind::Runtime));

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

template <size_t N>
static const char *nameOf(const char *const (&names)[N], unsigned v) {
  return v < N ? names[v] : "unknown";
}

const char *bufferKindName(BufferKind k) {
  static const char *const n[] = {"weight", "activation", "kv_cache",
                                  "scratch", "io"};
  return nameOf(n, unsigned(k));
}
const char *weightTagName(WeightTag t) {
  static const char *const n[] = {"trellis_half", "side_vector", "dense",
                                  "trellis_tensor", "norm", "other"};
  return nameOf(n, unsigned(t));
}
const char *projectionName(Projection p) {
  static const char *const n[] = {
      "none", "gate", "up",         "down",      "q_a",           "q_b",
      "kv_a", "kv_b", "o",          "idx_q_b",   "idx_k",         "idx_weights",
      "router", "embed", "lm_head"};
  return nameOf(n, unsigned(p));
}
const char *graphKindName(GraphKind k) {
  static const char *const n[] = {"decode", "prefill", "load", "draft"};
  return nameOf(n, unsigned(k));
}
std::string graphName(const GraphDef &g) {
  if (g.kind == GraphKind::Load)
    return "load";
  return std::string(graphKindName(g.kind)) + "." + std::to_string(g.size);
}
const char *opKindName(OpKind k) {
  static const char *const n[] = {
      "embed",       "rms_norm",     "rope",       "hadamard",
      "dense_gemv",  "expert_gemv",  "router",     "mla_attention",
      "indexer_topk", "all_reduce",  "all_gather", "lm_head",
      "argmax",      "copy",         "add",        "reduce",
      "other"};
  return nameOf(n, unsigned(k));
}
const char *dtypeName(DType t) {
  static const char *const n[] = {"f32", "f16", "bf16", "e4m3",
                                  "i32", "i64", "u8"};
  return nameOf(n, unsigned(t));
}
const char *collectiveKindName(CollectiveKind k) {
  static const char *const n[] = {"all_reduce", "all_gather", "broadcast"};
  return nameOf(n, unsigned(k));
}
const char *layerKindName(LayerKind k) {
  static const char *const n[] = {"dense", "moe", "head"};
  return nameOf(n, unsigned(k));
}
const char *argKindName(ArgKind k) {
  static const char *const n[] = {"buffer", "i32",     "i64",
                                  "f32",    "runtime", "f64"};
  return nameOf(n, unsigned(k));
}
uint64_t transformedBytes(WeightTransform t, uint64_t length) {
  return t == WeightTransform::RawCopy || t == WeightTransform::ToF32
             ? length
             : 2 * length;
}
uint32_t dtypeBytes(DType t) {
  switch (t) {
  case DType::F32: case DType::I32: return 4;
  case DType::F16: case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::E4M3: case DType::U8: return 1;
  }
  return 1;
}

//===----------------------------------------------------------------------===//
// Equality (round-trip tests, plan comparison)
//===----------------------------------------------------------------------===//

bool LaunchDims::operator==(const LaunchDims &o) const {
  return std::tie(gridX, gridY, gridZ, blockX, blockY, blockZ, smemBytes) ==
         std::tie(o.gridX, o.gridY, o.gridZ, o.blockX, o.blockY, o.blockZ,
                  o.smemBytes);
}
bool ModelMeta::operator==(const ModelMeta &o) const {
  return std::tie(modelType, architecture, layout, manifest, hiddenSize,
                  numLayers, vocabSize, eosTokenIds, padTokenId, tokenizerFile,
                  chatTemplateFile, temperature, topP, maxContext, kvDtype,
                  activeWeightBytes) ==
         std::tie(o.modelType, o.architecture, o.layout, o.manifest,
                  o.hiddenSize, o.numLayers, o.vocabSize, o.eosTokenIds,
                  o.padTokenId, o.tokenizerFile, o.chatTemplateFile,
                  o.temperature, o.topP, o.maxContext, o.kvDtype,
                  o.activeWeightBytes);
}
bool Relocation::operator==(const Relocation &o) const {
  return std::tie(at, buffer, offset) == std::tie(o.at, o.buffer, o.offset);
}
bool BufferDef::operator==(const BufferDef &o) const {
  return std::tie(name, bytes, arenaOffset, kind, dtype, layer, init,
                  relocations) == std::tie(o.name, o.bytes, o.arenaOffset,
                                           o.kind, o.dtype, o.layer, o.init,
                                           o.relocations);
}
bool WeightBinding::operator==(const WeightBinding &o) const {
  return std::tie(file, offset, length, buffer, bufferOffset, transform, tag,
                  tensor, layer, expert, projection, half, widthX2) ==
         std::tie(o.file, o.offset, o.length, o.buffer, o.bufferOffset,
                  o.transform, o.tag, o.tensor, o.layer, o.expert,
                  o.projection, o.half, o.widthX2);
}
bool KernelBinary::operator==(const KernelBinary &o) const {
  return std::tie(arch, ptx, cubin) == std::tie(o.arch, o.ptx, o.cubin);
}
bool KernelDef::operator==(const KernelDef &o) const {
  return std::tie(name, templateName, templateArgs, source, sourceHash,
                  cacheKey, nvrtcOptions, binaries, launch) ==
         std::tie(o.name, o.templateName, o.templateArgs, o.source,
                  o.sourceHash, o.cacheKey, o.nvrtcOptions, o.binaries,
                  o.launch);
}
bool ArgDef::operator==(const ArgDef &o) const {
  return std::tie(kind, buffer, offset, i, f, name, rowBytes, d) ==
         std::tie(o.kind, o.buffer, o.offset, o.i, o.f, o.name, o.rowBytes,
                  o.d);
}
bool OpDef::operator==(const OpDef &o) const {
  return std::tie(kind, name, kernel, collective, inputs, outputs, layer,
                  bytesRead, predictedNs, launch, args, decodedWeights,
                  repeat, rowsPerLaunch, programmaticLaunch) ==
         std::tie(o.kind, o.name, o.kernel, o.collective, o.inputs, o.outputs,
                  o.layer, o.bytesRead, o.predictedNs, o.launch, o.args,
                  o.decodedWeights, o.repeat, o.rowsPerLaunch,
                  o.programmaticLaunch);
}
bool GraphDef::operator==(const GraphDef &o) const {
  return std::tie(kind, size, ops) == std::tie(o.kind, o.size, o.ops);
}
bool CollectiveDef::operator==(const CollectiveDef &o) const {
  return std::tie(kind, dtype, elements, layer, order, buffer) ==
         std::tie(o.kind, o.dtype, o.elements, o.layer, o.order, o.buffer);
}
bool LayerSummary::operator==(const LayerSummary &o) const {
  return std::tie(layer, kind, bytesPerToken, predictedNs, kernels, ops) ==
         std::tie(o.layer, o.kind, o.bytesPerToken, o.predictedNs, o.kernels,
                  o.ops);
}
bool RankPlan::operator==(const RankPlan &o) const {
  return std::tie(rank, arenaBytes, weightBytes, activationBytes, kvBytes,
                  bytesPerToken, buffers, weights, graphs, collectives,
                  layers) ==
         std::tie(o.rank, o.arenaBytes, o.weightBytes, o.activationBytes,
                  o.kvBytes, o.bytesPerToken, o.buffers, o.weights, o.graphs,
                  o.collectives, o.layers);
}
bool Plan::operator==(const Plan &o) const {
  return std::tie(schemaMajor, schemaMinor, runtimeAbi, compilerVersion,
                  configHash, manifestHash, indexHash, targetArchs, model,
                  numRanks, bandwidthGBps, memoryPerRank, kernels, ranks,
                  compileOptions) ==
         std::tie(o.schemaMajor, o.schemaMinor, o.runtimeAbi,
                  o.compilerVersion, o.configHash, o.manifestHash, o.indexHash,
                  o.targetArchs, o.model, o.numRanks, o.bandwidthGBps,
                  o.memoryPerRank, o.kernels, o.ranks, o.compileOptions);
}

//===----------------------------------------------------------------------===//
// Helpers for the compiler
//===----------------------------------------------------------------------===//

uint64_t predictNs(uint64_t bytes, double gbps) {
  if (gbps <= 0)
    return 0;
  // bytes / (gbps * 1e9 B/s) in ns = bytes / gbps.
  return uint64_t(std::ceil(double(bytes) / gbps));
}

int32_t addKernel(Plan &plan, KernelDef k) {
  for (size_t i = 0; i < plan.kernels.size(); ++i)
    if (plan.kernels[i].name == k.name &&
        plan.kernels[i].sourceHash == k.sourceHash)
      return int32_t(i);
  plan.kernels.push_back(std::move(k));
  return int32_t(plan.kernels.size() - 1);
}

static LayerKind layerKindOf(const std::vector<const OpDef *> &ops,
                             int32_t layer, int64_t numLayers) {
  if (layer < 0 || (numLayers > 0 && layer >= numLayers))
    return LayerKind::Head;
  for (const OpDef *op : ops)
    if (op->kind == OpKind::ExpertGemv || op->kind == OpKind::Router)
      return LayerKind::Moe;
  return LayerKind::Dense;
}

void finalizePlan(Plan &plan) {
  plan.numRanks = uint32_t(plan.ranks.size());
  uint64_t active = 0;
  for (RankPlan &r : plan.ranks) {
    r.weightBytes = r.activationBytes = r.kvBytes = 0;
    uint64_t arenaEnd = 0;
    for (const BufferDef &b : r.buffers) {
      arenaEnd = std::max(arenaEnd, b.arenaOffset + b.bytes);
      if (b.kind == BufferKind::Weight)
        r.weightBytes += b.bytes;
      else if (b.kind == BufferKind::KvCache)
        r.kvBytes += b.bytes;
      else
        r.activationBytes += b.bytes;
    }
    r.arenaBytes = std::max(r.arenaBytes, arenaEnd);

    std::stable_sort(r.graphs.begin(), r.graphs.end(),
                     [](const GraphDef &a, const GraphDef &b) {
                       return std::make_pair(a.kind, a.size) <
                              std::make_pair(b.kind, b.size);
                     });
    for (GraphDef &g : r.graphs)
      for (OpDef &op : g.ops)
        op.predictedNs = predictNs(op.bytesRead, plan.bandwidthGBps);

    // Summaries come from the smallest decode bucket: a decoded token.
    const GraphDef *decode = nullptr;
    for (const GraphDef &g : r.graphs)
      if (g.kind == GraphKind::Decode) {
        decode = &g;
        break;
      }
    r.bytesPerToken = 0;
    r.layers.clear();
    if (!decode)
      continue;
    std::map<int32_t, std::vector<const OpDef *>> byLayer;
    for (const OpDef &op : decode->ops) {
      byLayer[op.layer].push_back(&op);
      r.bytesPerToken += op.bytesRead;
    }
    for (const auto &[layer, ops] : byLayer) {
      LayerSummary s;
      s.layer = layer;
      s.kind = layerKindOf(ops, layer, plan.model.numLayers);
      for (const OpDef *op : ops) {
        s.bytesPerToken += op->bytesRead;
        s.ops.push_back(op->name);
        if (op->kernel >= 0 && size_t(op->kernel) < plan.kernels.size())
          s.kernels.push_back(plan.kernels[op->kernel].name);
        else if (op->collective >= 0)
          s.kernels.push_back(opKindName(op->kind));
      }
      s.predictedNs = predictNs(s.bytesPerToken, plan.bandwidthGBps);
      r.layers.push_back(std::move(s));
    }
    active += r.bytesPerToken;
  }
  plan.model.activeWeightBytes = active;
}

//===----------------------------------------------------------------------===//
// Serialization
//===----------------------------------------------------------------------===//

namespace {

/// Bytes the flatbuffer of `p` will about take, so the builder allocates
/// once instead of doubling (and copying) its way up to ~150 MB.
static size_t estimateBytes(const Plan &p) {
  size_t n = 1 << 20;
  for (const KernelDef &k : p.kernels) {
    n += k.source.size() + 1024;
    for (const KernelBinary &kb : k.binaries)
      n += kb.ptx.size() + kb.cubin.size() + 64;
  }
  for (const RankPlan &r : p.ranks) {
    n += r.weights.size() * 96; // a table of 14 scalars and two offsets
    for (const GraphDef &g : r.graphs)
      for (const OpDef &o : g.ops)
        n += 160 + o.args.size() * 64 + o.name.size();
    n += r.buffers.size() * 96 + r.layers.size() * 512;
  }
  return n;
}

class Writer {
public:
  explicit Writer(size_t initialBytes) : b(initialBytes) {}
  flatbuffers::FlatBufferBuilder b;

  /// Each distinct string once (as CreateSharedString, whose lookup
  /// compares strings in the buffer: a hash map is faster for the ~10^6
  /// file and tensor names of a full-size plan). Same offsets, same bytes.
  flatbuffers::Offset<flatbuffers::String> str(const std::string &s) {
    auto [it, fresh] = shared.try_emplace(s);
    if (fresh)
      it->second = b.CreateString(s);
    return it->second;
  }
  std::unordered_map<std::string, flatbuffers::Offset<flatbuffers::String>>
      shared;

  flatbuffers::Offset<
      flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>
  strs(const std::vector<std::string> &v) {
    std::vector<flatbuffers::Offset<flatbuffers::String>> o;
    o.reserve(v.size());
    for (const std::string &s : v)
      o.push_back(str(s));
    return b.CreateVector(o);
  }

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbs::KeyValueDef>>>
  keyValues(const KeyValues &kv) {
    std::vector<flatbuffers::Offset<fbs::KeyValueDef>> o;
    for (const auto &[k, v] : kv) // std::map: sorted by key
      o.push_back(fbs::CreateKeyValueDef(b, str(k), str(v)));
    return b.CreateVector(o);
  }

  static fbs::LaunchDef launch(const LaunchDims &l) {
    return fbs::LaunchDef(l.gridX, l.gridY, l.gridZ, l.blockX, l.blockY,
                          l.blockZ, l.smemBytes);
  }

  flatbuffers::Offset<fbs::ModelMetaDef> model(const ModelMeta &m) {
    auto modelType = str(m.modelType), arch = str(m.architecture),
         layout = str(m.layout), manifest = str(m.manifest),
         tok = str(m.tokenizerFile), tmpl = str(m.chatTemplateFile);
    auto eos = b.CreateVector(m.eosTokenIds);
    return fbs::CreateModelMetaDef(
        b, modelType, arch, layout, manifest, m.hiddenSize, m.numLayers,
        m.vocabSize, eos, m.padTokenId, tok, tmpl, m.temperature, m.topP,
        m.maxContext, fbs::DType(m.kvDtype), m.activeWeightBytes);
  }

  flatbuffers::Offset<fbs::KernelDef> kernel(const KernelDef &k) {
    auto name = str(k.name), tmpl = str(k.templateName);
    auto args = keyValues(k.templateArgs);
    auto source = b.CreateString(k.source);
    auto srcHash = str(k.sourceHash), key = str(k.cacheKey);
    auto opts = strs(k.nvrtcOptions);
    std::vector<flatbuffers::Offset<fbs::KernelBinaryDef>> bins;
    for (const KernelBinary &kb : k.binaries) {
      auto arch = str(kb.arch);
      auto ptx = b.CreateVector(
          reinterpret_cast<const uint8_t *>(kb.ptx.data()), kb.ptx.size());
      auto cubin = b.CreateVector(kb.cubin);
      bins.push_back(fbs::CreateKernelBinaryDef(b, arch, ptx, cubin));
    }
    auto binsV = b.CreateVector(bins);
    fbs::LaunchDef l = launch(k.launch);
    return fbs::CreateKernelDef(b, name, tmpl, args, source, srcHash, key,
                                opts, binsV, &l);
  }

  flatbuffers::Offset<fbs::OpDef> op(const OpDef &o) {
    auto name = str(o.name);
    auto in = b.CreateVector(o.inputs), out = b.CreateVector(o.outputs);
    std::vector<flatbuffers::Offset<fbs::ArgDef>> args;
    for (const ArgDef &a : o.args)
      args.push_back(fbs::CreateArgDef(b, fbs::ArgKind(a.kind), a.buffer,
                                       a.offset, a.i, a.f, str(a.name),
                                       a.rowBytes, a.d));
    auto argsV = b.CreateVector(args);
    fbs::LaunchDef l = launch(o.launch);
    return fbs::CreateOpDef(b, fbs::OpKind(o.kind), name, o.kernel,
                            o.collective, in, out, o.layer, o.bytesRead,
                            o.predictedNs, &l, argsV, o.decodedWeights,
                            o.repeat, o.rowsPerLaunch, o.programmaticLaunch);
  }

  flatbuffers::Offset<fbs::RankPlanDef> rank(const RankPlan &r) {
    std::vector<flatbuffers::Offset<fbs::BufferDef>> bufs;
    for (const BufferDef &x : r.buffers) {
      auto init = x.init.empty() ? 0 : b.CreateVector(x.init);
      flatbuffers::Offset<flatbuffers::Vector<const fbs::RelocationDef *>>
          relocs = 0;
      if (!x.relocations.empty()) {
        std::vector<fbs::RelocationDef> rs;
        for (const Relocation &rl : x.relocations)
          rs.emplace_back(rl.at, rl.buffer, rl.offset);
        relocs = b.CreateVectorOfStructs(rs);
      }
      bufs.push_back(fbs::CreateBufferDef(b, str(x.name), x.bytes,
                                          x.arenaOffset, fbs::BufferKind(x.kind),
                                          fbs::DType(x.dtype), x.layer, init,
                                          relocs));
    }
    auto bufsV = b.CreateVector(bufs);
    std::vector<flatbuffers::Offset<fbs::WeightBindingDef>> ws;
    ws.reserve(r.weights.size());
    for (const WeightBinding &w : r.weights) {
      auto file = str(w.file), tensor = str(w.tensor);
      ws.push_back(fbs::CreateWeightBindingDef(
          b, file, w.offset, w.length, w.buffer, w.bufferOffset,
          fbs::WeightTransform(w.transform), fbs::WeightTag(w.tag), tensor,
          w.layer, w.expert, fbs::Projection(w.projection), w.half,
          w.widthX2));
    }
    auto wsV = b.CreateVector(ws);
    std::vector<flatbuffers::Offset<fbs::GraphDef>> gs;
    for (const GraphDef &g : r.graphs) {
      std::vector<flatbuffers::Offset<fbs::OpDef>> ops;
      for (const OpDef &o : g.ops)
        ops.push_back(op(o));
      auto opsV = b.CreateVector(ops);
      gs.push_back(fbs::CreateGraphDef(b, fbs::GraphKind(g.kind), g.size, opsV));
    }
    auto gsV = b.CreateVector(gs);
    std::vector<flatbuffers::Offset<fbs::CollectiveDef>> cs;
    for (const CollectiveDef &c : r.collectives)
      cs.push_back(fbs::CreateCollectiveDef(
          b, fbs::CollectiveKind(c.kind), fbs::DType(c.dtype), c.elements,
          c.layer, str(c.order), c.buffer));
    auto csV = b.CreateVector(cs);
    std::vector<flatbuffers::Offset<fbs::LayerSummaryDef>> ls;
    for (const LayerSummary &s : r.layers) {
      auto kernels = strs(s.kernels), ops = strs(s.ops);
      ls.push_back(fbs::CreateLayerSummaryDef(b, s.layer,
                                              fbs::LayerKind(s.kind),
                                              s.bytesPerToken, s.predictedNs,
                                              kernels, ops));
    }
    auto lsV = b.CreateVector(ls);
    return fbs::CreateRankPlanDef(b, r.rank, r.arenaBytes, r.weightBytes,
                                  r.activationBytes, r.kvBytes,
                                  r.bytesPerToken, bufsV, wsV, gsV, csV, lsV);
  }

  void plan(const Plan &p) {
    auto version = str(p.compilerVersion), cfg = str(p.configHash),
         man = str(p.manifestHash), idx = str(p.indexHash);
    auto archs = strs(p.targetArchs);
    auto meta = model(p.model);
    std::vector<flatbuffers::Offset<fbs::KernelDef>> ks;
    for (const KernelDef &k : p.kernels)
      ks.push_back(kernel(k));
    auto ksV = b.CreateVector(ks);
    std::vector<flatbuffers::Offset<fbs::RankPlanDef>> rs;
    for (const RankPlan &r : p.ranks)
      rs.push_back(rank(r));
    auto rsV = b.CreateVector(rs);
    auto opts = keyValues(p.compileOptions);
    auto root = fbs::CreatePlanDef(b, p.schemaMajor, p.schemaMinor,
                                   p.runtimeAbi, version, cfg, man, idx, archs,
                                   meta, p.numRanks, p.bandwidthGBps,
                                   p.memoryPerRank, ksV, rsV, opts);
    b.Finish(root, kPlanFileIdentifier);
  }
};

} // namespace

static void build(Writer &w, const Plan &plan) {
  w.b.ForceDefaults(true); // every field present: simpler to diff and read
  w.plan(plan);
}

/// The checksum trailer of a finished flatbuffer (plan.h).
static std::array<uint8_t, kPlanTrailerBytes>
trailerOf(const uint8_t *data, size_t size) {
  std::array<uint8_t, kPlanTrailerBytes> t{};
  std::memcpy(t.data(), kPlanChecksumMagic, 8);
  const uint64_t h = rt::xxh64(data, size);
  for (int i = 0; i < 8; ++i)
    t[8 + i] = uint8_t(h >> (8 * i));
  return t;
}

std::vector<uint8_t> serializePlan(const Plan &plan) {
  Writer w(estimateBytes(plan));
  build(w, plan);
  const uint8_t *b = w.b.GetBufferPointer();
  std::vector<uint8_t> out(b, b + w.b.GetSize());
  const auto t = trailerOf(b, w.b.GetSize());
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

void writePlan(const Plan &plan, const std::string &path) {
  Writer w(estimateBytes(plan)); // written from the builder: no copy
  build(w, plan);
  const auto t = trailerOf(w.b.GetBufferPointer(), w.b.GetSize());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  rt::check(bool(f), path, ": cannot open the plan for writing");
  f.write(reinterpret_cast<const char *>(w.b.GetBufferPointer()),
          std::streamsize(w.b.GetSize()));
  f.write(reinterpret_cast<const char *>(t.data()), std::streamsize(t.size()));
  f.close();
  rt::check(bool(f), path, ": writing the plan failed (disk full?)");
}

} // namespace glm::plan
