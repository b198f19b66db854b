//===- config.cpp - config.json parsing -----------------------------------===//
#include "runtime/model/config.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/json_numbers.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace glm::rt {
namespace {
using nlohmann::json;

// Validation by key: every key has a type and a range, and a value outside
// them is refused naming config.json, the key, the value and what is
// allowed. The ranges are what the executors can run (a layer count that
// sizes a vector, a positive RoPE base), generous enough for any model of
// the family.
constexpr int64_t kMaxDim = int64_t(1) << 20;    // widths, ranks, head dims
constexpr int64_t kMaxCount = int64_t(1) << 16;  // layers, heads, experts
constexpr int64_t kMaxVocab = int64_t(1) << 24;  // GLM-5.3: 154,880

[[noreturn]] void badValue(const std::string &src, const char *key,
                           const json &v, const std::string &allowed) {
  fail(src, ": key \"", key, "\" is ", v.dump(), "; allowed: ", allowed);
}

int64_t getInt(const json &j, const char *key, const std::string &src,
               int64_t lo, int64_t hi, bool required = true,
               int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    check(!required, src, ": missing integer key \"", key,
          "\" (allowed: an integer in ", rangeText(lo, hi), ")");
    return dflt;
  }
  std::optional<int64_t> v = jsonIntIn(*it, lo, hi);
  if (!v)
    badValue(src, key, *it, "an integer in " + rangeText(lo, hi));
  return *v;
}

/// A finite number in (lo, hi] when `loOpen`, else [lo, hi].
double getNum(const json &j, const char *key, const std::string &src,
              double dflt, double lo, double hi, bool loOpen) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return dflt;
  std::optional<double> v = jsonNumberIn(*it, lo, hi);
  if (!v || (loOpen && *v == lo)) {
    std::ostringstream os;
    os << "a finite number in " << (loOpen ? "(" : "[") << lo << ", " << hi
       << "]";
    badValue(src, key, *it, os.str());
  }
  return *v;
}

bool getBool(const json &j, const char *key, const std::string &src,
             bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return dflt;
  if (!it->is_boolean())
    badValue(src, key, *it, "true or false");
  return it->get<bool>();
}

/// A key every executor assumes to hold `only` (GLM-5.3 and GLM-5.3-Flash
/// both do): any other value, or a value of another type, would silently run
/// other math (scoring_func "softmax" ran sigmoid routing).
void requireString(const json &j, const char *key, const std::string &src,
                   const char *only, const char *what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return;
  if (!it->is_string() || it->get<std::string>() != only)
    badValue(src, key, *it, std::string("\"") + only + "\" (" + what + ")");
}

std::vector<std::string> getStrings(const json &j, const char *key,
                                    const std::string &src,
                                    std::initializer_list<const char *> ok) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return out;
  std::string allowed = "a list of";
  const char *sep = " \"";
  for (const char *o : ok) {
    allowed += std::string(sep) + o + "\"";
    sep = " or \"";
  }
  if (!it->is_array())
    badValue(src, key, *it, allowed);
  for (auto &v : *it) {
    bool known = false;
    for (const char *o : ok)
      known |= v.is_string() && v.get<std::string>() == o;
    if (!known)
      badValue(src, key, v, allowed);
    out.push_back(v.get<std::string>());
  }
  return out;
}
/// GLM-5.3-Flash's text_config keys (transformers' Glm5NextTextConfig): the
/// layer schedule, KDA geometry (linear_attn_config wins over linear_*, as
/// transformers reads it), mHC and the k-pool indexer. Defaults are
/// transformers' only where the released config relies on them.
void parseFlashKeys(const json &j, const std::string &src, ModelConfig &c) {
  c.layerTypes = getStrings(j, "layer_types", src,
                            {"linear_attention", "deepseek_sparse_attention",
                             "full_attention"});
  if (c.layerTypes.empty()) // transformers' rule: every fourth layer MLA
    for (int64_t l = 0; l < c.numLayers; ++l)
      c.layerTypes.push_back(l % 4 == 3 ? "deepseek_sparse_attention"
                                        : "linear_attention");
  for (auto &t : c.layerTypes)
    if (t == "full_attention")
      t = "deepseek_sparse_attention";
  check((int64_t)c.layerTypes.size() >= c.numLayers, src, ": layer_types has ",
        c.layerTypes.size(), " entries, num_hidden_layers is ", c.numLayers);
  c.layerTypes.resize(c.numLayers);
  c.linearNumHeads = getInt(j, "linear_num_heads", src, 1, kMaxCount, false, 64);
  c.linearHeadDim = getInt(j, "linear_head_dim", src, 1, kMaxDim, false, 128);
  c.linearConvKernel =
      getInt(j, "linear_conv_kernel_dim", src, 1, 64, false, 4);
  const json *lb = j.contains("linear_lower_bound") ? &j["linear_lower_bound"]
                                                    : nullptr;
  c.hasLinearLowerBound = !lb || !lb->is_null();
  if (c.hasLinearLowerBound)
    c.linearLowerBound = getNum(j, "linear_lower_bound", src, -5.0, -1e6, 0,
                                false);
  auto la = j.find("linear_attn_config");
  if (la != j.end() && !la->is_null()) {
    if (!la->is_object())
      badValue(src, "linear_attn_config", *la, "an object");
    const std::string lsrc = src + " (linear_attn_config)";
    c.linearNumHeads = getInt(*la, "num_heads", lsrc, 1, kMaxCount, false,
                              c.linearNumHeads);
    c.linearHeadDim = getInt(*la, "head_dim", lsrc, 1, kMaxDim, false,
                             c.linearHeadDim);
    c.linearConvKernel = getInt(*la, "short_conv_kernel_size", lsrc, 1, 64,
                                false, c.linearConvKernel);
    auto g = la->find("gate_lower_bound");
    if (g != la->end() && !g->is_null()) {
      c.hasLinearLowerBound = true;
      c.linearLowerBound =
          getNum(*la, "gate_lower_bound", lsrc, -5.0, -1e6, 0, false);
    }
  }
  c.hcMult = getInt(j, "hc_mult", src, 1, 64, false, 4);
  c.hcEps = getNum(j, "hc_eps", src, 1e-6, 0, 1, false);
  c.hcSinkhornIters = getInt(j, "hc_sinkhorn_iters", src, 1, 1000, false, 20);
  c.swigluLimit = getNum(j, "swiglu_limit", src, 10.0, 0, 1e9, true);
  if (c.qkRopeHeadDim != 0)
    badValue(src, "qk_rope_head_dim", j["qk_rope_head_dim"],
             "0 (GLM-5.3-Flash attention is NoPE)");
  if (c.indexNHeads > 0) {
    // transformers' default (16) is not the released value (4): require it.
    c.indexKpool = getInt(j, "index_kpool", src, 1, kMaxDim, true);
    if (c.indexTopk % c.indexKpool != 0)
      badValue(src, "index_topk", j["index_topk"],
               "a multiple of index_kpool (" + std::to_string(c.indexKpool) +
                   ")");
    if (c.indexKpool > 1 &&
        !getBool(j, "index_kpool_always_select_tail", src, true))
      badValue(src, "index_kpool_always_select_tail",
               j["index_kpool_always_select_tail"],
               "true (a query must see its own incomplete pool)");
  }
  // transformers hands a "shared" MLA layer the selection of the layer just
  // before it; after a KDA layer there is none (it raises).
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (!c.isKdaLayer(l) && !c.isFullIndexerLayer(l))
      check(l > 0 && !c.isKdaLayer(l - 1), src, ": indexer_types[", l,
            "] is \"shared\" but layer ", l - 1,
            " is not an MLA layer whose selection it could reuse");
}
} // namespace

ModelConfig parseModelConfig(const std::string &text, const std::string &src) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &e) {
    fail(src, ": not valid JSON (", e.what(), ")");
  }
  check(root.is_object(), src, ": top level must be a JSON object");
  ModelConfig c;
  c.rawJson = text;
  c.modelType = root.value("model_type", json()).is_string()
                    ? root["model_type"].get<std::string>()
                    : std::string();
  if (root.contains("architectures") && root["architectures"].is_array() &&
      !root["architectures"].empty() && root["architectures"][0].is_string())
    c.architecture = root["architectures"][0].get<std::string>();
  // GLM-5.3-Flash keeps the text geometry under text_config.
  const json &j = root.contains("text_config") && root["text_config"].is_object()
                      ? root["text_config"]
                      : root;
  check(c.modelType == "glm_moe_dsa" || c.modelType == "glm5_next", src,
        ": model_type \"", c.modelType,
        "\" is not supported (expected glm_moe_dsa or glm5_next)");
  c.hiddenSize = getInt(j, "hidden_size", src, 1, kMaxDim);
  c.numLayers = getInt(j, "num_hidden_layers", src, 1, kMaxCount);
  c.vocabSize = getInt(j, "vocab_size", src, 1, kMaxVocab);
  c.intermediateSize = getInt(j, "intermediate_size", src, 1, kMaxDim);
  c.moeIntermediateSize = getInt(j, "moe_intermediate_size", src, 1, kMaxDim);
  c.numRoutedExperts = getInt(j, "n_routed_experts", src, 1, kMaxCount);
  c.numSharedExperts = getInt(j, "n_shared_experts", src, 0, kMaxCount,
                              false, 0);
  // At least one expert per token: 0 would route nothing (and -1 sized a
  // vector from it).
  c.numExpertsPerTok = getInt(j, "num_experts_per_tok", src, 1,
                              c.numRoutedExperts);
  c.firstKDenseReplace = getInt(j, "first_k_dense_replace", src, 0,
                                c.numLayers, false, 0);
  c.numHeads = getInt(j, "num_attention_heads", src, 1, kMaxCount);
  c.qLoraRank = getInt(j, "q_lora_rank", src, 1, kMaxDim);
  c.kvLoraRank = getInt(j, "kv_lora_rank", src, 1, kMaxDim);
  c.qkNopeHeadDim = getInt(j, "qk_nope_head_dim", src, 1, kMaxDim);
  c.qkRopeHeadDim = getInt(j, "qk_rope_head_dim", src, 0, kMaxDim, false, 0);
  check(c.qkRopeHeadDim % 2 == 0, src, ": key \"qk_rope_head_dim\" is ",
        c.qkRopeHeadDim, "; allowed: an even integer (RoPE rotates pairs)");
  c.vHeadDim = getInt(j, "v_head_dim", src, 1, kMaxDim);
  c.indexNHeads = getInt(j, "index_n_heads", src, 0, kMaxCount, false, 0);
  c.indexHeadDim = getInt(j, "index_head_dim", src, 0, kMaxDim, false, 0);
  c.indexTopk = getInt(j, "index_topk", src, 0, kMaxContextTokens, false, 0);
  c.numNextnPredictLayers = getInt(j, "num_nextn_predict_layers", src, 0,
                                   kMaxCount, false, 0);
  c.maxPositionEmbeddings = getInt(j, "max_position_embeddings", src, 0,
                                   int64_t(1) << 40, false, 0);
  c.rmsNormEps = getNum(j, "rms_norm_eps", src, 1e-5, 0, 1, true);
  c.routedScalingFactor =
      getNum(j, "routed_scaling_factor", src, 1.0, 0, 1e6, true);
  c.normTopkProb = getBool(j, "norm_topk_prob", src, true);
  // Only interleaved RoPE is implemented (the compiler and the plan
  // executor used to run it whatever these said).
  for (const char *k : {"rope_interleave", "indexer_rope_interleave"})
    if (!getBool(j, k, src, true))
      badValue(src, k, j[k], "true (only interleaved RoPE is implemented)");
  c.ropeInterleave = c.indexerRopeInterleave = true;
  c.tieWordEmbeddings = getBool(root, "tie_word_embeddings", src, false);
  // A RoPE base <= 1 gives NaN or constant angles.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    c.ropeTheta = getNum(j["rope_parameters"], "rope_theta", src, 10000.0, 1,
                         1e12, true);
  else
    c.ropeTheta = getNum(j, "rope_theta", src, 10000.0, 1, 1e12, true);
  requireString(j, "hidden_act", src, "silu",
                "the only MLP activation glmc runs");
  requireString(j, "scoring_func", src, "sigmoid",
                "the only router scoring glmc runs");
  requireString(j, "topk_method", src, "noaux_tc",
                "the only expert selection glmc runs: top-k of score + "
                "e_score_correction_bias");
  for (const char *k : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null())
      continue;
    if (!it->is_object())
      badValue(src, k, *it, "an object");
    requireString(*it, "rope_type", src, "default", "only default RoPE");
    requireString(*it, "type", src, "default", "only default RoPE");
  }
  // Grouped routing is not implemented: one group, or every group chosen.
  const int64_t nGroup = getInt(j, "n_group", src, 1, kMaxCount, false, 1);
  const int64_t topkGroup =
      getInt(j, "topk_group", src, 1, nGroup, false, nGroup);
  if (nGroup != 1 && topkGroup != nGroup)
    badValue(src, "topk_group", j["topk_group"],
             "n_group (" + std::to_string(nGroup) +
                 "): grouped expert routing is not supported");
  if (getBool(j, "attention_bias", src, false))
    badValue(src, "attention_bias", j["attention_bias"],
             "false (attention biases are not supported)");
  // Every layer from first_k_dense_replace on (or as mlp_layer_types says)
  // is MoE; a stride between MoE layers is not implemented.
  getInt(j, "moe_layer_freq", src, 1, 1, false, 1);
  // MLA: every head has its own key and value.
  getInt(j, "num_key_value_heads", src, c.numHeads, c.numHeads, false, 0);
  c.indexerTypes = getStrings(j, "indexer_types", src, {"full", "shared"});
  c.mlpLayerTypes = getStrings(j, "mlp_layer_types", src, {"dense", "sparse"});
  check(c.indexerTypes.empty() || (int64_t)c.indexerTypes.size() >= c.numLayers,
        src, ": indexer_types has ", c.indexerTypes.size(),
        " entries, num_hidden_layers is ", c.numLayers);
  check(c.mlpLayerTypes.empty() ||
            (int64_t)c.mlpLayerTypes.size() >= c.numLayers,
        src, ": mlp_layer_types has ", c.mlpLayerTypes.size(),
        " entries, num_hidden_layers is ", c.numLayers);
  // eos_token_id: one id or a list of ids, each a token of the vocabulary
  // (a string or an id outside it would silently never stop generation).
  const json &eos = j.contains("eos_token_id") ? j["eos_token_id"]
                                               : root.value("eos_token_id", json());
  const std::string eosAllowed =
      "a token id or a list of token ids in " +
      rangeText(int64_t(0), c.vocabSize - 1);
  if (eos.is_array()) {
    for (auto &v : eos) {
      std::optional<int64_t> id = jsonIntIn(v, 0, c.vocabSize - 1);
      if (!id)
        badValue(src, "eos_token_id", eos, eosAllowed);
      c.eosTokenIds.push_back(*id);
    }
  } else if (!eos.is_null()) {
    std::optional<int64_t> id = jsonIntIn(eos, 0, c.vocabSize - 1);
    if (!id)
      badValue(src, "eos_token_id", eos, eosAllowed);
    c.eosTokenIds.push_back(*id);
  }
  c.padTokenId = getInt(j, "pad_token_id", src, -1, c.vocabSize - 1, false,
                        -1);
  if (c.isFlash())
    parseFlashKeys(j, src, c);
  return c;
}

ModelConfig loadModelConfig(const std::string &path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p))
    p /= "config.json";
  check(std::filesystem::exists(p), p.string(),
        ": cannot open (a pack directory needs config.json)");
  return parseModelConfig(
      readFileBounded(p.string(), kMaxConfigBytes, "the model config"),
      p.string());
}

} // namespace glm::rt
