//===- ShardTp.cpp - glm-shard-tp: split the model over N ranks -----------===//
//
// Marks every model-level block with how it is split (#glm.shard) and
// inserts the collectives: an all-reduce after attention (MLA or KDA: o_proj
// partial sums), after each MoE and dense MLP, an all-gather after the LM
// head. mHC's stream mixing is replicated (a few hundred multiply-adds).
// The program stays SPMD: one copy, every rank runs it on its own units.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::glm;

namespace glmc {
#define GEN_PASS_DEF_GLMSHARDTP
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

constexpr int64_t kMaxRanks = 64;

/// Replaces the uses of `op`'s single result by a collective of it.
template <typename CollectiveOp>
static void addCollectiveAfter(Operation *op, int64_t ranks) {
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(op);
  Value v = op->getResult(0);
  auto c = b.create<CollectiveOp>(op->getLoc(), v.getType(), v,
                                  b.getI64IntegerAttr(ranks));
  v.replaceAllUsesExcept(c.getResult(), c);
}

struct ShardTp : glmc::impl::GlmShardTpBase<ShardTp> {
  using GlmShardTpBase::GlmShardTpBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (ranks < 1 || ranks > kMaxRanks) {
      module.emitError() << "glm-shard-tp: ranks must be in [1, " << kMaxRanks
                         << "], got " << static_cast<int64_t>(ranks);
      return signalPassFailure();
    }
    if (module->hasAttr("glm.ranks")) {
      module.emitError() << "glm-shard-tp: module is already sharded over "
                         << module->getAttr("glm.ranks") << " ranks";
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    SymbolTable symbols(module);
    auto shard = [&](ShardKind kind, int64_t units, int64_t layer) {
      return ShardAttr::get(ctx, kind, ranks, units, layer);
    };
    WalkResult result = module.walk([&](Operation *op) -> WalkResult {
      if (auto mla = dyn_cast<MlaOp>(op)) {
        mla.setShardAttr(
            shard(ShardKind::Heads, mla.getHeads(), mla.getLayer()));
        addCollectiveAfter<AllReduceOp>(op, ranks);
      } else if (auto kda = dyn_cast<KdaOp>(op)) {
        // KDA heads split like MLA heads; o_proj's partial sums all-reduce.
        kda.setShardAttr(
            shard(ShardKind::Heads, kda.getHeads(), kda.getLayer()));
        addCollectiveAfter<AllReduceOp>(op, ranks);
      } else if (auto moe = dyn_cast<MoeOp>(op)) {
        auto bank = symbols.lookup<ExpertsOp>(moe.getExperts());
        if (!bank)
          return moe.emitOpError() << "names no glm.experts bank '"
                                   << moe.getExperts() << "'";
        moe.setShardAttr(
            shard(ShardKind::Halves, bank.getHalves(), moe.getLayer()));
        addCollectiveAfter<AllReduceOp>(op, ranks);
      } else if (auto mlp = dyn_cast<MlpOp>(op)) {
        mlp.setShardAttr(shard(ShardKind::Halves, (mlp.getInter() + 127) / 128,
                               mlp.getLayer()));
        addCollectiveAfter<AllReduceOp>(op, ranks);
      } else if (auto head = dyn_cast<LmHeadOp>(op)) {
        int64_t vocab =
            cast<RankedTensorType>(head.getType()).getShape().back();
        head.setShardAttr(shard(ShardKind::Vocab, vocab, -1));
        addCollectiveAfter<AllGatherOp>(op, ranks);
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    module->setAttr("glm.ranks", OpBuilder(ctx).getI64IntegerAttr(ranks));
  }
};

} // namespace
