//===- hf_names.cpp - the Hugging Face tensor list of a GLM-5.3 config ----===//
//
// GLM-5.3-Flash (glm5_next) checkpoints put the text model under
// model.language_model., name the mHC maps hc_{attn,ffn}_{fn,base,scale} and
// keep KDA's three convs and forget-gate parameters under self_attn
// (transformers renames them on load; the goldens of
// tests/oracle/make_flash_goldens.py are saved under these names).
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

/// MLA (q_a/q_b or q_proj, kv_a, kv_b, o_proj) and, on "full" layers, the
/// indexer: GLM-5.3's every layer, Flash's "deepseek_sparse_attention" ones.
static void mlaTensors(Builder &b, const ModelConfig &c, const std::string &a,
                       int64_t l, bool fullIndexer) {
  const int L = (int)l;
  const int64_t d = c.hiddenSize, H = c.numHeads;
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
  if (c.indexNHeads > 0 && fullIndexer) {
    const std::string ix = a + "indexer.";
    const int64_t qIn = c.qLoraRank > 0 ? c.qLoraRank : d;
    b.add(ix + "wq_b.weight", {c.indexNHeads * c.indexHeadDim, qIn}, true, L);
    b.add(ix + "wk.weight", {c.indexHeadDim, d}, true, L);
    b.add(ix + "k_norm.weight", {c.indexHeadDim}, false, L);
    b.add(ix + "k_norm.bias", {c.indexHeadDim}, false, L);
    b.add(ix + "weights_proj.weight", {c.indexNHeads, d}, false, L);
    if (c.isFlash()) { // the k-pool's compression gate and position bias
      b.add(ix + "index_kpool_compress_gate", {c.indexHeadDim, d}, false, L);
      b.add(ix + "index_kpool_compress_ape", {c.indexKpool, c.indexHeadDim},
            false, L);
    }
  }
}

/// Flash's KDA layer: q/k/v projections, each with its depthwise causal conv
/// (transformers fuses the three on load), the low-rank forget gate (f_a,
/// f_b, dt_bias, A_log), beta (b_proj), the low-rank output gate (g_a, g_b),
/// the gated output norm and o_proj.
static void kdaTensors(Builder &b, const ModelConfig &c, const std::string &a,
                       int64_t l) {
  const int L = (int)l;
  const int64_t d = c.hiddenSize, nh = c.linearNumHeads, hd = c.linearHeadDim,
                qkv = nh * hd;
  for (const char *x : {"q", "k", "v"})
    b.add(a + x + "_proj.weight", {qkv, d}, true, L);
  for (const char *x : {"q", "k", "v"})
    b.add(a + x + "_conv1d.weight", {qkv, 1, c.linearConvKernel}, false, L);
  b.add(a + "f_a_proj.weight", {hd, d}, false, L);
  b.add(a + "f_b_proj.weight", {qkv, hd}, false, L);
  b.add(a + "dt_bias", {qkv}, false, L);
  b.add(a + "A_log", {nh}, false, L);
  b.add(a + "b_proj.weight", {nh, d}, false, L);
  b.add(a + "g_a_proj.weight", {hd, d}, false, L);
  b.add(a + "g_b_proj.weight", {qkv, hd}, false, L);
  b.add(a + "o_norm.weight", {hd}, false, L);
  b.add(a + "o_proj.weight", {d, qkv}, true, L);
}

/// Router, routed experts and shared experts of a MoE layer under `m`.
static void moeTensors(Builder &b, const ModelConfig &c, const std::string &m,
                       int64_t l) {
  const int L = (int)l;
  const int64_t d = c.hiddenSize;
  b.add(m + "gate.weight", {c.numRoutedExperts, d}, false, L);
  b.add(m + "gate.e_score_correction_bias", {c.numRoutedExperts}, false, L);
  for (int64_t e = 0; e < c.numRoutedExperts; ++e)
    b.mlp(m + "experts." + std::to_string(e) + ".", d, c.moeIntermediateSize, L,
          (int)e, false);
  if (c.numSharedExperts > 0)
    b.mlp(m + "shared_experts.", d, c.moeIntermediateSize * c.numSharedExperts,
          L, -1, true);
}

std::vector<HfTensorSpec> expectedHfTensors(const ModelConfig &c) {
  check(c.modelType == "glm_moe_dsa" || c.isFlash(),
        "expectedHfTensors: model_type \"", c.modelType,
        "\" has no known Hugging Face tensor list");
  const int64_t d = c.hiddenSize;
  const std::string root = c.tensorPrefix();
  Builder b;
  b.add(root + "embed_tokens.weight", {c.vocabSize, d}, false);
  for (int64_t l = 0; l < c.numLayers; ++l) {
    const int L = (int)l;
    const std::string p = root + "layers." + std::to_string(l) + ".";
    if (c.hcMult > 0) // mHC maps of both sites, as the checkpoint names them
      for (const char *site : {"attn", "ffn"}) {
        const std::string h = p + "hc_" + site + "_";
        const int64_t S = c.hcMult, mix = (2 + S) * S;
        b.add(h + "fn", {mix, S * d}, false, L);
        b.add(h + "base", {mix}, false, L);
        b.add(h + "scale", {3}, false, L);
      }
    b.add(p + "input_layernorm.weight", {d}, false, L);
    if (c.isKdaLayer(l))
      kdaTensors(b, c, p + "self_attn.", l);
    else
      mlaTensors(b, c, p + "self_attn.", l, c.isFullIndexerLayer(l));
    b.add(p + "post_attention_layernorm.weight", {d}, false, L);
    if (c.isMoeLayer(l))
      moeTensors(b, c, p + "mlp.", l);
    else
      b.mlp(p + "mlp.", d, c.intermediateSize, L, -1, false);
  }
  b.add(root + "norm.weight", {d}, false);
  if (!c.tieWordEmbeddings)
    b.add("lm_head.weight", {c.vocabSize, d}, true);
  return std::move(b.out);
}

std::vector<HfTensorSpec> expectedMtpTensors(const ModelConfig &c) {
  check(c.modelType == "glm_moe_dsa" || c.isFlash(),
        "expectedMtpTensors: model_type \"", c.modelType,
        "\" has no known Hugging Face tensor list");
  const int64_t d = c.hiddenSize;
  Builder b;
  for (int64_t m = 0; m < c.numNextnPredictLayers; ++m) {
    const int64_t l = c.numLayers + m;
    const int L = (int)l;
    const std::string p =
        c.tensorPrefix() + "layers." + std::to_string(l) + ".";
    // The decoder layer: plain pre-norm (no mHC maps, also on Flash), MLA
    // with its own full indexer, MoE.
    b.add(p + "input_layernorm.weight", {d}, false, L);
    mlaTensors(b, c, p + "self_attn.", l, true);
    b.add(p + "post_attention_layernorm.weight", {d}, false, L);
    moeTensors(b, c, p + "mlp.", l);
    b.add(p + "eh_proj.weight", {d, 2 * d}, true, L);
    b.add(p + "enorm.weight", {d}, false, L);
    b.add(p + "hnorm.weight", {d}, false, L);
    b.add(p + "shared_head.norm.weight", {d}, false, L);
  }
  return std::move(b.out);
}

std::vector<HfTensorSpec> optionalMtpTensors(const ModelConfig &c, int64_t m) {
  const int64_t d = c.hiddenSize;
  const int L = (int)(c.numLayers + m);
  const std::string p = c.tensorPrefix() + "layers." + std::to_string(L) + ".";
  Builder b;
  b.add(p + "embed_tokens.weight", {c.vocabSize, d}, false, L);
  b.add(p + "shared_head.head.weight", {c.vocabSize, d}, true, L);
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
