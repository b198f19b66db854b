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
};

struct LayerWeights {
  std::vector<float> inputNorm, postNorm; // [d]
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

struct ModelWeights {
  ModelConfig config;
  Matrix embed;   // [V, d]
  std::vector<LayerWeights> layers;
  std::vector<float> finalNorm; // [d]
  Matrix lmHead;  // [V, d]

  /// Loads and checks every weight the forward needs. `progress` (optional)
  /// is called with (loaded, total) tensor counts.
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
/// indexer layer before any shared one); throws Error naming the key.
void checkSupportedConfig(const ModelConfig &config);

} // namespace glm::rt::cpu
