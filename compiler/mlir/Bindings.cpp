//===- Bindings.cpp - which rank binds and reads which weight bytes -------===//
//
// See Bindings.h. Walks the decode step once to learn how each weight symbol
// is split (the #glm.shard of its user), then places every byte range.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Bindings.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <set>
#include <tuple>

using namespace mlir;
using namespace mlir::glm;

namespace glmc {

/// apportion() into `out` (resized to weights.size()): no allocation in the
/// loop over a full-size model's ~10^6 expert parts.
static void apportionInto(uint64_t total, const std::vector<uint64_t> &weights,
                          std::vector<uint64_t> &out) {
  out.assign(weights.size(), 0);
  unsigned __int128 sum = 0, cum = 0;
  for (uint64_t w : weights)
    sum += w;
  if (sum == 0)
    return;
  uint64_t prev = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    cum += weights[i];
    uint64_t upTo = static_cast<uint64_t>(cum * total / sum);
    out[i] = upTo - prev;
    prev = upTo;
  }
}

std::vector<uint64_t> apportion(uint64_t total,
                                const std::vector<uint64_t> &weights) {
  std::vector<uint64_t> out;
  apportionInto(total, weights, out);
  return out;
}

using RangeKey = std::tuple<int64_t, int64_t, int64_t>;

namespace {

/// How the op that reads a weight splits it over ranks.
struct Use {
  enum Kind { Unused, Replicated, Units, Embed } kind = Unused;
  std::vector<uint64_t> unitsPerRank; // Units: how many units each rank owns
};

/// Units per rank of a heads/vocab/halves split.
static std::vector<uint64_t> unitsOf(ShardAttr shard, int64_t ranks,
                                     int64_t expert = 0) {
  std::vector<uint64_t> per(ranks, 0);
  if (shard.getKind() == ShardKind::Halves) {
    for (int64_t u = 0; u < shard.getUnits(); ++u)
      ++per[shard.ownerOf(expert, u) % ranks];
  } else if (shard.getKind() == ShardKind::Replicated) {
    for (auto &p : per)
      p = 1;
  } else {
    for (int64_t r = 0; r < ranks; ++r) {
      auto [b, e] = shard.rangeOf(r);
      per[r] = e - b;
    }
  }
  return per;
}

/// Records the split of every symbol an op of the decode step names.
static void collectUses(ModuleOp module, int64_t ranks,
                        llvm::StringMap<Use> &uses) {
  auto mark = [&](StringRef sym, Use u) {
    Use &cur = uses[sym];
    // A split use wins over a replicated one (q_a read whole, q_b by heads).
    if (cur.kind == Use::Unused || (cur.kind == Use::Replicated &&
                                    u.kind != Use::Replicated))
      cur = std::move(u);
  };
  auto split = [&](std::optional<ShardAttr> shard) {
    Use u;
    if (shard && shard->getRanks() > 1) {
      u.kind = Use::Units;
      u.unitsPerRank = unitsOf(*shard, ranks);
    } else {
      u.kind = Use::Replicated;
    }
    return u;
  };
  Use replicated;
  replicated.kind = Use::Replicated;
  module.walk([&](Operation *op) {
    if (isa<ModuleOp, func::FuncOp, WeightOp, ExpertsOp, PackOp, ManifestOp>(
            op))
      return;
    if (auto e = dyn_cast<EmbedOp>(op)) {
      Use u;
      u.kind = Use::Embed;
      mark(e.getWeight(), u);
      return;
    }
    std::set<StringRef> splitSyms;
    std::optional<ShardAttr> shard;
    if (auto g = dyn_cast<DenseGemvOp>(op)) {
      shard = g.getShard();
      splitSyms.insert(g.getWeight());
    } else if (auto a = dyn_cast<AttentionDecodeOp>(op)) {
      shard = a.getShard();
      splitSyms.insert(a.getKvB());
    } else if (auto m = dyn_cast<MlaOp>(op)) {
      shard = m.getShard();
      splitSyms = {m.getQB(), m.getKvB(), m.getO()};
    } else if (auto m = dyn_cast<MlpOp>(op)) {
      shard = m.getShard();
      splitSyms = {m.getGate(), m.getUp(), m.getDown()};
    } else if (auto h = dyn_cast<LmHeadOp>(op)) {
      shard = h.getShard();
      splitSyms.insert(h.getWeight());
    }
    for (NamedAttribute attr : op->getAttrs()) {
      SmallVector<FlatSymbolRefAttr> refs;
      if (auto r = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
        refs.push_back(r);
      else if (auto arr = dyn_cast<ArrayAttr>(attr.getValue()))
        for (Attribute a : arr)
          if (auto r = dyn_cast<FlatSymbolRefAttr>(a))
            refs.push_back(r);
      for (FlatSymbolRefAttr r : refs)
        mark(r.getValue(),
             splitSyms.count(r.getValue()) ? split(shard) : replicated);
    }
  });
}

} // namespace

FailureOr<BindingTable> computeBindings(ModuleOp module) {
  BindingTable t;
  if (auto r = module->getAttrOfType<IntegerAttr>("glm.ranks"))
    t.ranks = r.getInt();
  const int64_t n = t.ranks;
  t.perRank.resize(n);
  llvm::StringMap<Use> uses;
  collectUses(module, n, uses);

  // Ranges bound so far: weights and sides may repeat (a tensor listed by
  // two symbols, a side vector read by many parts); expert parts never do.
  llvm::DenseMap<RangeKey, uint64_t> boundMask; // bit r: bound on rank r
  auto bind = [&](int64_t rank, RankBinding b, bool unique = false) {
    if (!unique) {
      uint64_t &mask = boundMask[RangeKey{b.file, b.offset, b.length}];
      uint64_t bit = uint64_t(1) << rank;
      bool fresh = mask == 0;
      if (mask & bit)
        return;
      mask |= bit;
      if (fresh)
        t.packBytes += b.length;
    }
    t.perRank[rank].weightBytes += b.length;
    t.perRank[rank].bindings.push_back(std::move(b));
  };
  auto addPerToken = [&](const std::vector<uint64_t> &perRank, bool expert,
                         StringRef sym) {
    for (int64_t r = 0; r < n; ++r) {
      t.perRank[r].bytesPerToken += perRank[r];
      t.perRank[r].bySymbol[sym.str()] += perRank[r];
      if (expert)
        t.perRank[r].expertBytesPerToken += perRank[r];
    }
  };
  const std::vector<uint64_t> evenly(n, 1);
  // k of the op reading each bank, found in one walk (not one per bank).
  llvm::StringMap<int64_t> topKOf;
  module.walk([&](Operation *user) {
    if (auto f = dyn_cast<FusedExpertGemvOp>(user))
      topKOf[f.getBank()] = f.getTopK();
    else if (auto m = dyn_cast<MoeOp>(user))
      topKOf[m.getExperts()] =
          cast<RankedTensorType>(m.getIndices().getType()).getShape().back();
  });

  // Room for every rank's bindings up front (expert parts are most of
  // them; a part is bound on about one rank, a side vector on a few).
  {
    size_t ranges = 0;
    for (Operation &op : module.getBody()->getOperations())
      if (auto w = dyn_cast<WeightOp>(op))
        ranges += w.getRanges().size() / 4 * n;
      else if (auto bank = dyn_cast<ExpertsOp>(op))
        ranges += bank.getParts().size() / ExpertsOp::kPartFields +
                  bank.getSides().size() / 4 * n;
    for (RankUsage &u : t.perRank)
      u.bindings.reserve(ranges / n + ranges / (8 * n) + 16);
  }
  std::vector<uint64_t> owned(n, 0), share; // per expert part, reused
  // The MTP layers (glm.mtp, from the import): no op of the decode step
  // reads them, but a draft graph will on every rank, as a main layer's
  // attention and router are read: bound like those, never read per token.
  std::set<int64_t> mtpLayers;
  if (auto mtp = module->getAttrOfType<ArrayAttr>("glm.mtp"))
    for (Attribute a : mtp)
      if (auto l = cast<DictionaryAttr>(a).getAs<IntegerAttr>("layer"))
        mtpLayers.insert(l.getInt());

  for (Operation &op : module.getBody()->getOperations()) {
    if (auto w = dyn_cast<WeightOp>(op)) {
      const Use &u = uses.lookup(w.getSymName());
      int32_t layer = -1;
      if (auto l = w->getAttrOfType<IntegerAttr>("layer"))
        layer = l.getInt();
      int32_t widthX2 = 0;
      if (auto tt = dyn_cast<TrellisType>(w.getType()))
        widthX2 = tt.getTwiceBits();
      ArrayRef<int64_t> r = w.getRanges();
      std::vector<int64_t> ranks;
      if (u.kind == Use::Unused && !mtpLayers.count(layer))
        ranks.push_back((layer < 0 ? 0 : layer) % n);
      else
        for (int64_t i = 0; i < n; ++i)
          ranks.push_back(i);
      for (size_t i = 0; i < r.size(); i += 4)
        for (int64_t rank : ranks) {
          RankBinding b;
          b.file = r[i];
          b.offset = r[i + 1];
          b.length = r[i + 2];
          b.role = r[i + 3];
          b.tensor = w.getName();
          b.layer = layer;
          b.widthX2 = widthX2;
          b.replicated = ranks.size() > 1;
          bind(rank, std::move(b));
        }
      uint64_t bytes = w.getByteSize();
      if (u.kind == Use::Units)
        addPerToken(apportion(bytes, u.unitsPerRank), false, w.getSymName());
      else if (u.kind == Use::Replicated)
        addPerToken(apportion(bytes, evenly), false, w.getSymName());
      if (u.kind == Use::Units || u.kind == Use::Replicated)
        t.activeBytesPerToken += bytes;
      continue;
    }
    auto bank = dyn_cast<ExpertsOp>(op);
    if (!bank)
      continue;
    const int64_t E = bank.getExperts(), S = bank.getShared();
    const int64_t H = bank.getHalves(), P = bank.getPartsPerProj();
    ShardAttr rule = ShardAttr::get(module.getContext(), ShardKind::Halves, n,
                                    H, bank.getLayer());
    ArrayRef<int64_t> parts = bank.getParts(), sides = bank.getSides();
    std::optional<ArrayRef<int32_t>> widths;
    if (bank.getWidths())
      widths = *bank.getWidths();
    int32_t uniformWidth = 0;
    if (auto tt = dyn_cast<TrellisType>(bank.getType()))
      uniformWidth = tt.getTwiceBits();
    // Routed bytes each rank reads if every expert were active, and the
    // shared bytes it reads every token.
    std::vector<uint64_t> routed(n, 0), shared(n, 0);
    std::vector<uint64_t> routedW(n, 0), sharedW(n, 0); // trellis weights
    uint64_t routedTotal = 0;
    // Side ranges (deduplicated by bytes): readers per rank, role, and
    // whether a shared expert reads it.
    struct Side {
      std::vector<uint64_t> readers;
      int64_t role = 0;
      bool shared = false;
    };
    llvm::DenseMap<RangeKey, unsigned> sideIndex; // range → sideList index
    std::vector<std::pair<RangeKey, Side>> sideList; // first-seen order
    for (int64_t e = 0; e < E + S; ++e) {
      bool isShared = e >= E;
      for (int64_t p = 0; p < 3; ++p)
        for (int64_t h = 0; h < P; ++h) {
          int64_t idx = bank.partIndex(e, p, h);
          const int64_t *row = &parts[idx * ExpertsOp::kPartFields];
          // Halves this part covers and how many each rank owns.
          owned.assign(n, 0);
          if (P == H)
            ++owned[rule.ownerOf(e, h)];
          else
            for (int64_t hh = 0; hh < H; ++hh)
              ++owned[rule.ownerOf(e, hh)];
          int64_t owners = llvm::count_if(owned, [](uint64_t c) { return c; });
          apportionInto(row[2], owned, share);
          t.packBytes += row[2];
          for (int64_t rank = 0; rank < n; ++rank) {
            if (!owned[rank])
              continue;
            RankBinding b;
            b.file = row[0];
            b.offset = row[1];
            b.length = row[2];
            b.role = 0;
            b.tensor = bank.getSymName();
            b.layer = bank.getLayer();
            b.expert = isShared ? -2 : e;
            b.projection = p;
            b.half = P == H ? h : -1;
            b.widthX2 = widths ? (*widths)[idx] : uniformWidth;
            b.replicated = owners > 1;
            b.shared = isShared;
            bind(rank, b, /*unique=*/true);
            (isShared ? shared : routed)[rank] += share[rank];
            // A K-bit trellis stores K/8 bytes per weight.
            if (b.widthX2 > 0)
              (isShared ? sharedW : routedW)[rank] +=
                  share[rank] * 16 / uint64_t(b.widthX2);
            for (int64_t s = row[3]; s < row[4]; ++s) {
              const int64_t *q = &sides[s * 4];
              auto [it, fresh] = sideIndex.try_emplace(
                  RangeKey{q[0], q[1], q[2]}, sideList.size());
              if (fresh)
                sideList.push_back({RangeKey{q[0], q[1], q[2]}, Side{}});
              Side &side = sideList[it->second].second;
              side.readers.resize(n, 0);
              ++side.readers[rank];
              side.role = q[3];
              side.shared |= isShared;
            }
          }
          if (!isShared)
            routedTotal += row[2];
        }
    }
    for (auto &[key, side] : sideList) {
      const std::vector<uint64_t> &readers = side.readers;
      int64_t q[4] = {std::get<0>(key), std::get<1>(key), std::get<2>(key),
                      side.role};
      int64_t owners = llvm::count_if(readers, [](uint64_t c) { return c; });
      for (int64_t rank = 0; rank < n; ++rank) {
        if (!readers[rank])
          continue;
        RankBinding b;
        b.file = q[0];
        b.offset = q[1];
        b.length = q[2];
        b.role = q[3];
        b.tensor = bank.getSymName();
        b.layer = bank.getLayer();
        b.replicated = owners > 1;
        b.sideVector = true;
        bind(rank, b);
      }
      apportionInto(q[2], readers, share);
      for (int64_t rank = 0; rank < n; ++rank)
        (side.shared ? shared : routed)[rank] += share[rank];
      if (!side.shared)
        routedTotal += q[2];
    }
    // Expected routed bytes per token: top_k of E experts (uniform routing).
    const int64_t topK = topKOf.lookup(bank.getSymName());
    if (topK <= 0)
      continue; // a bank no op reads (MTP): bound, never read per token
                // (its halves by the rule above, as a main layer's)
    uint64_t active = static_cast<uint64_t>(
        static_cast<unsigned __int128>(routedTotal) * topK / E);
    std::vector<uint64_t> perRank = apportion(active, routed);
    for (int64_t r = 0; r < n; ++r) {
      perRank[r] += shared[r];
      BankUse &bu = t.perRank[r].banks[bank.getSymName().str()];
      bu.routedAll = routed[r];
      bu.shared = shared[r];
      bu.routedWeightsAll = routedW[r];
      bu.sharedWeights = sharedW[r];
      bu.experts = E;
      bu.topK = topK;
    }
    addPerToken(perRank, true, bank.getSymName());
    for (int64_t r = 0; r < n; ++r)
      t.activeBytesPerToken += perRank[r];
  }
  return t;
}

} // namespace glmc
