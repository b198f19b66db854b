//===- tp.cpp - which rank computes which part of the model ---------------===//
#include "runtime/cpu/tp.h"

#include "runtime/base/error.h"

namespace glm::rt::cpu {

TpLayout TpLayout::fromRule(const ModelConfig &c, int n) {
  check(n >= 1, "--sparks must be at least 1 (got ", n, ")");
  TpLayout t;
  t.ranks = n;
  t.expertHalves = numChunks(c.moeIntermediateSize);
  const int64_t E = c.numRoutedExperts;
  for (int64_t l = 0; l < c.numLayers + c.numNextnPredictLayers; ++l) {
    TpLayerLayout L;
    // KDA heads split the same way; MTP layers are MLA.
    const int64_t H = l < c.numLayers ? c.headsOf(l) : c.numHeads;
    for (int64_t h = 0; h < H; ++h) {
      // Contiguous split: rank r owns heads [r·H/N, (r+1)·H/N).
      int r = 0;
      while (r + 1 < n && (r + 1) * H / n <= h)
        ++r;
      L.headRank.push_back(r);
    }
    // Pairs of halves / chunks round-robin (the dialect's shard rule,
    // ShardAttr::ownerOf).
    const int64_t pairs = (t.expertHalves + 1) / 2;
    for (int64_t e = 0; e <= E; ++e)
      for (int64_t h = 0; h < t.expertHalves; ++h)
        L.expertHalfRank.push_back((int)((pairs * e + h / 2 + l) % n));
    for (int64_t ch = 0; ch < numChunks(c.intermediateSize); ++ch)
      L.denseChunkRank.push_back((int)((ch / 2 + l) % n));
    (l < c.numLayers ? t.layers : t.mtpLayers).push_back(std::move(L));
  }
  for (int r = 0; r <= n; ++r)
    t.vocabBegin.push_back(c.vocabSize * r / n);
  return t;
}

} // namespace glm::rt::cpu
