//===- tp.h - which rank computes which part of the model -----------------===//
//
// The reference executor runs every rank's share in one process and performs
// the collectives itself. A TpLayout says, per layer, which rank owns each
// attention head, each 128-channel half of each expert (the shared expert is
// expert n_routed_experts) and each 128-channel chunk of a dense MLP, and
// which vocabulary rows of the LM head each rank computes.
//
// Default rule (ARCHITECTURE.md, exlr8): half h of expert e in layer L lives
// on rank (halves·e + h + L) mod N, halves = ceil(moe_intermediate/128);
// heads split contiguously; dense chunks c on (c + L) mod N; vocabulary split
// contiguously. A plan may supply its own assignment.
//
// Bit-identical results for any N: every unit (head, expert half, dense chunk)
// computes its contribution identically wherever it runs, and the all-reduce
// sums contributions in a fixed global order (heads ascending; routed experts
// by index, halves ascending, then the shared expert), never grouped by rank.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/model/config.h"

#include <cstdint>
#include <vector>

namespace glm::rt::cpu {

constexpr int64_t kHalfWidth = 128;

struct TpLayerLayout {
  std::vector<int> headRank;       // [H] (KDA layers: KDA heads)
  std::vector<int> expertHalfRank; // [(E+1)·halves]; e = E is shared
  std::vector<int> denseChunkRank; // [ceil(intermediate/128)]
};

struct TpLayout {
  int ranks = 1;
  int64_t expertHalves = 1; // halves per expert
  std::vector<TpLayerLayout> layers;
  /// The MTP layers (layer num_hidden_layers + m), by the same rule.
  std::vector<TpLayerLayout> mtpLayers;
  std::vector<int64_t> vocabBegin; // [ranks+1]

  /// Layer l's layout, an MTP layer's for l >= layers.size().
  const TpLayerLayout &layer(int64_t l) const {
    return l < (int64_t)layers.size() ? layers[l]
                                      : mtpLayers.at(l - layers.size());
  }
  int expertHalfRank(int64_t l, int64_t expert, int64_t half) const {
    return layer(l).expertHalfRank[expert * expertHalves + half];
  }
  /// The default rule above for N ranks (N >= 1).
  static TpLayout fromRule(const ModelConfig &config, int ranks);
};

/// Number of 128-channel units of a width (the last may be partial).
inline int64_t numChunks(int64_t width) {
  return (width + kHalfWidth - 1) / kHalfWidth;
}

} // namespace glm::rt::cpu

namespace glm::plan {
struct Plan;
}

namespace glm::rt::cpu {
/// The layout a plan prescribes: its rank count and, from its weight
/// bindings, the rank of every expert half it binds (half -1 bindings of a
/// whole expert tensor on one rank assign all its halves there). Heads, dense
/// chunks and vocabulary follow the default rule. Throws Error when the plan
/// binds one half to two ranks or names a layer/expert the config lacks.
/// Defined in tp_plan.cpp (built when plans/ is).
TpLayout tpLayoutFromPlan(const ModelConfig &config, const plan::Plan &p);
} // namespace glm::rt::cpu
