//===- Import.cpp - pack (config + manifest + index) → glm module ---------===//
//
// See Import.h. The three layouts differ only in what Pack reports: exlr8
// expert projections come as 16 trellis halves (one part each), EXL3 ones
// as one trellis tensor, Hugging Face ones as dense tensors. Every geometry
// number comes from ModelConfig.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Import.h"
#include "runtime/model/hf_names.h"

#include "glm/GlmDialect.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/pack.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"

#include <filesystem>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::glm;
namespace fs = std::filesystem;
using ::glm::rt::Pack;
using ::glm::rt::WeightInfo;

namespace glmc {
namespace {

/// A location in file `path`. The diagnostic handler reads a file named in
/// a location to quote its line: only a regular file of a size a config or
/// manifest may have is named so (a --manifest /dev/zero used to be read
/// without end); anything else is named without a line.
static Location fileLoc(MLIRContext &ctx, const std::string &path,
                        unsigned line, unsigned col) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) &&
      fs::file_size(path, ec) <= ::glm::rt::kMaxManifestBytes && !ec)
    return FileLineColLoc::get(&ctx, path, line, col);
  return NameLoc::get(StringAttr::get(&ctx, path));
}

/// Location of `"key"` in config.json (line and column), else line 1.
static Location configLoc(MLIRContext &ctx, const Pack &pack,
                          const std::string &key) {
  std::string file = (fs::path(pack.dir()) / "config.json").string();
  unsigned line = 1, col = 1;
  if (pack.config()) {
    const std::string &raw = pack.config()->rawJson;
    size_t pos = raw.find("\"" + key + "\"");
    if (pos != std::string::npos) {
      for (size_t i = 0; i < pos; ++i, ++col)
        if (raw[i] == '\n') {
          ++line;
          col = 0;
        }
    }
  }
  return fileLoc(ctx, file, line, col);
}

static DenseFormat denseFormat(::glm::rt::WeightFormat f) {
  using ::glm::rt::WeightFormat;
  switch (f) {
  case WeightFormat::F32:
    return DenseFormat::F32;
  case WeightFormat::F16:
    return DenseFormat::F16;
  case WeightFormat::BF16:
    return DenseFormat::BF16;
  case WeightFormat::Fp8Block:
    return DenseFormat::Fp8Block128;
  case WeightFormat::Fp8Row:
    return DenseFormat::Fp8Row;
  case WeightFormat::Mxfp8:
    return DenseFormat::Mxfp8;
  case WeightFormat::Int4:
    return DenseFormat::Int4;
  case WeightFormat::Trellis:
    break;
  }
  return DenseFormat::BF16;
}

static Type trellisType(MLIRContext &ctx, const ::glm::rt::TrellisPart &p,
                        unsigned twiceBits) {
  return TrellisType::get(&ctx, twiceBits,
                          static_cast<Codebook>(static_cast<int>(p.codebook)),
                          static_cast<TileOrder>(static_cast<int>(p.order)),
                          p.e4m3);
}

class Importer {
public:
  Importer(MLIRContext &ctx, const Pack &pack, std::string manifest,
           bool draft)
      : ctx(ctx), pack(pack), cfg(*pack.config()), b(&ctx),
        manifestName(std::move(manifest)), draft(draft) {}

  OwningOpRef<ModuleOp> run();

private:
  // Called ~4 times per expert half (~10^6 halves at full size): a hash
  // lookup that allocates only for a new name.
  static int64_t intern(llvm::StringMap<int64_t> &ids,
                        std::vector<std::string> &order, StringRef name) {
    auto it = ids.find(name);
    if (it != ids.end())
      return it->second;
    ids[name] = int64_t(order.size());
    order.push_back(name.str());
    return int64_t(order.size()) - 1;
  }
  int64_t fileIndex(const std::string &f) {
    return intern(files, fileOrder, f);
  }
  int64_t roleIndex(const std::string &r) {
    return intern(roles, roleOrder, r.empty() ? StringRef("data") : r);
  }
  void pushRange(SmallVectorImpl<int64_t> &out, const ::glm::rt::ByteRange &r) {
    out.append({fileIndex(r.file), static_cast<int64_t>(r.offset),
                static_cast<int64_t>(r.length), roleIndex(r.role)});
  }

  LogicalResult importWeights(ModuleOp module);
  /// The MTP layers (index >= num_hidden_layers) the pack stores whole:
  /// their layer numbers, a remark for each the config names but the pack
  /// leaves out, an error for one stored in part.
  FailureOr<std::set<int64_t>> mtpLayersToImport();
  /// The module's `glm.mtp`: per imported MTP layer its caches' geometry.
  void recordMtp(ModuleOp module, const std::set<int64_t> &layers);
  LogicalResult importBank(int64_t layer, const std::vector<const WeightInfo *>
                                              &byExpertProj);
  LogicalResult buildStep(ModuleOp module);
  /// @name if the pack has it, else a located error.
  FailureOr<FlatSymbolRefAttr> weight(const std::string &name,
                                      const std::string &configKey);

  MLIRContext &ctx;
  const Pack &pack;
  const ::glm::rt::ModelConfig &cfg;
  OpBuilder b;
  std::string manifestName;
  bool draft = false;     // build the MTP draft graph (glmc compile --draft)
  int64_t draftLayer = -1; // its MTP layer, once imported
  llvm::StringMap<int64_t> files, roles;
  std::vector<std::string> fileOrder, roleOrder;
  std::set<std::string> weightNames;
  std::map<int64_t, std::string> bankOfLayer;
  std::vector<int64_t> manifestLayers;
  SmallVector<Attribute> manifestTables;
  std::set<int32_t> availableWidths;
  bool anyTrellisBank = false;
};

/// The layer number of a "….layers.L." prefix.
static int64_t parseLayer(const std::string &prefix) {
  return ::glm::rt::parseHfTensorName(prefix).layer;
}

FailureOr<FlatSymbolRefAttr> Importer::weight(const std::string &name,
                                              const std::string &configKey) {
  if (!weightNames.count(name)) {
    InFlightDiagnostic d = emitError(configLoc(ctx, pack, configKey))
                           << "the pack has no tensor '" << name
                           << "', which config.json implies";
    d.attachNote() << "run `glmc verify " << pack.dir()
                   << "` to see what the pack holds, or fix config.json";
    return failure();
  }
  return FlatSymbolRefAttr::get(&ctx, name);
}

LogicalResult Importer::importBank(
    int64_t layer, const std::vector<const WeightInfo *> &byExpertProj) {
  const int64_t E = cfg.numRoutedExperts, S = cfg.numSharedExperts;
  const int64_t inter = cfg.moeIntermediateSize;
  const int64_t H = (inter + 127) / 128;
  const WeightInfo *first = byExpertProj.front();
  bool trellis = first->format == ::glm::rt::WeightFormat::Trellis;
  int64_t P = trellis && first->parts.size() > 1 ? first->parts.size() : 1;
  if (P != 1 && P != H)
    return emitError(configLoc(ctx, pack, "moe_intermediate_size"))
           << "'" << first->name << "' has " << P << " parts; expected 1 or "
           << H << " (moe_intermediate_size / 128)";
  // Every part lists its own side ranges; ranges shared between parts
  // (per-layer signs, per-expert block scales) repeat and are deduplicated
  // by byte range when bound (Bindings.cpp).
  SmallVector<int64_t> parts, sides;
  SmallVector<int32_t> widths;
  for (const WeightInfo *w : byExpertProj) {
    if ((w->format == ::glm::rt::WeightFormat::Trellis) != trellis ||
        static_cast<int64_t>(trellis ? w->parts.size() : 1) != P)
      return emitError(configLoc(ctx, pack, "n_routed_experts"))
             << "'" << w->name << "' is stored differently from '"
             << first->name << "'; a layer's experts must share a layout";
    for (int64_t h = 0; h < P; ++h) {
      int64_t sideBegin = sides.size() / 4;
      if (trellis) {
        const ::glm::rt::TrellisPart &part = w->parts[h];
        parts.append({fileIndex(part.trellisBytes.file),
                      (int64_t)part.trellisBytes.offset,
                      (int64_t)part.trellisBytes.length});
        for (const ::glm::rt::ByteRange &r : part.sideBytes)
          pushRange(sides, r);
        widths.push_back(part.width.twiceBits);
        availableWidths.insert(part.width.twiceBits);
      } else {
        if (w->ranges.empty())
          return emitError(configLoc(ctx, pack, "n_routed_experts"))
                 << "'" << w->name << "' has no byte range";
        const ::glm::rt::ByteRange &r = w->ranges[0];
        parts.append({fileIndex(r.file), (int64_t)r.offset,
                      (int64_t)r.length});
        for (size_t i = 1; i < w->ranges.size(); ++i)
          pushRange(sides, w->ranges[i]);
      }
      parts.append({sideBegin, (int64_t)(sides.size() / 4)});
    }
  }
  std::string sym = "model.layers." + std::to_string(layer) + ".mlp.experts";
  Type type = trellis ? trellisType(ctx, first->parts[0], 0)
                      : Type(DenseType::get(&ctx, denseFormat(first->format)));
  auto bank = b.create<ExpertsOp>(
      configLoc(ctx, pack, "n_routed_experts"), b.getStringAttr(sym),
      TypeAttr::get(type), b.getI64IntegerAttr(layer), b.getI64IntegerAttr(E),
      b.getI64IntegerAttr(S), b.getI64IntegerAttr(H), b.getI64IntegerAttr(P),
      b.getI64IntegerAttr(cfg.hiddenSize), b.getI64IntegerAttr(inter),
      b.getDenseI64ArrayAttr(parts), b.getDenseI64ArrayAttr(sides),
      DenseI32ArrayAttr());
  (void)bank;
  bankOfLayer[layer] = sym;
  if (trellis) {
    anyTrellisBank = true;
    manifestLayers.push_back(layer);
    manifestTables.push_back(b.getDenseI32ArrayAttr(widths));
  }
  return success();
}

FailureOr<std::set<int64_t>> Importer::mtpLayersToImport() {
  std::set<int64_t> out;
  if (cfg.numNextnPredictLayers <= 0)
    return out;
  std::vector<::glm::rt::HfTensorSpec> specs;
  try {
    specs = ::glm::rt::expectedMtpTensors(cfg);
  } catch (const ::glm::rt::Error &) {
    return out; // a model_type without names: no MTP layer to plan
  }
  for (int64_t m = 0; m < cfg.numNextnPredictLayers; ++m) {
    const int64_t layer = cfg.numLayers + m;
    int64_t stored = 0, expected = 0;
    const ::glm::rt::HfTensorSpec *missing = nullptr;
    for (const ::glm::rt::HfTensorSpec &s : specs) {
      if (s.layer != layer)
        continue;
      ++expected;
      if (pack.find(s.name))
        ++stored;
      else if (!missing)
        missing = &s;
    }
    if (stored == 0) {
      // As glmc verify: a pack may leave the MTP layers out.
      emitRemark(configLoc(ctx, pack, "num_nextn_predict_layers"))
          << "the pack stores no tensor of MTP layer " << layer
          << " (num_nextn_predict_layers = " << cfg.numNextnPredictLayers
          << "): the plan has no MTP layer";
      continue;
    }
    if (missing) {
      InFlightDiagnostic d =
          emitError(configLoc(ctx, pack, "num_nextn_predict_layers"))
          << "the pack stores " << stored << " of the " << expected
          << " tensors of MTP layer " << layer << " but not '" << missing->name
          << "'";
      d.attachNote() << "the pack is incomplete: run `glmc verify "
                     << pack.dir() << "`";
      return failure();
    }
    out.insert(layer);
  }
  return out;
}

void Importer::recordMtp(ModuleOp module, const std::set<int64_t> &layers) {
  if (layers.empty())
    return;
  // An MTP layer is a plain decoder layer with MLA and its own full
  // indexer: one latent row and one index key per token, as a main
  // layer's (the MTP issue's draft graph fills them).
  SmallVector<Attribute> entries;
  for (int64_t l : layers)
    entries.push_back(b.getDictionaryAttr({
        b.getNamedAttr("layer", b.getI64IntegerAttr(l)),
        b.getNamedAttr("latent",
                       b.getI64IntegerAttr(cfg.kvLoraRank + cfg.qkRopeHeadDim)),
        b.getNamedAttr(
            "index_head_dim",
            b.getI64IntegerAttr(cfg.indexNHeads > 0 ? cfg.indexHeadDim : 0)),
        b.getNamedAttr("kpool", b.getI64IntegerAttr(cfg.indexKpool)),
    }));
  module->setAttr("glm.mtp", b.getArrayAttr(entries));
}

LogicalResult Importer::importWeights(ModuleOp module) {
  const int64_t E = cfg.numRoutedExperts, S = cfg.numSharedExperts;
  FailureOr<std::set<int64_t>> mtp = mtpLayersToImport();
  if (failed(mtp))
    return failure();
  recordMtp(module, *mtp);
  if (draft) {
    if (mtp->empty())
      return emitError(configLoc(ctx, pack, "num_nextn_predict_layers"))
             << "--draft mtp needs an MTP layer, and the pack stores none "
             << "(num_nextn_predict_layers = " << cfg.numNextnPredictLayers
             << ")";
    draftLayer = *mtp->begin(); // the first: one draft token per run
  }
  // layer → [(expert, projection)] of its expert weights.
  std::map<int64_t, std::vector<const WeightInfo *>> banks;
  for (const WeightInfo &w : pack.weights()) {
    // Flash's vision tower: not planned (a later issue). The MTP layers
    // (index >= num_hidden_layers) the pack stores whole are weights of
    // the plan that no op of the decode step reads (their draft graph is
    // the MTP issue's).
    if (w.name.rfind("model.visual.", 0) == 0 ||
        (w.layer >= cfg.numLayers && !mtp->count(w.layer)))
      continue;
    bool isExpert = w.expert >= 0 || w.shared;
    if (!isExpert) {
      Type type;
      if (w.format == ::glm::rt::WeightFormat::Trellis) {
        if (w.parts.empty())
          return emitError(configLoc(ctx, pack, "quantization_config"))
                 << "trellis tensor '" << w.name << "' has no parts";
        type = trellisType(ctx, w.parts[0], w.parts[0].width.twiceBits);
      } else {
        type = DenseType::get(&ctx, denseFormat(w.format));
      }
      SmallVector<int64_t> ranges;
      for (const ::glm::rt::ByteRange &r : w.ranges)
        pushRange(ranges, r);
      auto op = b.create<WeightOp>(b.getUnknownLoc(), b.getStringAttr(w.name),
                                   TypeAttr::get(type), b.getStringAttr(w.name),
                                   b.getDenseI64ArrayAttr(w.shape),
                                   b.getDenseI64ArrayAttr(ranges));
      op->setAttr("layer", b.getI64IntegerAttr(w.layer));
      weightNames.insert(w.name);
      continue;
    }
    auto &slots = banks[w.layer];
    slots.resize((E + S) * 3, nullptr);
    int64_t e = w.shared ? E : w.expert;
    if (e < 0 || e >= E + S || w.projection < 0 || w.projection > 2)
      return emitError(configLoc(ctx, pack, "n_routed_experts"))
             << "expert tensor '" << w.name << "' is outside "
             << "n_routed_experts = " << E << " (+" << S << " shared)";
    slots[e * 3 + w.projection] = &w;
  }
  for (auto &[layer, slots] : banks) {
    for (int64_t i = 0; i < (int64_t)slots.size(); ++i)
      if (!slots[i]) {
        InFlightDiagnostic d =
            emitError(configLoc(ctx, pack, "n_routed_experts"))
            << "layer " << layer << " lacks expert " << i / 3
            << (i / 3 >= E ? " (shared)" : "") << " projection "
            << (const char *[]){"gate", "up", "down"}[i % 3];
        d.attachNote() << "the pack is incomplete: run `glmc verify "
                       << pack.dir() << "`";
        return failure();
      }
    if (failed(importBank(layer, slots)))
      return failure();
  }
  (void)module;
  return success();
}

LogicalResult Importer::buildStep(ModuleOp module) {
  Location loc = configLoc(ctx, pack, "num_hidden_layers");
  const int64_t d = cfg.hiddenSize, S = cfg.hcMult;
  const std::string root = cfg.tensorPrefix();
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  auto act = [&](int64_t cols, Type t) {
    return RankedTensorType::get({ShapedType::kDynamic, cols}, t);
  };
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  auto tokensType = RankedTensorType::get({ShapedType::kDynamic}, i32);
  // With a draft graph the step takes a second row vector: the hidden row
  // each draft row starts from (io.draft_rows).
  SmallVector<Type> args = {tokensType};
  if (draftLayer >= 0)
    args.push_back(tokensType);
  auto fn = b.create<func::FuncOp>(loc, "decode_step",
                                   b.getFunctionType(args, {tokensType}));
  Block *entry = fn.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  auto eps = b.getF64FloatAttr(cfg.rmsNormEps);
  // GLM-5.3-Flash clamps every SwiGLU.
  FloatAttr swigluLimit =
      cfg.swigluLimit > 0 ? b.getF64FloatAttr(cfg.swigluLimit) : FloatAttr();
  auto weights = [&](const std::string &prefix,
                     std::initializer_list<const char *> names,
                     const char *key) -> FailureOr<ArrayAttr> {
    SmallVector<Attribute> ws;
    for (const char *n : names) {
      auto w = weight(prefix + n, key);
      if (failed(w))
        return failure();
      ws.push_back(*w);
    }
    return b.getArrayAttr(ws);
  };

  auto embedW = weight(root + "embed_tokens.weight", "vocab_size");
  if (failed(embedW))
    return failure();
  Value x = b.create<EmbedOp>(loc, act(d, f32), entry->getArgument(0), *embedW);
  // With mHC (hc_mult S > 0) the residual is S streams [?, S·d]: each
  // sublayer reads glm.hc_pre's mix of them and glm.hc_post writes back.
  if (S > 0)
    x = b.create<HcStreamsOp>(loc, act(S * d, f32), x, i64(S));
  // The sublayer input of site `site` (and, with mHC, its mix).
  auto sublayerInput = [&](const std::string &p, const char *site,
                           const std::string &normName,
                           Value &mix) -> FailureOr<Value> {
    auto norm = weight(p + normName, "num_hidden_layers");
    if (failed(norm))
      return failure();
    Value in = x;
    if (S > 0) {
      const std::string h = p + "hc_" + site + "_";
      auto fnW = weight(h + "fn", "hc_mult"), base = weight(h + "base", "hc_mult"),
           scale = weight(h + "scale", "hc_mult");
      if (failed(fnW) || failed(base) || failed(scale))
        return failure();
      auto pre = b.create<HcPreOp>(
          loc, TypeRange{act(d, f32), act((2 + S) * S, f32)}, x,
          i64(parseLayer(p)), b.getStringAttr(site), i64(S),
          i64(cfg.hcSinkhornIters), b.getF64FloatAttr(cfg.hcEps), eps, *fnW,
          *base, *scale);
      in = pre.getResult();
      mix = pre.getMix();
    }
    return Value(b.create<RmsNormOp>(loc, in, *norm, eps));
  };
  auto writeBack = [&](Value y, Value mix, int64_t layer) {
    x = S > 0 ? Value(b.create<HcPostOp>(loc, x.getType(), x, y, mix,
                                         i64(layer), i64(S)))
              : Value(b.create<AddOp>(loc, x, y));
  };

  // MLA with its DSA indexer on h: a full indexer scores (and becomes the
  // selection later shared layers reuse), a shared one reuses `selection`.
  auto mla = [&](int64_t l, const std::string &a, Value h, bool fullIndexer,
                 Value &selection) -> FailureOr<Value> {
    auto selType = act(ShapedType::kDynamic, i32);
    auto lAttr = i64(l), hAttr = i64(cfg.indexNHeads),
         dAttr = i64(cfg.indexHeadDim), rAttr = i64(cfg.qkRopeHeadDim),
         kAttr = i64(cfg.indexTopk);
    if (fullIndexer) {
      auto ws = cfg.indexKpool > 1
                    ? weights(a + "indexer.",
                              {"wq_b.weight", "wk.weight", "k_norm.weight",
                               "k_norm.bias", "weights_proj.weight",
                               "index_kpool_compress_gate",
                               "index_kpool_compress_ape"},
                              "index_kpool")
                    : weights(a + "indexer.",
                              {"wq_b.weight", "wk.weight", "k_norm.weight",
                               "k_norm.bias", "weights_proj.weight"},
                              "indexer_types");
      if (failed(ws))
        return failure();
      selection = b.create<DsaIndexerOp>(
          loc, selType, IndexerKindAttr::get(&ctx, IndexerKind::Full), h,
          lAttr, hAttr, dAttr, rAttr, kAttr, *ws, i64(cfg.indexKpool));
    } else {
      if (!selection)
        return emitError(configLoc(ctx, pack, "indexer_types"))
               << "layer " << l << " is a shared indexer layer with no "
               << "full layer before it";
      selection = b.create<DsaIndexerOp>(
          loc, selType, IndexerKindAttr::get(&ctx, IndexerKind::Shared),
          selection, lAttr, hAttr, dAttr, rAttr, kAttr, b.getArrayAttr({}),
          i64(cfg.indexKpool));
    }
    SmallVector<FlatSymbolRefAttr> mw;
    for (const char *n : {"q_a_proj.weight", "q_a_layernorm.weight",
                          "q_b_proj.weight", "kv_a_proj_with_mqa.weight",
                          "kv_a_layernorm.weight", "kv_b_proj.weight",
                          "o_proj.weight"}) {
      auto w = weight(a + n, "q_lora_rank");
      if (failed(w))
        return failure();
      mw.push_back(*w);
    }
    return Value(b.create<MlaOp>(
        loc, act(d, f32), h, selection, i64(l), i64(cfg.numHeads),
        i64(cfg.qLoraRank), i64(cfg.kvLoraRank), i64(cfg.qkNopeHeadDim),
        i64(cfg.qkRopeHeadDim), i64(cfg.vHeadDim),
        b.getF64FloatAttr(cfg.ropeTheta), eps, mw[0], mw[1], mw[2], mw[3],
        mw[4], mw[5], mw[6], ShardAttr()));
  };
  // The feed-forward of layer l (prefix p) on h: MoE or dense MLP.
  auto ffn = [&](int64_t l, const std::string &p, Value h,
                 bool moe) -> FailureOr<Value> {
    if (moe) {
      auto gate = weight(p + "mlp.gate.weight", "n_routed_experts");
      auto bias =
          weight(p + "mlp.gate.e_score_correction_bias", "n_routed_experts");
      if (failed(gate) || failed(bias))
        return failure();
      if (!bankOfLayer.count(l))
        return emitError(configLoc(ctx, pack, "mlp_layer_types"))
               << "layer " << l << " is a MoE layer but the pack has no "
               << "experts for it";
      int64_t k = cfg.numExpertsPerTok;
      auto router = b.create<RouterOp>(
          loc, TypeRange{act(k, i32), act(k, f32)}, h, *gate, *bias,
          i64(cfg.numRoutedExperts), i64(k),
          b.getF64FloatAttr(cfg.routedScalingFactor),
          b.getBoolAttr(cfg.normTopkProb));
      return Value(b.create<MoeOp>(
          loc, act(d, f32), h, router.getIndices(), router.getWeights(),
          FlatSymbolRefAttr::get(&ctx, bankOfLayer[l]), i64(l), ShardAttr(),
          swigluLimit));
    } else {
      SmallVector<FlatSymbolRefAttr> fw;
      for (const char *n :
           {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
        auto w = weight(p + n, "first_k_dense_replace");
        if (failed(w))
          return failure();
        fw.push_back(*w);
      }
      return Value(b.create<MlpOp>(loc, act(d, f32), h, i64(l),
                               i64(cfg.intermediateSize), fw[0], fw[1], fw[2],
                               ShardAttr(), swigluLimit));
    }
  };

  Value selection;
  for (int64_t l = 0; l < cfg.numLayers; ++l) {
    std::string p = root + "layers." + std::to_string(l) + ".";
    std::string a = p + "self_attn.";
    Value mix;
    auto h = sublayerInput(p, "attn", "input_layernorm.weight", mix);
    if (failed(h))
      return failure();
    Value att;
    if (cfg.isKdaLayer(l)) {
      auto ws = weights(a,
                        {"q_proj.weight", "k_proj.weight", "v_proj.weight",
                         "q_conv1d.weight", "k_conv1d.weight",
                         "v_conv1d.weight", "f_a_proj.weight",
                         "f_b_proj.weight", "dt_bias", "A_log",
                         "b_proj.weight", "g_a_proj.weight", "g_b_proj.weight",
                         "o_norm.weight", "o_proj.weight"},
                        "linear_attn_config");
      if (failed(ws))
        return failure();
      att = b.create<KdaOp>(
          loc, act(d, f32), *h, i64(l), i64(cfg.linearNumHeads),
          i64(cfg.linearHeadDim), i64(cfg.linearConvKernel),
          cfg.hasLinearLowerBound ? b.getF64FloatAttr(cfg.linearLowerBound)
                                  : FloatAttr(),
          eps, *ws, ShardAttr());
    } else {
      auto a2 = mla(l, a, *h, cfg.isFullIndexerLayer(l), selection);
      if (failed(a2))
        return failure();
      att = *a2;
    }
    writeBack(att, mix, l);

    h = sublayerInput(p, "ffn", "post_attention_layernorm.weight", mix);
    if (failed(h))
      return failure();
    auto mlpOut = ffn(l, p, *h, cfg.isMoeLayer(l));
    if (failed(mlpOut))
      return failure();
    writeBack(*mlpOut, mix, l);
  }
  if (S > 0) // the unweighted mean of the streams
    x = b.create<HcHeadOp>(loc, act(d, f32), x, i64(S));
  auto finalNorm = weight(root + "norm.weight", "hidden_size");
  auto head = weight(cfg.tieWordEmbeddings ? root + "embed_tokens.weight"
                                           : std::string("lm_head.weight"),
                     "tie_word_embeddings");
  if (failed(finalNorm) || failed(head))
    return failure();
  Value n = b.create<RmsNormOp>(loc, x, *finalNorm, eps);
  Value logits =
      b.create<LmHeadOp>(loc, act(cfg.vocabSize, f32), n, *head, ShardAttr());
  Value next = b.create<SampleOp>(loc, tokensType, logits,
                                  b.getDenseI64ArrayAttr(cfg.eosTokenIds),
                                  b.getF64FloatAttr(1.0), b.getF64FloatAttr(1.0));
  if (draftLayer >= 0) {
    // The MTP draft graph (glm.draft_begin): row b drafts from the step's
    // hidden row rows[b] (the step's second argument) and its token t+1
    // (the step's tokens): x = eh_proj [enorm(embed(t+1)); hnorm(h_t)], one
    // plain pre-norm decoder layer (MLA with its own full indexer, MoE; no
    // mHC, also on Flash), shared_head.norm, the LM head. Its output row
    // replaces the hidden row (glm.carry_rows) so a further draft token
    // starts from it (the CPU reference's CpuForward::mtpStep).
    const int64_t l = draftLayer;
    const std::string p = root + "layers." + std::to_string(l) + ".";
    b.create<DraftBeginOp>(loc, i64(l));
    Value h = b.create<GatherRowsOp>(loc, x.getType(), x, entry->getArgument(1));
    const std::string ownEmbed = p + "embed_tokens.weight";
    auto embed = weightNames.count(ownEmbed) ? weight(ownEmbed, "vocab_size")
                                             : embedW;
    auto enorm = weight(p + "enorm.weight", "num_nextn_predict_layers"),
         hnorm = weight(p + "hnorm.weight", "num_nextn_predict_layers"),
         ehProj = weight(p + "eh_proj.weight", "num_nextn_predict_layers"),
         inNorm = weight(p + "input_layernorm.weight", "num_nextn_predict_layers"),
         postNorm = weight(p + "post_attention_layernorm.weight",
                           "num_nextn_predict_layers"),
         headNorm = weight(p + "shared_head.norm.weight",
                           "num_nextn_predict_layers");
    if (failed(embed) || failed(enorm) || failed(hnorm) || failed(ehProj) ||
        failed(inNorm) || failed(postNorm) || failed(headNorm))
      return failure();
    Value e = b.create<EmbedOp>(loc, act(d, f32), entry->getArgument(0), *embed);
    Value cat = b.create<MtpInputOp>(loc, act(2 * d, f32), e, h, *enorm,
                                     *hnorm, eps);
    auto ehW = SymbolTable::lookupSymbolIn(module, ehProj->getAttr());
    Value y = b.create<DenseGemvOp>(
        loc, act(d, f32), cat, *ehProj,
        TypeAttr::get(cast<WeightOp>(ehW).getType()), i64(d),
        i64(2 * d), b.getBoolAttr(true), ShardAttr());
    Value sel;
    Value hin = b.create<RmsNormOp>(loc, y, *inNorm, eps);
    auto att = mla(l, p + "self_attn.", hin, /*fullIndexer=*/true, sel);
    if (failed(att))
      return failure();
    y = b.create<AddOp>(loc, y, *att);
    hin = b.create<RmsNormOp>(loc, y, *postNorm, eps);
    auto mlp = ffn(l, p, hin, /*moe=*/true);
    if (failed(mlp))
      return failure();
    y = b.create<AddOp>(loc, y, *mlp);
    const std::string ownHead = p + "shared_head.head.weight";
    auto dhead = weightNames.count(ownHead)
                     ? weight(ownHead, "num_nextn_predict_layers")
                     : head;
    if (failed(dhead))
      return failure();
    Value dn = b.create<RmsNormOp>(loc, y, *headNorm, eps);
    Value dl = b.create<LmHeadOp>(loc, act(cfg.vocabSize, f32), dn, *dhead,
                                  ShardAttr());
    b.create<SampleOp>(loc, tokensType, dl,
                       b.getDenseI64ArrayAttr(cfg.eosTokenIds),
                       b.getF64FloatAttr(1.0), b.getF64FloatAttr(1.0));
    // Last: the hidden rows are read by gather_rows above until here.
    b.create<CarryRowsOp>(loc, x.getType(), x, y);
  }
  b.create<func::ReturnOp>(loc, next);
  (void)module;
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
  b.setInsertionPointToEnd(module->getBody());
  // The pack op goes first; its tables are filled once every range is seen.
  auto packOp = b.create<PackOp>(
      FileLineColLoc::get(&ctx, pack.dir(), 1, 1), b.getStringAttr("pack"),
      b.getStringAttr(::glm::rt::packLayoutName(pack.layout())),
      b.getStringAttr(pack.dir()), b.getStrArrayAttr({}),
      b.getStrArrayAttr({}), b.getStringAttr(pack.configHash()),
      b.getStringAttr(pack.indexHash()), b.getStringAttr(pack.manifestHash()),
      b.getStringAttr(manifestName));
  if (failed(importWeights(*module)))
    return nullptr;
  if (anyTrellisBank) {
    SmallVector<int32_t> avail(availableWidths.begin(), availableWidths.end());
    b.create<ManifestOp>(configLoc(ctx, pack, "n_routed_experts"),
                         b.getStringAttr(manifestName.empty() ? "pack"
                                                              : manifestName),
                         b.getDenseI64ArrayAttr(manifestLayers),
                         b.getDenseI32ArrayAttr(avail),
                         b.getArrayAttr(manifestTables));
  }
  if (failed(buildStep(*module)))
    return nullptr;
  SmallVector<StringRef> f(fileOrder.begin(), fileOrder.end()),
      r(roleOrder.begin(), roleOrder.end());
  packOp.setFilesAttr(b.getStrArrayAttr(f));
  packOp.setRolesAttr(b.getStrArrayAttr(r));

  auto has = [&](const char *f) {
    return fs::exists(fs::path(pack.dir()) / f) ? std::string(f)
                                                : std::string();
  };
  module->getOperation()->setAttr(
      "glm.model",
      b.getDictionaryAttr({
          b.getNamedAttr("model_type", b.getStringAttr(cfg.modelType)),
          b.getNamedAttr("architecture", b.getStringAttr(cfg.architecture)),
          b.getNamedAttr("hidden", b.getI64IntegerAttr(cfg.hiddenSize)),
          b.getNamedAttr("layers", b.getI64IntegerAttr(cfg.numLayers)),
          b.getNamedAttr("vocab", b.getI64IntegerAttr(cfg.vocabSize)),
          b.getNamedAttr("eos", b.getDenseI64ArrayAttr(cfg.eosTokenIds)),
          b.getNamedAttr("pad", b.getI64IntegerAttr(cfg.padTokenId)),
          b.getNamedAttr("tokenizer", b.getStringAttr(has("tokenizer.json"))),
          b.getNamedAttr("chat_template",
                         b.getStringAttr(has("chat_template.jinja"))),
      }));
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

OwningOpRef<ModuleOp> importModel(MLIRContext &ctx, const Pack &pack,
                                  const std::string &manifestName,
                                  bool draft) {
  ctx.getOrLoadDialect<GlmDialect>();
  ctx.getOrLoadDialect<func::FuncDialect>();
  if (!pack.config()) {
    emitError(FileLineColLoc::get(&ctx, pack.dir(), 1, 1))
            .attachNote()
        << "the pack has no config.json; `glmc compile` needs the model "
           "geometry: copy the model's config.json into the pack";
    return nullptr;
  }
  return Importer(ctx, pack, manifestName, draft).run();
}

OwningOpRef<ModuleOp> importPack(MLIRContext &ctx, const std::string &dir,
                                 const ImportOptions &opt) {
  ::glm::rt::PackOpenOptions po;
  po.manifest = opt.manifest;
  po.width = opt.width;
  po.indexOnly = true;
  std::unique_ptr<Pack> pack;
  try {
    pack = Pack::open(dir, po);
  } catch (const ::glm::rt::Error &e) {
    std::string where = (fs::path(dir) / "config.json").string();
    if (!opt.manifest.empty())
      where = fs::exists(opt.manifest)
                  ? opt.manifest
                  : (fs::path(dir) / "manifests" /
                     ("exlr8-manifest-" + opt.manifest + ".json"))
                        .string();
    InFlightDiagnostic d = emitError(fileLoc(ctx, where, 1, 1))
                           << e.what();
    d.attachNote() << "check the pack with `glmc verify " << dir
                   << "` and the --manifest name or path";
    return nullptr;
  }
  OwningOpRef<ModuleOp> module =
      importModel(ctx, *pack, opt.manifest, opt.draft);
  if (opt.keepPack)
    *opt.keepPack = std::move(pack);
  return module;
}

} // namespace glmc
