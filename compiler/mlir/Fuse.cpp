//===- Fuse.cpp - glm-fuse: model-level blocks → kernel-level ops ---------===//
//
// Each model-level block becomes the kernels that run it: MoE → one
// fused_expert_gemv; MLA → q_a/kv_a/q_b projections, attention_decode and
// o_proj; a full DSA indexer → indexer_topk sharing the MLA's q_a (shared
// indexers vanish: their users read the source selection); LM head → a
// vocabulary-split dense_gemv; residual add + RMSNorm → add_rms_norm.
// glm.mlp, glm.embed, glm.router and glm.sample are already single kernels.
// GLM-5.3-Flash: glm.kda → its projection GEMVs (this rank's heads' rows of
// q/k/v/f_b/g_b/b; f_a and g_a whole), glm.kda_decode and an input-split
// o_proj; the mHC ops (hc_streams, hc_pre = fn GEMV + mhc_mix, hc_post,
// hc_head) stay as they are: each is one kernel family (two for hc_pre),
// as glm.mlp is. A k-pool indexer keeps its kpool on glm.indexer_topk.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"

#include <set>

using namespace mlir;
using namespace mlir::glm;

namespace glmc {
#define GEN_PASS_DEF_GLMFUSE
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

struct Fuser {
  ModuleOp module;
  SymbolTable symbols;
  OpBuilder b;
  int64_t ranks;

  explicit Fuser(ModuleOp m)
      : module(m), symbols(m), b(m.getContext()),
        ranks(m->hasAttrOfType<IntegerAttr>("glm.ranks")
                  ? m->getAttrOfType<IntegerAttr>("glm.ranks").getInt()
                  : 1) {}

  RankedTensorType act(int64_t cols, Type elt) {
    return RankedTensorType::get({ShapedType::kDynamic, cols}, elt);
  }

  /// y = W x for weight `sym`; shape and format from its glm.weight.
  FailureOr<Value> gemv(Operation *at, Value x, FlatSymbolRefAttr sym,
                        ShardAttr shard = {}, bool splitOut = true) {
    auto w = symbols.lookup<WeightOp>(sym.getValue());
    if (!w || w.getShape().size() != 2)
      return at->emitOpError() << "names no 2-D glm.weight '" << sym << "'";
    int64_t out = w.getShape()[0], in = w.getShape()[1];
    auto op = b.create<DenseGemvOp>(
        at->getLoc(), act(out, b.getF32Type()), x, sym,
        TypeAttr::get(w.getType()), b.getI64IntegerAttr(out),
        b.getI64IntegerAttr(in), b.getBoolAttr(splitOut), shard);
    return op.getResult();
  }

  LogicalResult fuseMla(MlaOp mla) {
    // A full indexer of this layer shares q_a: compute it before the indexer.
    auto indexer = mla.getSelection().getDefiningOp<DsaIndexerOp>();
    bool shareQa = indexer && indexer.getKind() == IndexerKind::Full &&
                   indexer.getInput() == mla.getInput();
    b.setInsertionPoint(shareQa ? indexer.getOperation() : mla.getOperation());
    FailureOr<Value> qaRaw = gemv(mla, mla.getInput(), mla.getQAAttr());
    if (failed(qaRaw))
      return failure();
    Value qa = b.create<RmsNormOp>(mla.getLoc(), *qaRaw, mla.getQANormAttr(),
                                   mla.getEpsAttr());
    if (shareQa) {
      auto topk = b.create<IndexerTopkOp>(
          indexer.getLoc(), indexer.getType(), qa, indexer.getInput(),
          indexer.getLayerAttr(), indexer.getHeadsAttr(),
          indexer.getHeadDimAttr(), indexer.getRopeAttr(),
          indexer.getTopkAttr(), indexer.getWeightsAttr(),
          indexer.getKpoolAttr());
      indexer.replaceAllUsesWith(topk.getResult());
      indexer.erase();
    }
    b.setInsertionPoint(mla);
    ShardAttr shard =
        mla.getShardAttr()
            ? mla.getShardAttr()
            : ShardAttr::get(b.getContext(), ShardKind::Heads, 1,
                             mla.getHeads(), mla.getLayer());
    FailureOr<Value> q = gemv(mla, qa, mla.getQBAttr(), shard, true);
    FailureOr<Value> kv = gemv(mla, mla.getInput(), mla.getKvAAttr());
    if (failed(q) || failed(kv))
      return failure();
    int64_t h = mla.getHeads();
    auto att = b.create<AttentionDecodeOp>(
        mla.getLoc(), act(h * mla.getVHead(), b.getF32Type()), *q, *kv,
        mla.getSelection(), mla.getLayerAttr(), mla.getHeadsAttr(),
        mla.getKvLoraAttr(), mla.getQkNopeAttr(), mla.getQkRopeAttr(),
        mla.getVHeadAttr(), mla.getRopeThetaAttr(), mla.getEpsAttr(),
        mla.getKvBAttr(), mla.getKvANormAttr(), shard);
    FailureOr<Value> o = gemv(mla, att.getResult(), mla.getOAttr(), shard,
                              /*splitOut=*/false);
    if (failed(o))
      return failure();
    mla.replaceAllUsesWith(*o);
    mla.erase();
    return success();
  }

  /// glm.kda → q, k, v, f_a → f_b, b, g_a → g_b GEMVs, glm.kda_decode (the
  /// conv, delta rule and gated norm on the rank's heads) and o_proj reading
  /// the heads' columns (zero for other ranks' heads: a partial sum that
  /// glm-shard-tp's all-reduce completes).
  LogicalResult fuseKda(KdaOp kda) {
    b.setInsertionPoint(kda);
    ArrayAttr w = kda.getWeights();
    auto sym = [&](unsigned i) { return cast<FlatSymbolRefAttr>(w[i]); };
    ShardAttr shard = kda.getShardAttr()
                          ? kda.getShardAttr()
                          : ShardAttr::get(b.getContext(), ShardKind::Heads, 1,
                                           kda.getHeads(), kda.getLayer());
    Value h = kda.getInput();
    // Weights (KdaOp order): q k v q_conv k_conv v_conv f_a f_b dt_bias
    // A_log b g_a g_b o_norm o.
    FailureOr<Value> q = gemv(kda, h, sym(0), shard);
    FailureOr<Value> k = gemv(kda, h, sym(1), shard);
    FailureOr<Value> v = gemv(kda, h, sym(2), shard);
    FailureOr<Value> fa = gemv(kda, h, sym(6)); // low rank: every head's
    FailureOr<Value> bb = gemv(kda, h, sym(10), shard);
    FailureOr<Value> ga = gemv(kda, h, sym(11));
    if (failed(q) || failed(k) || failed(v) || failed(fa) || failed(bb) ||
        failed(ga))
      return failure();
    FailureOr<Value> f = gemv(kda, *fa, sym(7), shard);
    FailureOr<Value> g = gemv(kda, *ga, sym(12), shard);
    if (failed(f) || failed(g))
      return failure();
    const int64_t width = kda.getHeads() * kda.getHeadDim();
    auto dec = b.create<KdaDecodeOp>(
        kda.getLoc(), act(width, b.getF32Type()), *q, *k, *v, *f, *g, *bb,
        kda.getLayerAttr(), kda.getHeadsAttr(), kda.getHeadDimAttr(),
        kda.getConvKernelAttr(), kda.getLowerBoundAttr(), kda.getEpsAttr(),
        b.getArrayAttr({w[3], w[4], w[5], w[8], w[9], w[13]}), shard);
    FailureOr<Value> o = gemv(kda, dec.getResult(), sym(14), shard,
                              /*splitOut=*/false);
    if (failed(o))
      return failure();
    kda.replaceAllUsesWith(*o);
    kda.erase();
    return success();
  }

  LogicalResult fuseMoe(MoeOp moe) {
    auto bank = symbols.lookup<ExpertsOp>(moe.getExperts());
    if (!bank)
      return moe.emitOpError() << "names no glm.experts bank";
    b.setInsertionPoint(moe);
    ShardAttr shard = moe.getShardAttr()
                          ? moe.getShardAttr()
                          : ShardAttr::get(b.getContext(), ShardKind::Halves,
                                           1, bank.getHalves(), moe.getLayer());
    SmallVector<int32_t> widths;
    CodebookAttr codebook;
    bool e4m3 = false;
    TypeAttr dense;
    if (auto t = dyn_cast<TrellisType>(bank.getType())) {
      if (!bank.getWidths() && !t.isResolved())
        return bank.emitOpError()
               << "has unresolved widths: run glm-select-width before glm-fuse";
      std::set<int32_t> set;
      if (bank.getWidths())
        set.insert(bank.getWidths()->begin(), bank.getWidths()->end());
      else
        set.insert(t.getTwiceBits());
      widths.assign(set.begin(), set.end());
      codebook = CodebookAttr::get(b.getContext(), t.getCodebook());
      e4m3 = t.getE4m3();
    } else {
      dense = TypeAttr::get(bank.getType());
    }
    int64_t topK =
        cast<RankedTensorType>(moe.getIndices().getType()).getShape().back();
    if (ShapedType::isDynamic(topK))
      return moe.emitOpError() << "needs a static top_k (indices columns)";
    auto fused = b.create<FusedExpertGemvOp>(
        moe.getLoc(), moe.getType(), moe.getInput(), moe.getIndices(),
        moe.getWeights(), moe.getExpertsAttr(), moe.getLayerAttr(),
        b.getI64IntegerAttr(bank.getExperts()),
        b.getI64IntegerAttr(bank.getShared()), b.getI64IntegerAttr(topK),
        b.getI64IntegerAttr(bank.getHidden()),
        b.getI64IntegerAttr(bank.getInter()),
        b.getI64IntegerAttr(bank.getHalves()), b.getDenseI32ArrayAttr(widths),
        codebook, b.getBoolAttr(e4m3), dense, shard, moe.getSwigluLimitAttr());
    moe.replaceAllUsesWith(fused.getResult());
    moe.erase();
    return success();
  }

  LogicalResult fuseLmHead(LmHeadOp head) {
    b.setInsertionPoint(head);
    FailureOr<Value> y =
        gemv(head, head.getInput(), head.getWeightAttr(),
             head.getShardAttr() ? head.getShardAttr() : ShardAttr(), true);
    if (failed(y))
      return failure();
    head.replaceAllUsesWith(*y);
    head.erase();
    return success();
  }

  /// x = add(a, b); n = rms_norm(x) → (x, n) = add_rms_norm(a, b).
  void fuseAddNorm(AddOp add) {
    RmsNormOp norm;
    for (Operation *user : add->getUsers())
      if (auto n = dyn_cast<RmsNormOp>(user))
        norm = n;
    if (!norm)
      return;
    b.setInsertionPoint(norm);
    Type t = add.getType();
    auto fused = b.create<AddRmsNormOp>(add.getLoc(), TypeRange{t, t},
                                        add.getLhs(), add.getRhs(),
                                        norm.getWeightAttr(),
                                        norm.getEpsAttr());
    // The add's users before the norm (none in a decode step) keep the add.
    norm.replaceAllUsesWith(fused.getNormed());
    norm.erase();
    add.getResult().replaceUsesWithIf(fused.getSum(), [&](OpOperand &use) {
      return fused->isBeforeInBlock(use.getOwner());
    });
    if (add->use_empty())
      add.erase();
  }

  LogicalResult run() {
    SmallVector<Operation *> work;
    module.walk([&](Operation *op) {
      if (isa<MlaOp, MoeOp, LmHeadOp, KdaOp>(op))
        work.push_back(op);
    });
    for (Operation *op : work) {
      LogicalResult r = success();
      if (auto mla = dyn_cast<MlaOp>(op))
        r = fuseMla(mla);
      else if (auto moe = dyn_cast<MoeOp>(op))
        r = fuseMoe(moe);
      else if (auto head = dyn_cast<LmHeadOp>(op))
        r = fuseLmHead(head);
      else if (auto kda = dyn_cast<KdaOp>(op))
        r = fuseKda(kda);
      if (failed(r))
        return failure();
    }
    // Shared indexers forward the selection of their full source layer.
    SmallVector<DsaIndexerOp> shared;
    module.walk([&](DsaIndexerOp op) {
      if (op.getKind() == IndexerKind::Shared)
        shared.push_back(op);
    });
    for (DsaIndexerOp op : shared) {
      op.replaceAllUsesWith(op.getInput());
      op.erase();
    }
    SmallVector<AddOp> adds;
    module.walk([&](AddOp op) { adds.push_back(op); });
    for (AddOp add : adds)
      fuseAddNorm(add);
    return success();
  }
};

struct Fuse : glmc::impl::GlmFuseBase<Fuse> {
  void runOnOperation() override {
    Fuser f(getOperation());
    if (failed(f.run()))
      signalPassFailure();
  }
};

} // namespace
