//===- hf_names.h - the Hugging Face tensor list of a GLM-5.3 config ------===//
//
// One place that knows how transformers' GlmMoeDsaForCausalLM names and shapes
// its weights (model.layers.{L}.self_attn.q_a_proj.weight, ...), derived from
// ModelConfig alone. Pack writers use it to know what to write, readers to
// verify a checkpoint, the CPU executor to load weights. MTP layers (index
// >= num_hidden_layers) are not part of the causal LM: expectedHfTensors
// leaves them out and expectedMtpTensors lists them.
//
// Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt {

/// Projection numbers of MLP weights (exlr8 numbering).
enum HfProjection : int { kProjGate = 0, kProjUp = 1, kProjDown = 2 };

struct HfTensorSpec {
  std::string name;           // model.layers.3.mlp.experts.7.up_proj.weight
  std::vector<int64_t> shape; // [out, in] for linear weights
  /// A 2-D linear weight that a pack may store quantized (attention, indexer
  /// wq_b/wk, MLP, experts, lm_head). Norms, biases, the router, the indexer
  /// weights_proj and the embedding are not. Each layout applies its own
  /// policy on top (EXL3 keeps kv_b_proj plain, for instance).
  bool quantizable = false;
  int layer = -1;      // -1 for embed_tokens, model.norm, lm_head
  int expert = -1;     // routed expert index, -1 otherwise
  int projection = -1; // HfProjection for MLP/expert weights, -1 otherwise
  bool shared = false; // mlp.shared_experts.*
};

/// Every tensor of the causal LM for `cfg`, in a stable order: embed_tokens,
/// then per layer (norms, attention, indexer on "full" layers, MLP or MoE),
/// then model.norm and lm_head (absent when tie_word_embeddings). Throws
/// Error for a model_type whose names are not known (glm5_next).
std::vector<HfTensorSpec> expectedHfTensors(const ModelConfig &cfg);

/// The multi-token-prediction layers' tensors (layer num_hidden_layers + m,
/// m < num_nextn_predict_layers; glm53-architecture.md §2 item 8 and §3
/// "MTP"), in a stable order: a plain pre-norm decoder layer (no mHC maps,
/// also on Flash) with MLA, its own full indexer and MoE, then eh_proj
/// [d, 2d] (over [enorm(embed) ; hnorm(h)]), enorm, hnorm and
/// shared_head.norm. Empty when the config has no MTP layer. A pack may
/// leave them out (then no MTP head runs).
std::vector<HfTensorSpec> expectedMtpTensors(const ModelConfig &cfg);

/// What an MTP layer m may carry besides expectedMtpTensors, as DeepSeek-V3
/// checkpoints do: its own embed_tokens and shared_head.head (the LM head).
/// GLM releases leave them out and share the main model's.
std::vector<HfTensorSpec> optionalMtpTensors(const ModelConfig &cfg, int64_t m);

/// Layer, expert, projection and shared flag parsed from an HF tensor name
/// (name and shape are left empty); fields stay -1/false when absent.
HfTensorSpec parseHfTensorName(const std::string &name);

} // namespace glm::rt
