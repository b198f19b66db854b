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

int64_t getInt(const json &j, const char *key, const std::string &src,
               bool required = true, int64_t dflt = 0) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    check(!required, src, ": missing integer key \"", key, "\"");
    return dflt;
  }
  check(it->is_number_integer(), src, ": key \"", key,
        "\" must be an integer, found ", it->dump());
  return it->get<int64_t>();
}

double getNum(const json &j, const char *key, const std::string &src,
              double dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return dflt;
  check(it->is_number(), src, ": key \"", key, "\" must be a number");
  return it->get<double>();
}

bool getBool(const json &j, const char *key, bool dflt) {
  auto it = j.find(key);
  return (it == j.end() || !it->is_boolean()) ? dflt : it->get<bool>();
}

std::vector<std::string> getStrings(const json &j, const char *key,
                                    const std::string &src) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return out;
  check(it->is_array(), src, ": key \"", key, "\" must be a list");
  for (auto &v : *it) {
    check(v.is_string(), src, ": key \"", key, "\" must hold strings");
    out.push_back(v.get<std::string>());
  }
  return out;
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
  c.modelType = root.value("model_type", std::string());
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
  c.hiddenSize = getInt(j, "hidden_size", src);
  c.numLayers = getInt(j, "num_hidden_layers", src);
  c.vocabSize = getInt(j, "vocab_size", src);
  c.intermediateSize = getInt(j, "intermediate_size", src);
  c.moeIntermediateSize = getInt(j, "moe_intermediate_size", src);
  c.numRoutedExperts = getInt(j, "n_routed_experts", src);
  c.numSharedExperts = getInt(j, "n_shared_experts", src, false, 0);
  c.numExpertsPerTok = getInt(j, "num_experts_per_tok", src);
  c.firstKDenseReplace = getInt(j, "first_k_dense_replace", src, false, 0);
  c.numHeads = getInt(j, "num_attention_heads", src);
  c.qLoraRank = getInt(j, "q_lora_rank", src);
  c.kvLoraRank = getInt(j, "kv_lora_rank", src);
  c.qkNopeHeadDim = getInt(j, "qk_nope_head_dim", src);
  c.qkRopeHeadDim = getInt(j, "qk_rope_head_dim", src, false, 0);
  c.vHeadDim = getInt(j, "v_head_dim", src);
  c.indexNHeads = getInt(j, "index_n_heads", src, false, 0);
  c.indexHeadDim = getInt(j, "index_head_dim", src, false, 0);
  c.indexTopk = getInt(j, "index_topk", src, false, 0);
  c.numNextnPredictLayers = getInt(j, "num_nextn_predict_layers", src, false, 0);
  c.rmsNormEps = getNum(j, "rms_norm_eps", src, 1e-5);
  c.routedScalingFactor = getNum(j, "routed_scaling_factor", src, 1.0);
  c.normTopkProb = getBool(j, "norm_topk_prob", true);
  c.ropeInterleave = getBool(j, "rope_interleave", true);
  c.indexerRopeInterleave = getBool(j, "indexer_rope_interleave", true);
  c.tieWordEmbeddings = getBool(root, "tie_word_embeddings", false);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    c.ropeTheta = getNum(j["rope_parameters"], "rope_theta", src, 10000.0);
  else
    c.ropeTheta = getNum(j, "rope_theta", src, 10000.0);
  c.indexerTypes = getStrings(j, "indexer_types", src);
  c.mlpLayerTypes = getStrings(j, "mlp_layer_types", src);
  check(c.indexerTypes.empty() || (int64_t)c.indexerTypes.size() >= c.numLayers,
        src, ": indexer_types has ", c.indexerTypes.size(),
        " entries, num_hidden_layers is ", c.numLayers);
  check(c.mlpLayerTypes.empty() ||
            (int64_t)c.mlpLayerTypes.size() >= c.numLayers,
        src, ": mlp_layer_types has ", c.mlpLayerTypes.size(),
        " entries, num_hidden_layers is ", c.numLayers);
  const json &eos = j.contains("eos_token_id") ? j["eos_token_id"]
                                               : root.value("eos_token_id", json());
  if (eos.is_number_integer())
    c.eosTokenIds.push_back(eos.get<int64_t>());
  else if (eos.is_array())
    for (auto &v : eos)
      if (v.is_number_integer())
        c.eosTokenIds.push_back(v.get<int64_t>());
  c.padTokenId = getInt(j, "pad_token_id", src, false, -1);
  check(c.hiddenSize > 0 && c.numLayers > 0 && c.vocabSize > 0 &&
            c.numHeads > 0,
        src, ": hidden_size, num_hidden_layers, vocab_size and "
             "num_attention_heads must be positive");
  check(c.numExpertsPerTok <= c.numRoutedExperts, src,
        ": num_experts_per_tok (", c.numExpertsPerTok,
        ") exceeds n_routed_experts (", c.numRoutedExperts, ")");
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
