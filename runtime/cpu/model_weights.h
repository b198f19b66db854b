//===- model_weights.h - GLM-5.3 weights as fp32 matrices, by HF name -----===//
//
// The reference executor keeps every weight dequantized to fp32 in Hugging
// Face orientation [out, in]. Weights come from a WeightSource: a pack (any
// layout, through Pack::dequantize) or an in-memory map (tests). Shapes are
// checked against config.json on load; a mismatch names the tensor, the
// expected and found shape and the pack.
//
// Thread-safety: ModelWeights is immutable after load; share freely.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/ops.h"
#include "runtime/model/config.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt {
class Pack;
}

namespace glm::rt::cpu {

/// Where fp32 weights come from, by Hugging Face tensor name.
class WeightSource {
public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string &name) const = 0;
  virtual std::vector<int64_t> shape(const std::string &name) const = 0;
  /// F32 values in HF orientation; throws Error when absent.
  virtual std::vector<float> load(const std::string &name) const = 0;
  /// Names the source in error messages ("pack /x/y (hf)").
  virtual std::string describe() const = 0;
};

/// Reads through Pack::dequantize (HF, EXL3, exlr8 layouts).
std::unique_ptr<WeightSource> packWeightSource(const Pack &pack);

/// An in-memory source (unit tests, synthesized models).
class MapWeightSource : public WeightSource {
public:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  void add(const std::string &name, std::vector<int64_t> shape,
           std::vector<float> data);
  bool has(const std::string &name) const override;
  std::vector<int64_t> shape(const std::string &name) const override;
  std::vector<float> load(const std::string &name) const override;
  std::string describe() const override { return "in-memory weights"; }
  const std::map<std::string, Tensor> &tensors() const { return t_; }

private:
  std::map<std::string, Tensor> t_;
};

/// SwiGLU MLP (dense layer, routed or shared expert).
struct MlpWeights {
  Matrix gate, up, down; // [I, d], [I, d], [d, I]
};

struct IndexerWeights {
  Matrix wqB;          // [nh·hd, q_lora]
  Matrix wk;           // [hd, d]
  std::vector<float> kNormW, kNormB; // [hd]
  Matrix weightsProj;  // [nh, d]
  Matrix kpoolGate;    // Flash: [hd, d] compression gate of the k-pool
  Matrix kpoolApe;     // Flash: [kpool, hd] position bias within a pool
};

/// Flash's KDA attention (shapes per transformers' Glm5NextTextLinearAttention;
/// qkv = heads·head_dim, K = conv taps).
struct KdaWeights {
  Matrix q, k, v;                       // [qkv, d]
  std::vector<float> convQ, convK, convV; // [qkv, K] depthwise causal taps
  Matrix fA, fB;                        // forget gate [hd, d], [qkv, hd]
  std::vector<float> dtBias, aLog;      // [qkv], [heads]
  Matrix b;                             // beta [heads, d]
  Matrix gA, gB;                        // output gate [hd, d], [qkv, hd]
  std::vector<float> oNorm;             // [hd]
  Matrix o;                             // [d, qkv]
};

/// One mHC site: the stream-mixing map of the flattened streams.
struct HyperConnWeights {
  Matrix fn;                 // [(2+S)·S, S·d]
  std::vector<float> base;   // [(2+S)·S]
  std::vector<float> scale;  // [3]: pre, post, comb
};

struct LayerWeights {
  std::vector<float> inputNorm, postNorm; // [d]
  bool kda = false;          // Flash linear-attention layer (else MLA)
  KdaWeights linear;         // KDA layers only
  HyperConnWeights attnHc, ffnHc; // Flash (hc_mult > 0) only
  // MLA
  Matrix qA;                 // [q_lora, d]
  std::vector<float> qANorm; // [q_lora]
  Matrix qB;                 // [H·(dn+dr), q_lora]
  Matrix kvA;                // [kv_lora+dr, d]
  std::vector<float> kvANorm; // [kv_lora]
  Matrix kvB;                // [H·(dn+dv), kv_lora]
  Matrix o;                  // [d, H·dv]
  bool fullIndexer = false;
  IndexerWeights indexer;    // full layers only
  // MLP
  bool moe = false;
  MlpWeights dense;               // dense layers
  Matrix router;                  // [E, d]
  std::vector<float> routerBias;  // [E] e_score_correction_bias
  std::vector<MlpWeights> experts; // [E]
  MlpWeights shared;              // width n_shared·moe_intermediate
};

/// One multi-token-prediction head (layer num_hidden_layers + m;
/// glm53-architecture.md §2 item 8, §3 "MTP"): x = ehProj [enorm(embed(t)) ;
/// hnorm(h)], one plain pre-norm decoder layer (MLA with its own full
/// indexer, MoE; no mHC maps on Flash either), headNorm, the LM head.
struct MtpWeights {
  LayerWeights layer;
  Matrix ehProj;                             // [d, 2d]: embedding half first
  std::vector<float> enorm, hnorm, headNorm; // [d]
  /// The layer's own embed_tokens / shared_head.head when the checkpoint
  /// ships them (DeepSeek-V3 style); empty = the main model's (GLM).
  Matrix embed, head; // [V, d]
};

struct ModelWeights {
  ModelConfig config;
  Matrix embed;   // [V, d]
  std::vector<LayerWeights> layers;
  std::vector<float> finalNorm; // [d]
  Matrix lmHead;  // [V, d]
  /// num_nextn_predict_layers heads when the source stores the MTP layers
  /// (their eh_proj present), else empty: the causal LM alone.
  std::vector<MtpWeights> mtp;

  /// Loads and checks every weight the forward needs, and the MTP layers
  /// when the source stores them. `progress` (optional) is called with
  /// (loaded, total) tensor counts.
  static std::shared_ptr<const ModelWeights>
  load(const ModelConfig &config, const WeightSource &src,
       const std::function<void(int64_t, int64_t)> &progress = {});
  /// Host bytes load() would hold (every weight as fp32, a tied LM head
  /// twice); checks names and shapes like load() but reads no weight bytes.
  static uint64_t fp32Bytes(const ModelConfig &config,
                            const WeightSource &src);
};

/// Checks the parts of config.json the reference forward relies on (MLA
/// with q_lora, sigmoid router without groups, SwiGLU, default RoPE, a full
/// indexer layer before any shared one; for Flash the KDA, mHC and k-pool
/// geometry); throws Error naming the key.
void checkSupportedConfig(const ModelConfig &config);

} // namespace glm::rt::cpu
