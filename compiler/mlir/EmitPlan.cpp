//===- EmitPlan.cpp - glm-emit-plan: fill plans/plan.h and write it -------===//
//
// Per rank: one weight buffer holding every byte range the rank binds
// (Bindings.h), one KV buffer per attention layer (+ index keys of full
// indexer layers), the activation arena of glm-plan-memory, and the decode
// graph: one OpDef per kernel launch or collective, each with the weight
// bytes it reads per token. Kernels come from glm-emit-kernels. The plan is
// serialised deterministically (plans/plan.h) to `output`.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Bindings.h"
#include "compiler/mlir/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <set>

#ifdef GLM_PLANS_AVAILABLE
#include "plans/plan.h"
#include "runtime/base/error.h"
#endif

using namespace mlir;
using namespace mlir::glm;

namespace glmc {
#define GEN_PASS_DEF_GLMEMITPLAN
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

constexpr uint64_t kAlign = 256;
static uint64_t alignUp(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

static int64_t intAttr(DictionaryAttr d, StringRef k, int64_t dflt = 0) {
  if (d)
    if (auto a = d.getAs<IntegerAttr>(k))
      return a.getInt();
  return dflt;
}
static std::string strAttr(DictionaryAttr d, StringRef k) {
  if (d)
    if (auto a = d.getAs<StringAttr>(k))
      return a.str();
  return "";
}

#ifdef GLM_PLANS_AVAILABLE
namespace gp = ::glm::plan;

static gp::OpKind opKind(Operation *op) {
  if (isa<FusedExpertGemvOp>(op))
    return gp::OpKind::ExpertGemv;
  if (auto g = dyn_cast<DenseGemvOp>(op))
    return g.getShard() && g.getShard()->getKind() == ShardKind::Vocab
               ? gp::OpKind::LmHead
               : gp::OpKind::DenseGemv;
  if (isa<MlpOp>(op))
    return gp::OpKind::DenseGemv;
  if (isa<AttentionDecodeOp, MlaOp>(op))
    return gp::OpKind::MlaAttention;
  if (isa<IndexerTopkOp, DsaIndexerOp>(op))
    return gp::OpKind::IndexerTopk;
  if (isa<RmsNormOp, AddRmsNormOp>(op))
    return gp::OpKind::RmsNorm;
  if (isa<EmbedOp>(op))
    return gp::OpKind::Embed;
  if (isa<RouterOp>(op))
    return gp::OpKind::Router;
  if (isa<SampleOp>(op))
    return gp::OpKind::Argmax;
  if (isa<AllReduceOp>(op))
    return gp::OpKind::AllReduce;
  if (isa<AllGatherOp>(op))
    return gp::OpKind::AllGather;
  if (isa<AddOp>(op))
    return gp::OpKind::Add;
  if (isa<LmHeadOp>(op))
    return gp::OpKind::LmHead;
  return gp::OpKind::Other;
}

static gp::Projection projectionOf(int32_t p) {
  switch (p) {
  case 0:
    return gp::Projection::Gate;
  case 1:
    return gp::Projection::Up;
  case 2:
    return gp::Projection::Down;
  }
  return gp::Projection::None;
}

/// Layer of an op, -1 when it has none.
static int32_t layerOf(Operation *op) {
  if (auto l = op->getAttrOfType<IntegerAttr>("layer"))
    return l.getInt();
  return -1;
}
#endif

struct EmitPlan : glmc::impl::GlmEmitPlanBase<EmitPlan> {
  using GlmEmitPlanBase::GlmEmitPlanBase;

  void runOnOperation() override {
#ifndef GLM_PLANS_AVAILABLE
    getOperation().emitError()
        << "glm-emit-plan: this build has no plans library (flatc missing)";
    return signalPassFailure();
#else
    ModuleOp module = getOperation();
    auto packs = llvm::to_vector(module.getOps<PackOp>());
    auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
    if (packs.size() != 1 || funcs.size() != 1) {
      module.emitError() << "glm-emit-plan: needs one glm.pack and one "
                            "func.func (the decode step)";
      return signalPassFailure();
    }
    PackOp pack = packs[0];
    func::FuncOp step = funcs[0];
    FailureOr<glmc::BindingTable> table = glmc::computeBindings(module);
    if (failed(table))
      return signalPassFailure();
    try {
      gp::Plan plan = buildPlan(module, pack, step, *table);
      gp::finalizePlan(plan);
      gp::validatePlan(plan, output.empty() ? std::string("plan") : std::string(output));
      if (!output.empty())
        gp::writePlan(plan, std::string(output));
      annotate(module, plan, *table);
    } catch (const ::glm::rt::Error &e) {
      module.emitError() << "glm-emit-plan: " << e.what();
      return signalPassFailure();
    }
#endif
  }

#ifdef GLM_PLANS_AVAILABLE
  gp::Plan buildPlan(ModuleOp module, PackOp pack, func::FuncOp step,
                     const glmc::BindingTable &table) {
    gp::Plan plan;
    plan.compilerVersion = "glmc 0.1";
    plan.configHash = pack.getConfigHash().str();
    plan.manifestHash = pack.getManifestHash().str();
    plan.indexHash = pack.getIndexHash().str();
    plan.numRanks = table.ranks;
    if (auto archs = module->getAttrOfType<ArrayAttr>("glm.archs"))
      for (Attribute a : archs)
        plan.targetArchs.push_back(cast<StringAttr>(a).str());

    auto model = module->getAttrOfType<DictionaryAttr>("glm.model");
    gp::ModelMeta &m = plan.model;
    m.modelType = strAttr(model, "model_type");
    m.architecture = strAttr(model, "architecture");
    m.layout = pack.getLayout().str();
    m.manifest = pack.getManifest().str();
    m.hiddenSize = intAttr(model, "hidden");
    m.numLayers = intAttr(model, "layers");
    m.vocabSize = intAttr(model, "vocab");
    m.padTokenId = intAttr(model, "pad", -1);
    if (model)
      if (auto eos = model.getAs<DenseI64ArrayAttr>("eos"))
        m.eosTokenIds.assign(eos.asArrayRef().begin(), eos.asArrayRef().end());
    std::string tok = strAttr(model, "tokenizer");
    m.tokenizerFile = tok;
    m.chatTemplateFile = strAttr(model, "chat_template");
    step.walk([&](SampleOp s) {
      m.temperature = s.getTemperature().convertToDouble();
      m.topP = s.getTopP().convertToDouble();
    });
    auto kv = module->getAttrOfType<DictionaryAttr>("glm.kv");
    m.maxContext = intAttr(kv, "max_context");
    m.kvDtype = strAttr(kv, "dtype") == "fp8" ? gp::DType::E4M3
                                              : gp::DType::BF16;
    uint64_t kvElem = m.kvDtype == gp::DType::E4M3 ? 1 : 2;
    plan.compileOptions = {{"ranks", std::to_string(table.ranks)},
                           {"max_context", std::to_string(m.maxContext)},
                           {"kv_dtype", strAttr(kv, "dtype")},
                           {"layout", m.layout},
                           {"manifest", m.manifest}};

    // Kernels shared by every rank.
    std::map<std::string, int32_t> kernelIndex;
    if (auto specs = module->getAttrOfType<ArrayAttr>("glm.kernel_specs"))
      for (Attribute a : specs) {
        auto d = cast<DictionaryAttr>(a);
        gp::KernelDef k;
        k.name = strAttr(d, "name");
        k.templateName = strAttr(d, "family");
        if (auto args = d.getAs<DictionaryAttr>("args"))
          for (NamedAttribute kv : args)
            k.templateArgs[kv.getName().str()] =
                cast<StringAttr>(kv.getValue()).str();
        k.source = strAttr(d, "source");
        k.sourceHash = strAttr(d, "source_hash");
        k.cacheKey = strAttr(d, "cache_key");
        if (auto opts = d.getAs<ArrayAttr>("options"))
          for (Attribute o : opts)
            k.nvrtcOptions.push_back(cast<StringAttr>(o).str());
        if (auto bins = d.getAs<ArrayAttr>("binaries"))
          for (Attribute bAttr : bins) {
            auto bd = cast<DictionaryAttr>(bAttr);
            gp::KernelBinary bin;
            bin.arch = strAttr(bd, "arch");
            bin.ptx = strAttr(bd, "ptx");
            std::string cubin = strAttr(bd, "cubin");
            bin.cubin.assign(cubin.begin(), cubin.end());
            k.binaries.push_back(std::move(bin));
          }
        k.launch.blockX = intAttr(d, "block");
        // Take the name first: the right side of `=` is evaluated (and k
        // moved from) before the map lookup on the left.
        std::string name = k.name;
        kernelIndex[name] = gp::addKernel(plan, std::move(k));
      }

    ArrayAttr files = pack.getFiles();
    Block &body = step.getBody().front();
    for (int64_t r = 0; r < table.ranks; ++r) {
      const glmc::RankUsage &use = table.perRank[r];
      gp::RankPlan rp;
      rp.rank = r;
      uint64_t top = 0;
      // Weights: one buffer, every bound range 256-aligned inside it.
      gp::BufferDef wbuf;
      wbuf.name = "weights";
      wbuf.kind = gp::BufferKind::Weight;
      uint64_t woff = 0;
      for (const glmc::RankBinding &b : use.bindings) {
        gp::WeightBinding wb;
        wb.file = cast<StringAttr>(files[b.file]).str();
        wb.offset = b.offset;
        wb.length = b.length;
        wb.buffer = 0;
        wb.bufferOffset = woff;
        woff += alignUp(b.length);
        wb.tensor = b.tensor.str();
        wb.layer = b.layer;
        wb.expert = b.shared ? -2 : b.expert;
        wb.projection = projectionOf(b.projection);
        wb.half = b.half;
        wb.widthX2 = b.widthX2;
        wb.tag = b.sideVector       ? gp::WeightTag::SideVector
                 : b.half >= 0      ? gp::WeightTag::TrellisHalf
                 : b.projection >= 0 && b.widthX2 ? gp::WeightTag::TrellisTensor
                 : b.widthX2        ? gp::WeightTag::TrellisTensor
                                    : gp::WeightTag::Dense;
        rp.weights.push_back(std::move(wb));
      }
      wbuf.bytes = std::max<uint64_t>(woff, kAlign);
      rp.buffers.push_back(wbuf);
      top = alignUp(wbuf.bytes);

      // KV cache and index keys per layer.
      step.walk([&](Operation *op) {
        int64_t row = 0, layer = layerOf(op);
        std::string name;
        if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
          row = a.getKvLora() + a.getQkRope();
          name = "kv." + std::to_string(layer);
        } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
          row = ix.getHeadDim();
          name = "index_keys." + std::to_string(layer);
        }
        if (!row)
          return;
        gp::BufferDef kb;
        kb.name = name;
        kb.kind = gp::BufferKind::KvCache;
        kb.dtype = m.kvDtype;
        kb.layer = layer;
        kb.bytes = alignUp(m.maxContext * row * kvElem);
        kb.arenaOffset = top;
        top += kb.bytes;
        rp.buffers.push_back(kb);
      });

      // Activations at their arena offsets (glm-plan-memory).
      uint64_t actBase = top, maxTokens = intAttr(kv, "max_tokens", 1);
      llvm::DenseMap<Value, uint32_t> bufferOf;
      auto valueBuffer = [&](Value v, uint64_t off) {
        auto t = cast<RankedTensorType>(v.getType());
        gp::BufferDef ab;
        ab.name = "act." + std::to_string(rp.buffers.size());
        ab.kind = isa<BlockArgument>(v) ? gp::BufferKind::Io
                                        : gp::BufferKind::Activation;
        ab.dtype = t.getElementType().isInteger(32) ? gp::DType::I32
                                                    : gp::DType::F32;
        uint64_t elems = 1;
        for (int64_t d : t.getShape())
          elems *= ShapedType::isDynamic(d) ? maxTokens : d;
        ab.bytes = alignUp(elems * 4);
        ab.arenaOffset = actBase + off;
        bufferOf[v] = rp.buffers.size();
        rp.buffers.push_back(ab);
      };
      uint64_t argOff = 0;
      for (BlockArgument a : body.getArguments()) {
        valueBuffer(a, argOff);
        argOff += rp.buffers.back().bytes;
      }
      gp::GraphDef graph;
      graph.kind = gp::GraphKind::Decode;
      graph.size = 1;
      std::set<std::string> charged; // symbols whose bytes an op already read
      for (Operation &op : body) {
        if (auto offs = op.getAttrOfType<DenseI64ArrayAttr>("glm.arena"))
          for (auto [res, off] : llvm::zip(op.getResults(), offs.asArrayRef()))
            valueBuffer(res, off);
        if (isa<func::ReturnOp>(op))
          continue;
        gp::OpDef od;
        od.kind = opKind(&op);
        od.layer = layerOf(&op);
        // Ops without a layer attribute (norms, q_a/kv_a projections) belong
        // to the layer of the weight they read.
        if (od.layer < 0)
          for (NamedAttribute attr : op.getAttrs())
            if (auto sym = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
              if (Operation *w = SymbolTable::lookupSymbolIn(module, sym))
                if (int32_t l = layerOf(w); l >= 0) {
                  od.layer = l;
                  break;
                }
        // A collective belongs to the layer of the block it reduces.
        if (od.layer < 0 && isa<AllReduceOp, AllGatherOp>(op))
          if (Operation *src = op.getOperand(0).getDefiningOp())
            od.layer = layerOf(src);
        std::string base =
            (od.layer >= 0 ? "l" + std::to_string(od.layer) + "." : "") +
            op.getName().stripDialect().str();
        for (Value v : op.getOperands())
          if (bufferOf.count(v))
            od.inputs.push_back(bufferOf[v]);
        for (Value v : op.getResults())
          if (bufferOf.count(v))
            od.outputs.push_back(bufferOf[v]);
        for (NamedAttribute attr : op.getAttrs()) {
          SmallVector<FlatSymbolRefAttr> refs;
          if (auto s = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
            refs.push_back(s);
          else if (auto arr = dyn_cast<ArrayAttr>(attr.getValue()))
            for (Attribute a : arr)
              if (auto s = dyn_cast<FlatSymbolRefAttr>(a))
                refs.push_back(s);
          for (FlatSymbolRefAttr s : refs) {
            auto it = use.bySymbol.find(s.getValue().str());
            if (it != use.bySymbol.end() && charged.insert(it->first).second)
              od.bytesRead += it->second;
          }
        }
        if (isa<AllReduceOp, AllGatherOp>(op)) {
          gp::CollectiveDef c;
          c.kind = isa<AllReduceOp>(op) ? gp::CollectiveKind::AllReduce
                                        : gp::CollectiveKind::AllGather;
          c.elements = cast<RankedTensorType>(op.getResult(0).getType())
                           .getShape()
                           .back();
          c.layer = od.layer;
          c.buffer = od.outputs.empty() ? -1 : od.outputs[0];
          od.collective = rp.collectives.size();
          rp.collectives.push_back(c);
          od.name = base;
          graph.ops.push_back(od);
          continue;
        }
        auto kernels = op.getAttrOfType<ArrayAttr>("glm.kernels");
        if (!kernels || kernels.empty()) {
          od.name = base;
          graph.ops.push_back(od);
          continue;
        }
        // One OpDef per launch; the op's weight bytes go to its first launch.
        for (auto [i, k] : llvm::enumerate(kernels)) {
          gp::OpDef launch = od;
          launch.name = base + (kernels.size() > 1 ? "." + std::to_string(i)
                                                   : std::string());
          auto it = kernelIndex.find(cast<StringAttr>(k).str());
          launch.kernel = it == kernelIndex.end() ? -1 : it->second;
          if (i)
            launch.bytesRead = 0;
          graph.ops.push_back(std::move(launch));
        }
      }
      rp.graphs.push_back(std::move(graph));
      plan.ranks.push_back(std::move(rp));
    }
    return plan;
  }

  void annotate(ModuleOp module, const gp::Plan &plan,
                const glmc::BindingTable &table) {
    OpBuilder b(&getContext());
    SmallVector<int64_t> bindings, perToken, expert, weights;
    for (auto [rp, use] : llvm::zip(plan.ranks, table.perRank)) {
      bindings.push_back(rp.weights.size());
      perToken.push_back(rp.bytesPerToken);
      expert.push_back(use.expertBytesPerToken);
      weights.push_back(use.weightBytes);
    }
    module->setAttr(
        "glm.plan_summary",
        b.getDictionaryAttr({
            b.getNamedAttr("ranks", b.getI64IntegerAttr(plan.numRanks)),
            b.getNamedAttr("kernels",
                           b.getI64IntegerAttr(plan.kernels.size())),
            b.getNamedAttr("bindings", b.getDenseI64ArrayAttr(bindings)),
            b.getNamedAttr("weight_bytes", b.getDenseI64ArrayAttr(weights)),
            b.getNamedAttr("bytes_per_token",
                           b.getDenseI64ArrayAttr(perToken)),
            b.getNamedAttr("expert_bytes_per_token",
                           b.getDenseI64ArrayAttr(expert)),
            b.getNamedAttr("active_bytes", b.getI64IntegerAttr(
                                               table.activeBytesPerToken)),
            b.getNamedAttr("pack_bytes",
                           b.getI64IntegerAttr(table.packBytes)),
        }));
  }
#endif
};

} // namespace
