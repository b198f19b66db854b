//===- cpu_test_model.h - tiny random GLM-5.3 models for cpu tests --------===//
//
// Builds a small glm_moe_dsa config (dense and MoE layers, full and shared
// indexer layers, a sequence longer than index_topk is easy to reach) and
// random weights under their Hugging Face names in a MapWeightSource, so the
// cpu executor can be tested without any pack reader.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/model_weights.h"
#include "runtime/model/config.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace glm::rt::cpu::cputest {

inline ModelConfig tinyConfig() {
  ModelConfig c;
  c.modelType = "glm_moe_dsa";
  c.hiddenSize = 64;
  c.numLayers = 4;
  c.vocabSize = 50;
  c.intermediateSize = 200; // two dense chunks, the second partial
  c.moeIntermediateSize = 160; // two expert halves, the second partial
  c.numRoutedExperts = 6;
  c.numSharedExperts = 1;
  c.numExpertsPerTok = 2;
  c.firstKDenseReplace = 1;
  c.numHeads = 4;
  c.qLoraRank = 32;
  c.kvLoraRank = 16;
  c.qkNopeHeadDim = 8;
  c.qkRopeHeadDim = 8;
  c.vHeadDim = 12;
  c.indexNHeads = 4;
  c.indexHeadDim = 16;
  c.indexTopk = 5;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 8000000.0;
  c.routedScalingFactor = 2.5;
  c.indexerTypes = {"full", "full", "shared", "shared"};
  c.mlpLayerTypes = {"dense", "sparse", "sparse", "sparse"};
  c.eosTokenIds = {49};
  return c;
}

/// Random weights: linear layers ~ N(0, 1/in), norms ~ 1 + N(0, 0.1²),
/// biases ~ N(0, 0.1²), embeddings ~ N(0, 1).
inline MapWeightSource tinyWeights(const ModelConfig &c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  MapWeightSource src;
  auto lin = [&](const std::string &n, int64_t out, int64_t in) {
    std::vector<float> v(out * in);
    for (float &x : v)
      x = (float)(nd(rng) / std::sqrt((double)in));
    src.add(n, {out, in}, v);
  };
  auto vec = [&](const std::string &n, int64_t len, double mean,
                 double sd) {
    std::vector<float> v(len);
    for (float &x : v)
      x = (float)(mean + sd * nd(rng));
    src.add(n, {len}, v);
  };
  const int64_t d = c.hiddenSize, H = c.numHeads;
  {
    std::vector<float> e(c.vocabSize * d);
    for (float &x : e)
      x = (float)nd(rng);
    src.add("model.embed_tokens.weight", {c.vocabSize, d}, e);
  }
  for (int64_t l = 0; l < c.numLayers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    vec(p + "input_layernorm.weight", d, 1, 0.1);
    vec(p + "post_attention_layernorm.weight", d, 1, 0.1);
    std::string a = p + "self_attn.";
    lin(a + "q_a_proj.weight", c.qLoraRank, d);
    vec(a + "q_a_layernorm.weight", c.qLoraRank, 1, 0.1);
    lin(a + "q_b_proj.weight", H * (c.qkNopeHeadDim + c.qkRopeHeadDim),
        c.qLoraRank);
    lin(a + "kv_a_proj_with_mqa.weight", c.kvLoraRank + c.qkRopeHeadDim, d);
    vec(a + "kv_a_layernorm.weight", c.kvLoraRank, 1, 0.1);
    lin(a + "kv_b_proj.weight", H * (c.qkNopeHeadDim + c.vHeadDim),
        c.kvLoraRank);
    lin(a + "o_proj.weight", d, H * c.vHeadDim);
    if (c.isFullIndexerLayer(l)) {
      std::string ix = a + "indexer.";
      lin(ix + "wq_b.weight", c.indexNHeads * c.indexHeadDim, c.qLoraRank);
      lin(ix + "wk.weight", c.indexHeadDim, d);
      vec(ix + "k_norm.weight", c.indexHeadDim, 1, 0.1);
      vec(ix + "k_norm.bias", c.indexHeadDim, 0, 0.1);
      lin(ix + "weights_proj.weight", c.indexNHeads, d);
    }
    std::string m = p + "mlp.";
    auto mlp = [&](const std::string &pre, int64_t inter) {
      lin(pre + "gate_proj.weight", inter, d);
      lin(pre + "up_proj.weight", inter, d);
      lin(pre + "down_proj.weight", d, inter);
    };
    if (c.isMoeLayer(l)) {
      lin(m + "gate.weight", c.numRoutedExperts, d);
      vec(m + "gate.e_score_correction_bias", c.numRoutedExperts, 0, 0.1);
      for (int64_t e = 0; e < c.numRoutedExperts; ++e)
        mlp(m + "experts." + std::to_string(e) + ".", c.moeIntermediateSize);
      mlp(m + "shared_experts.", c.moeIntermediateSize * c.numSharedExperts);
    } else {
      mlp(m, c.intermediateSize);
    }
  }
  vec("model.norm.weight", d, 1, 0.1);
  lin("lm_head.weight", c.vocabSize, d);
  return src;
}

} // namespace glm::rt::cpu::cputest
