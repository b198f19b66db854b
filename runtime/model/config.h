//===- config.h - the model geometry read from a pack's config.json -------===//
//
// One struct for GLM-5.3 (glm_moe_dsa) and GLM-5.3-Flash (glm5_next, read from
// text_config). Every geometry number comes from here; nothing downstream
// hard-codes 6144 or 256. Parsing errors name config.json and the key.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt {

struct ModelConfig {
  std::string modelType;       // "glm_moe_dsa" | "glm5_next"
  std::string architecture;    // architectures[0]
  int64_t hiddenSize = 0;      // d
  int64_t numLayers = 0;       // num_hidden_layers (MTP layers excluded)
  int64_t vocabSize = 0;
  int64_t intermediateSize = 0;    // dense MLP width
  int64_t moeIntermediateSize = 0; // expert width
  int64_t numRoutedExperts = 0;
  int64_t numSharedExperts = 0;
  int64_t numExpertsPerTok = 0;
  int64_t firstKDenseReplace = 0;
  int64_t numHeads = 0;
  int64_t qLoraRank = 0;
  int64_t kvLoraRank = 0;
  int64_t qkNopeHeadDim = 0;
  int64_t qkRopeHeadDim = 0;
  int64_t vHeadDim = 0;
  int64_t indexNHeads = 0;
  int64_t indexHeadDim = 0;
  int64_t indexTopk = 0;
  int64_t numNextnPredictLayers = 0;
  /// max_position_embeddings: the context the model was trained for
  /// (0 = config.json does not say). glmc compile refuses a longer
  /// --max-context unless forced.
  int64_t maxPositionEmbeddings = 0;
  double rmsNormEps = 1e-5;
  double ropeTheta = 10000.0;
  double routedScalingFactor = 1.0;
  bool normTopkProb = true;
  bool ropeInterleave = true;
  bool indexerRopeInterleave = true;
  bool tieWordEmbeddings = false;
  std::vector<std::string> indexerTypes; // per layer: "full" | "shared"
  std::vector<std::string> mlpLayerTypes; // per layer: "dense" | "sparse"
  // GLM-5.3-Flash (glm5_next) only; empty / zero for glm_moe_dsa.
  /// Per layer "linear_attention" (KDA) or "deepseek_sparse_attention"
  /// (MLA + DSA); empty = every layer MLA.
  std::vector<std::string> layerTypes;
  int64_t linearNumHeads = 0;  // KDA heads
  int64_t linearHeadDim = 0;   // dk = dv per KDA head
  int64_t linearConvKernel = 0; // causal short conv taps
  /// Forget gate g = lower_bound·sigmoid(exp(A_log)·x) when set (the
  /// released checkpoint), else −exp(A_log)·softplus(x).
  bool hasLinearLowerBound = false;
  double linearLowerBound = 0;
  int64_t hcMult = 0;          // mHC residual streams; 0 = plain residual
  double hcEps = 1e-6;
  int64_t hcSinkhornIters = 0;
  /// Index keys pooled over index_kpool consecutive tokens (1 = per token,
  /// GLM-5.3); the incomplete tail is always attended (Flash requires it).
  int64_t indexKpool = 1;
  /// SwiGLU clamp: gate <= limit, up in [−limit, limit]; 0 = none.
  double swigluLimit = 0;
  std::vector<int64_t> eosTokenIds;
  int64_t padTokenId = -1;
  std::string rawJson; // config.json as read (hashed into plans)

  int64_t qkHeadDim() const { return qkNopeHeadDim + qkRopeHeadDim; }
  bool isMoeLayer(int64_t layer) const {
    return mlpLayerTypes.empty() ? layer >= firstKDenseReplace
                                 : mlpLayerTypes.at(layer) == "sparse";
  }
  bool isFlash() const { return modelType == "glm5_next"; }
  bool isKdaLayer(int64_t layer) const {
    return !layerTypes.empty() && layerTypes.at(layer) == "linear_attention";
  }
  /// Heads of a layer's attention (KDA heads on KDA layers).
  int64_t headsOf(int64_t layer) const {
    return isKdaLayer(layer) ? linearNumHeads : numHeads;
  }
  /// Where the text model's tensors live: "model.language_model." (Flash,
  /// an image-text-to-text checkpoint) or "model.".
  std::string tensorPrefix() const {
    return isFlash() ? "model.language_model." : "model.";
  }
  bool isFullIndexerLayer(int64_t layer) const {
    return indexerTypes.empty() || indexerTypes.at(layer) == "full";
  }
};

/// Parses config.json text; `source` names the file in error messages.
ModelConfig parseModelConfig(const std::string &jsonText,
                             const std::string &source);
/// Reads and parses DIR/config.json (or a file path); throws Error.
ModelConfig loadModelConfig(const std::string &path);

} // namespace glm::rt
