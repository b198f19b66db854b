//===- tp_plan.cpp - the rank layout a plan prescribes --------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/tp.h"

#include "plans/plan.h"

#include <map>
#include <set>
#include <tuple>

namespace glm::rt::cpu {

TpLayout tpLayoutFromPlan(const ModelConfig &c, const plan::Plan &p) {
  check(p.numRanks >= 1, "plan has ", p.numRanks, " ranks");
  TpLayout t = TpLayout::fromRule(c, (int)p.numRanks);
  const int64_t E = c.numRoutedExperts;
  // (layer, expert, half) -> rank; half -1 = the whole expert tensor.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::set<int>> seen;
  for (const plan::RankPlan &rp : p.ranks) {
    for (const plan::WeightBinding &b : rp.weights) {
      bool mlp = b.projection == plan::Projection::Gate ||
                 b.projection == plan::Projection::Up ||
                 b.projection == plan::Projection::Down;
      if (!mlp || b.expert == -1 || b.layer < 0)
        continue;
      int64_t e = b.expert == -2 ? E : b.expert;
      // Layers past num_hidden_layers are the MTP layers a plan binds.
      check(b.layer < c.numLayers + c.numNextnPredictLayers && e >= 0 && e <= E,
            "plan binds layer ", b.layer, " expert ", b.expert,
            ", which config.json does not have; re-plan for this pack");
      check(b.half < t.expertHalves, "plan binds layer ", b.layer,
            " expert ", b.expert, " half ", b.half, " but experts have ",
            t.expertHalves, " halves; re-plan for this pack");
      seen[{b.layer, e, b.half}].insert((int)rp.rank);
    }
  }
  for (const auto &[key, ranks] : seen) {
    auto [l, e, h] = key;
    TpLayerLayout &layer = l < (int64_t)t.layers.size()
                               ? t.layers[l]
                               : t.mtpLayers.at(l - t.layers.size());
    if (h < 0) {
      // A whole tensor split over several ranks by byte ranges says nothing
      // about halves: keep the rule for it.
      if (ranks.size() == 1)
        for (int64_t hh = 0; hh < t.expertHalves; ++hh)
          layer.expertHalfRank[e * t.expertHalves + hh] = *ranks.begin();
      continue;
    }
    check(ranks.size() == 1, "plan binds layer ", l, " expert ", e,
          " half ", h, " to ", ranks.size(),
          " ranks; a half must live on one rank (re-plan)");
    layer.expertHalfRank[e * t.expertHalves + h] = *ranks.begin();
  }
  return t;
}

} // namespace glm::rt::cpu
