//===- PlanMemory.cpp - glm-plan-memory: per-rank memory and its limit ----===//
//
// Four numbers per rank: weight bytes bound (Bindings.h), the KV cache
// (latent cache of every layer, all heads need it, plus the index keys of
// full indexer layers; the MTP layers' too, glm.mtp), the recurrent state of
// the KDA heads it owns (GLM-5.3-Flash, per sequence) and one activation arena
// laid out by liveness over the decode step (best fit, 256-byte aligned).
// Sparks freeze rather than fail when memory runs out, so a rank over the
// budget refuses the compile with a table of what needs how much.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Bindings.h"
#include "compiler/mlir/KernelBuilds.h"
#include "compiler/mlir/Passes.h"

#include "codegen/templates/kv_cache.cuh"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

#include <map>
#include <sstream>
#include <set>

using namespace mlir;
using namespace mlir::glm;

namespace glmc {
#define GEN_PASS_DEF_GLMPLANMEMORY
#include "compiler/mlir/Passes.h.inc"
} // namespace glmc

namespace {

constexpr uint64_t kAlign = 256;
constexpr double kGiB = 1024.0 * 1024 * 1024;

static uint64_t alignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// First-fit-by-size free list over [0, arena): offsets of freed blocks.
class Arena {
public:
  uint64_t allocate(uint64_t bytes) {
    bytes = alignUp(bytes);
    // Best fit: the smallest free block that holds `bytes`.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= bytes &&
          (best == free_.end() || it->second < best->second))
        best = it;
    if (best == free_.end()) {
      uint64_t off = top_;
      top_ += bytes;
      return off;
    }
    uint64_t off = best->first, size = best->second;
    free_.erase(best);
    if (size > bytes)
      free_[off + bytes] = size - bytes;
    return off;
  }
  void release(uint64_t off, uint64_t bytes) {
    bytes = alignUp(bytes);
    auto it = free_.emplace(off, bytes).first;
    // Merge with the next and the previous free block.
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  uint64_t size() const { return top_; }

private:
  std::map<uint64_t, uint64_t> free_;
  uint64_t top_ = 0;
};

struct PlanMemory : glmc::impl::GlmPlanMemoryBase<PlanMemory> {
  using GlmPlanMemoryBase::GlmPlanMemoryBase;

  /// Bytes of one activation value for `maxTokens` tokens.
  uint64_t valueBytes(Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      return 0;
    uint64_t elems = 1;
    for (int64_t d : t.getShape())
      elems *= ShapedType::isDynamic(d) ? static_cast<uint64_t>(maxTokens) : d;
    return elems * std::max<uint64_t>(1, t.getElementTypeBitWidth() / 8);
  }

  /// Lays out the values of `func` by liveness; tags each op with the arena
  /// offsets of its results (`glm.arena`) and returns the arena size.
  uint64_t planArena(func::FuncOp func) {
    Arena arena;
    llvm::DenseMap<Value, Operation *> lastUse;
    llvm::DenseMap<Value, uint64_t> offset;
    Block &body = func.getBody().front();
    for (BlockArgument a : body.getArguments())
      lastUse[a] = nullptr;
    for (Operation &op : body)
      for (Value v : op.getOperands())
        lastUse[v] = &op;
    for (BlockArgument a : body.getArguments())
      offset[a] = arena.allocate(valueBytes(a));
    OpBuilder b(func.getContext());
    for (Operation &op : body) {
      SmallVector<int64_t> offs;
      // An all-reduce sums in place (the collective reads and writes one
      // buffer): its result takes its input's block when that is the
      // input's last use.
      // So does the vocabulary all-gather: each rank wrote its slice of
      // the full-width rows in place (glm-emit-plan).
      // So does glm.carry_rows: the draft's rows over the hidden rows.
      const bool inPlace =
          isa<AllReduceOp, CarryRowsOp>(op) ||
          (isa<AllGatherOp>(op) &&
           op.getOperand(0).getType() == op.getResult(0).getType());
      if (inPlace && lastUse.lookup(op.getOperand(0)) == &op &&
          offset.count(op.getOperand(0))) {
        Value in = op.getOperand(0), r = op.getResult(0);
        offset[r] = offset[in];
        offset.erase(in);
        lastUse.erase(in);
        op.setAttr("glm.arena", b.getDenseI64ArrayAttr({int64_t(offset[r])}));
        if (r.use_empty()) {
          arena.release(offset[r], valueBytes(r));
          offset.erase(r);
        }
        continue;
      }
      for (Value r : op.getResults()) {
        offset[r] = arena.allocate(valueBytes(r));
        offs.push_back(offset[r]);
      }
      if (!offs.empty())
        op.setAttr("glm.arena", b.getDenseI64ArrayAttr(offs));
      // Operands whose last use is this op die after it. The step's
      // arguments (Io rows the runtime writes) live through the whole step:
      // a graph replayed without new rows reads them again.
      for (Value v : llvm::to_vector(op.getOperands()))
        if (lastUse.lookup(v) == &op && offset.count(v) &&
            !isa<BlockArgument>(v)) {
          arena.release(offset[v], valueBytes(v));
          offset.erase(v);
          lastUse.erase(v);
        }
      // Results nobody reads die at once.
      for (Value r : op.getResults())
        if (r.use_empty()) {
          arena.release(offset[r], valueBytes(r));
          offset.erase(r);
        }
    }
    return arena.size();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (kvDtype != "f32" && kvDtype != "bf16" && kvDtype != "fp8") {
      module.emitError() << "glm-plan-memory: kv-dtype must be f32, bf16 or "
                            "fp8, got '"
                         << kvDtype << "'";
      return signalPassFailure();
    }
    if (maxContext < 1 || maxTokens < 1 || maxSequences < 1 ||
        memoryPerSpark < 0) {
      module.emitError() << "glm-plan-memory: max-context, max-tokens and "
                            "max-sequences must be positive and "
                            "memory-per-spark not negative";
      return signalPassFailure();
    }
    // Bytes of one cached row of n values in the KV dtype's storage form
    // (templates/kv_cache.cuh): 4n f32, 2n bf16, n + 4 fp8 (E4M3 values and
    // the row's fp32 scale).
    const int form = kvDtype == "fp8"    ? ::glm::kv::kE4m3
                     : kvDtype == "bf16" ? ::glm::kv::kBf16
                                         : ::glm::kv::kF32;
    auto rowBytes = [&](uint64_t n) -> uint64_t {
      return n ? uint64_t(::glm::kv::rowBytes(form, (long long)n)) : 0;
    };

    // KV cache: one latent row per token per attention layer; index keys per
    // token on full indexer layers. Every rank holds all of it (each head
    // reads the whole latent).
    uint64_t kvBytes = 0, indexBytes = 0;
    // Index keys per token; a k-pool (Flash) keeps one pooled key per pool
    // and a ring of the pool being filled (keys and compress-gate rows,
    // fp32 whatever the KV dtype: the pooling's inputs).
    auto indexKeys = [&](uint64_t hd, uint64_t pool) -> uint64_t {
      if (pool <= 1)
        return maxContext * rowBytes(hd);
      return (maxContext / pool) * rowBytes(hd) + 2 * pool * hd * 4;
    };
    // The MTP layers' caches are counted from glm.mtp below, whether or
    // not the module has their draft graph's ops.
    std::set<int64_t> layers, mtpLayers;
    if (auto mtp = module->getAttrOfType<ArrayAttr>("glm.mtp"))
      for (Attribute a : mtp)
        if (auto l = cast<DictionaryAttr>(a).getAs<IntegerAttr>("layer"))
          mtpLayers.insert(l.getInt());
    module.walk([&](Operation *op) {
      int64_t latent = 0, layer = -1;
      if (auto m = dyn_cast<MlaOp>(op)) {
        latent = m.getKvLora() + m.getQkRope();
        layer = m.getLayer();
      } else if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
        latent = a.getKvLora() + a.getQkRope();
        layer = a.getLayer();
      } else if (auto ix = dyn_cast<DsaIndexerOp>(op)) {
        if (ix.getKind() == IndexerKind::Full && !mtpLayers.count(ix.getLayer()))
          indexBytes += indexKeys(ix.getHeadDim(), ix.getKpool());
      } else if (auto ix = dyn_cast<IndexerTopkOp>(op)) {
        if (!mtpLayers.count(ix.getLayer()))
          indexBytes += indexKeys(ix.getHeadDim(), ix.getKpool());
      }
      if (mtpLayers.count(layer))
        return;
      if (latent && layers.insert(layer).second)
        kvBytes += maxContext * rowBytes(latent);
    });
    // The MTP layers (glm.mtp): no op of the decode step, but their draft
    // graph (the MTP issue) keeps a latent cache and index keys per
    // sequence like a main layer's: planned now so the budget holds them.
    uint64_t mtpKvBytes = 0;
    if (auto mtp = module->getAttrOfType<ArrayAttr>("glm.mtp"))
      for (Attribute a : mtp) {
        auto d = cast<DictionaryAttr>(a);
        auto get = [&](StringRef k) -> uint64_t {
          auto v = d.getAs<IntegerAttr>(k);
          return v && v.getInt() > 0 ? uint64_t(v.getInt()) : 0;
        };
        mtpKvBytes += maxContext * rowBytes(get("latent")) +
                      indexKeys(get("index_head_dim"),
                                std::max<uint64_t>(get("kpool"), 1));
      }
    kvBytes += indexBytes + mtpKvBytes;
    // Rows the caches hold: max_context per KV slot, or (paged) pages of
    // page-tokens rows (templates/kv_cache.cuh SlotRows).
    uint64_t kvRows = uint64_t(maxContext) * uint64_t(maxSequences);
    int64_t kvPages = pages;
    if (pageTokens) {
      bool pooled = false;
      module.walk([&](Operation *op) {
        if (auto ix = dyn_cast<DsaIndexerOp>(op))
          pooled |= ix.getKpool() > 1;
        if (auto ix = dyn_cast<IndexerTopkOp>(op))
          pooled |= ix.getKpool() > 1;
      });
      if (pageTokens < 64 || (pageTokens & (pageTokens - 1)) ||
          maxContext % pageTokens || pages < 0) {
        module.emitError() << "glm-plan-memory: page-tokens " << pageTokens
                           << " must be a power of two from 64 dividing "
                              "max-context "
                           << maxContext << ", and pages not negative";
        return signalPassFailure();
      }
      if (pooled) {
        module.emitError()
            << "glm-plan-memory: a paged KV cache (--kv-page-tokens) needs "
               "every cache row-per-token; this model's indexer pools keys "
               "(a k-pool, GLM-5.3-Flash), whose keys and KDA state stay "
               "per sequence: compile it without --kv-page-tokens";
        return signalPassFailure();
      }
      // Default: the unpaged bytes, and the sink page (runtime/exec/
      // kv_pages.h: table entries past a sequence's pages name it).
      if (kvPages == 0)
        kvPages = maxSequences * (maxContext / pageTokens) + 1;
      // One sequence of the whole context must fit: a lone sequence (glm-engine
      // run) reads slot 0's identity table, whose pages must be distinct.
      if (kvPages < maxContext / pageTokens + 1) {
        module.emitError()
            << "glm-plan-memory: --kv-pages " << kvPages
            << " holds less than one sequence of the whole context ("
            << maxContext / pageTokens << " pages of " << pageTokens
            << " tokens) and the sink page; give at least "
            << maxContext / pageTokens + 1;
        return signalPassFailure();
      }
      kvRows = uint64_t(kvPages) * uint64_t(pageTokens);
    }
    // Every cache is rows of tokens here (a k-pool is never paged, so its
    // pooled keys and ring stay per slot).
    if (pageTokens) {
      kvBytes = kvBytes / uint64_t(maxContext) * kvRows;
      mtpKvBytes = mtpKvBytes / uint64_t(maxContext) * kvRows;
    } else {
      kvBytes *= static_cast<uint64_t>(maxSequences); // one set per KV slot
      mtpKvBytes *= static_cast<uint64_t>(maxSequences);
    }

    const FailureOr<glmc::BindingTable> &table =
        getAnalysis<glmc::BindingAnalysis>().table;
    if (failed(table))
      return signalPassFailure();
    // Recurrent state (KDA): per sequence, on the rank that owns each head.
    std::vector<uint64_t> stateBytes(table->perRank.size(), 0);
    // Before glm-fuse glm.kda, after it glm.kda_decode.
    auto countState = [&](int64_t heads, int64_t headDim, int64_t kernel,
                          std::optional<ShardAttr> shard) {
      const uint64_t hd = headDim, taps = kernel - 1;
      const uint64_t perHead = (hd * hd + 3 * hd * taps) * sizeof(float) *
                               static_cast<uint64_t>(maxSequences);
      for (size_t r = 0; r < stateBytes.size(); ++r) {
        auto [h0, h1] = shard ? shard->rangeOf((int64_t)r)
                              : std::pair<int64_t, int64_t>{0, heads};
        stateBytes[r] += uint64_t(h1 - h0) * perHead;
      }
    };
    module.walk([&](KdaOp k) {
      countState(k.getHeads(), k.getHeadDim(), k.getConvKernel(), k.getShard());
    });
    module.walk([&](KdaDecodeOp k) {
      countState(k.getHeads(), k.getHeadDim(), k.getConvKernel(), k.getShard());
    });

    uint64_t arenaBytes = 0;
    for (auto func : module.getOps<func::FuncOp>())
      arenaBytes = std::max(arenaBytes, planArena(func));

    OpBuilder b(&getContext());
    SmallVector<Attribute> perRank;
    uint64_t budget = static_cast<uint64_t>(memoryPerSpark * kGiB);
    bool over = false;
    for (auto [r, use] : llvm::enumerate(table->perRank)) {
      uint64_t total = use.weightBytes + kvBytes + stateBytes[r] + arenaBytes;
      over |= budget && total > budget;
      perRank.push_back(b.getDictionaryAttr({
          b.getNamedAttr("rank", b.getI64IntegerAttr(r)),
          b.getNamedAttr("weights", b.getI64IntegerAttr(use.weightBytes)),
          b.getNamedAttr("kv", b.getI64IntegerAttr(kvBytes)),
          b.getNamedAttr("state", b.getI64IntegerAttr(stateBytes[r])),
          b.getNamedAttr("activations", b.getI64IntegerAttr(arenaBytes)),
          b.getNamedAttr("total", b.getI64IntegerAttr(total)),
      }));
    }
    if (over) {
      std::ostringstream gib;
      gib << double(memoryPerSpark);
      InFlightDiagnostic d = module.emitError()
                             << "the plan does not fit " << gib.str()
                             << " GiB per Spark; per rank (GiB):\n";
      // The state column only where a model has recurrent state (Flash).
      const bool anyState =
          std::any_of(stateBytes.begin(), stateBytes.end(),
                      [](uint64_t v) { return v != 0; });
      d << "  rank   weights        KV" << (anyState ? "     state" : "")
        << "  activations     total    budget\n";
      for (auto [r, use] : llvm::enumerate(table->perRank)) {
        uint64_t total =
            use.weightBytes + kvBytes + stateBytes[r] + arenaBytes;
        std::string line, state;
        if (anyState)
          state = llvm::formatv("  {0,8:f2}", stateBytes[r] / kGiB).str();
        llvm::raw_string_ostream os(line);
        os << llvm::format("  %4zu  %8.2f  %8.2f%s  %11.2f  %8.2f  %8.2f%s\n",
                          r, use.weightBytes / kGiB, kvBytes / kGiB,
                          state.c_str(), arenaBytes / kGiB, total / kGiB,
                          double(memoryPerSpark), total > budget ? "  OVER" : "");
        d << os.str();
      }
      d.attachNote() << "use more Sparks (--sparks), a shorter --max-context, "
                        "--kv-dtype fp8 or a smaller manifest";
      return signalPassFailure();
    }
    // Attributes only: who binds which bytes is unchanged.
    // The memory plan changes no kernel: NVRTC builds glm-emit-kernels
    // started before this pass keep running for glm-emit-plan.
    markAnalysesPreserved<glmc::BindingAnalysis, glmc::KernelBuilds>();
    module->setAttr("glm.memory", b.getArrayAttr(perRank));
    SmallVector<NamedAttribute> kv = {
        b.getNamedAttr("max_context", b.getI64IntegerAttr(maxContext)),
        b.getNamedAttr("dtype", b.getStringAttr(kvDtype)),
        b.getNamedAttr("bytes", b.getI64IntegerAttr(kvBytes)),
        b.getNamedAttr("max_tokens", b.getI64IntegerAttr(maxTokens)),
        b.getNamedAttr("slots", b.getI64IntegerAttr(maxSequences)),
    };
    if (pageTokens) {
      kv.push_back(
          b.getNamedAttr("page_tokens", b.getI64IntegerAttr(pageTokens)));
      kv.push_back(b.getNamedAttr("pages", b.getI64IntegerAttr(kvPages)));
    }
    if (mtpKvBytes) // of `bytes`: the MTP layers' caches
      kv.push_back(
          b.getNamedAttr("mtp_bytes", b.getI64IntegerAttr(mtpKvBytes)));
    module->setAttr("glm.kv", b.getDictionaryAttr(kv));
  }
};

} // namespace
