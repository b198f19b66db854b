//===- hf_names.cpp - the Hugging Face tensor list of a GLM-5.3 config ----===//
//
// Names and shapes follow transformers' GlmMoeDsa modules: GlmMoeDsaAttention
// (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj, o_proj), GlmMoeDsaIndexer on "full" layers only (wq_b, wk,
// k_norm LayerNorm with bias, weights_proj), GlmMoeDsaMLP (dense and shared
// experts), GlmMoeDsaTopkRouter (mlp.gate.weight, e_score_correction_bias)
// and per-expert gate/up/down as checkpoints store them.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/hf_names.h"
#include "runtime/base/error.h"

#include <cstdlib>

namespace glm::rt {

namespace {
const char *const kProjNames[3] = {"gate_proj", "up_proj", "down_proj"};

struct Builder {
  std::vector<HfTensorSpec> out;
  void add(std::string name, std::vector<int64_t> shape, bool quantizable,
           int layer = -1, int expert = -1, int projection = -1,
           bool shared = false) {
    HfTensorSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.quantizable = quantizable;
    s.layer = layer;
    s.expert = expert;
    s.projection = projection;
    s.shared = shared;
    out.push_back(std::move(s));
  }
  /// gate/up [width, d], down [d, width] under `prefix`.
  void mlp(const std::string &prefix, int64_t d, int64_t width, int layer,
           int expert, bool shared) {
    for (int p = 0; p < 3; ++p) {
      std::vector<int64_t> shape = p == kProjDown
                                       ? std::vector<int64_t>{d, width}
                                       : std::vector<int64_t>{width, d};
      add(prefix + kProjNames[p] + ".weight", shape, true, layer, expert, p,
          shared);
    }
  }
};
} // namespace

std::vector<HfTensorSpec> expectedHfTensors(const ModelConfig &c) {
  check(c.modelType == "glm_moe_dsa", "expectedHfTensors: model_type \"",
        c.modelType,
        "\" has no known Hugging Face tensor list (only glm_moe_dsa)");
  const int64_t d = c.hiddenSize, H = c.numHeads;
  Builder b;
  b.add("model.embed_tokens.weight", {c.vocabSize, d}, false);
  for (int64_t l = 0; l < c.numLayers; ++l) {
    const int L = (int)l;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    b.add(p + "input_layernorm.weight", {d}, false, L);
    if (c.qLoraRank > 0) {
      b.add(a + "q_a_proj.weight", {c.qLoraRank, d}, true, L);
      b.add(a + "q_a_layernorm.weight", {c.qLoraRank}, false, L);
      b.add(a + "q_b_proj.weight", {H * c.qkHeadDim(), c.qLoraRank}, true, L);
    } else {
      b.add(a + "q_proj.weight", {H * c.qkHeadDim(), d}, true, L);
    }
    b.add(a + "kv_a_proj_with_mqa.weight", {c.kvLoraRank + c.qkRopeHeadDim, d},
          true, L);
    b.add(a + "kv_a_layernorm.weight", {c.kvLoraRank}, false, L);
    b.add(a + "kv_b_proj.weight",
          {H * (c.qkNopeHeadDim + c.vHeadDim), c.kvLoraRank}, true, L);
    b.add(a + "o_proj.weight", {d, H * c.vHeadDim}, true, L);
    // Shared indexer layers reuse the last full layer's selection and carry
    // no indexer weights.
    if (c.indexNHeads > 0 && c.isFullIndexerLayer(l)) {
      const std::string ix = a + "indexer.";
      const int64_t qIn = c.qLoraRank > 0 ? c.qLoraRank : d;
      b.add(ix + "wq_b.weight", {c.indexNHeads * c.indexHeadDim, qIn}, true, L);
      b.add(ix + "wk.weight", {c.indexHeadDim, d}, true, L);
      b.add(ix + "k_norm.weight", {c.indexHeadDim}, false, L);
      b.add(ix + "k_norm.bias", {c.indexHeadDim}, false, L);
      b.add(ix + "weights_proj.weight", {c.indexNHeads, d}, false, L);
    }
    b.add(p + "post_attention_layernorm.weight", {d}, false, L);
    const std::string m = p + "mlp.";
    if (!c.isMoeLayer(l)) {
      b.mlp(m, d, c.intermediateSize, L, -1, false);
      continue;
    }
    b.add(m + "gate.weight", {c.numRoutedExperts, d}, false, L);
    b.add(m + "gate.e_score_correction_bias", {c.numRoutedExperts}, false, L);
    for (int64_t e = 0; e < c.numRoutedExperts; ++e)
      b.mlp(m + "experts." + std::to_string(e) + ".", d, c.moeIntermediateSize,
            L, (int)e, false);
    if (c.numSharedExperts > 0)
      b.mlp(m + "shared_experts.", d,
            c.moeIntermediateSize * c.numSharedExperts, L, -1, true);
  }
  b.add("model.norm.weight", {d}, false);
  if (!c.tieWordEmbeddings)
    b.add("lm_head.weight", {c.vocabSize, d}, true);
  return std::move(b.out);
}

HfTensorSpec parseHfTensorName(const std::string &name) {
  HfTensorSpec s;
  // Reads the decimal number after `key` in name, or -1.
  auto numberAfter = [&](const std::string &key) -> int {
    size_t at = name.find(key);
    if (at == std::string::npos)
      return -1;
    const char *p = name.c_str() + at + key.size();
    if (*p < '0' || *p > '9')
      return -1;
    return (int)std::strtol(p, nullptr, 10);
  };
  s.layer = numberAfter("layers.");
  s.expert = numberAfter(".experts.");
  s.shared = name.find(".shared_experts.") != std::string::npos;
  if (name.find(".mlp.") != std::string::npos)
    for (int p = 0; p < 3; ++p)
      if (name.find(std::string(".") + kProjNames[p] + ".") !=
          std::string::npos)
        s.projection = p;
  return s;
}

} // namespace glm::rt
