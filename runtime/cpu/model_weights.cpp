//===- model_weights.cpp - GLM-5.3 weights as fp32 matrices, by HF name ---===//
#include "runtime/cpu/model_weights.h"
#include "runtime/base/strings.h"

#include "runtime/base/error.h"
#include "runtime/formats/pack.h"

#include <sstream>

namespace glm::rt::cpu {
namespace {

class PackSource : public WeightSource {
public:
  explicit PackSource(const Pack &p) : pack_(p) {}
  bool has(const std::string &name) const override {
    return pack_.find(name) != nullptr;
  }
  std::vector<int64_t> shape(const std::string &name) const override {
    return pack_.get(name).shape;
  }
  std::vector<float> load(const std::string &name) const override {
    return pack_.dequantize(name);
  }
  std::string describe() const override {
    return "pack " + pack_.dir() + " (" + packLayoutName(pack_.layout()) +
           ")";
  }

private:
  const Pack &pack_;
};

/// Loads tensors by name with shape checks; counts for progress.
struct Loader {
  const WeightSource &src;
  int64_t done = 0, total = 0;
  const std::function<void(int64_t, int64_t)> &progress;
  /// Count mode: check names and shapes, sum the fp32 bytes, load nothing.
  bool countOnly = false;
  uint64_t bytes = 0;

  std::vector<float> get(const std::string &name,
                         const std::vector<int64_t> &want) {
    check(src.has(name), src.describe(), ": tensor ", name,
          " is missing (expected shape ", shapeStr(want),
          "); the pack does not match its config.json");
    auto got = src.shape(name);
    check(got == want, src.describe(), ": tensor ", name, " has shape ",
          shapeStr(got), ", config.json implies ", shapeStr(want));
    int64_t n = 1;
    for (int64_t d : want)
      n *= d;
    bytes += uint64_t(n) * sizeof(float);
    if (countOnly)
      return {};
    std::vector<float> v = src.load(name);
    check((int64_t)v.size() == n, src.describe(), ": tensor ", name,
          " dequantized to ", v.size(), " values, expected ", n);
    ++done;
    if (progress)
      progress(done, total);
    return v;
  }
  Matrix mat(const std::string &name, int64_t rows, int64_t cols) {
    Matrix m;
    m.data = get(name, {rows, cols});
    m.rows = rows;
    m.cols = cols;
    return m;
  }
  std::vector<float> vec(const std::string &name, int64_t n) {
    return get(name, {n});
  }
  MlpWeights mlp(const std::string &prefix, int64_t d, int64_t inter) {
    MlpWeights w;
    w.gate = mat(prefix + "gate_proj.weight", inter, d);
    w.up = mat(prefix + "up_proj.weight", inter, d);
    w.down = mat(prefix + "down_proj.weight", d, inter);
    return w;
  }
};

} // namespace

std::unique_ptr<WeightSource> packWeightSource(const Pack &pack) {
  return std::make_unique<PackSource>(pack);
}

void MapWeightSource::add(const std::string &name, std::vector<int64_t> shape,
                          std::vector<float> data) {
  t_[name] = Tensor{std::move(shape), std::move(data)};
}
bool MapWeightSource::has(const std::string &name) const {
  return t_.count(name) != 0;
}
std::vector<int64_t> MapWeightSource::shape(const std::string &name) const {
  auto it = t_.find(name);
  check(it != t_.end(), "in-memory weights: no tensor ", name);
  return it->second.shape;
}
std::vector<float> MapWeightSource::load(const std::string &name) const {
  auto it = t_.find(name);
  check(it != t_.end(), "in-memory weights: no tensor ", name);
  return it->second.data;
}

void checkSupportedConfig(const ModelConfig &c) {
  const char *src = "config.json";
  check(c.modelType == "glm_moe_dsa" || c.isFlash(), src, ": model_type \"",
        c.modelType,
        "\": the reference runs glm_moe_dsa (GLM-5.3) and glm5_next "
        "(GLM-5.3-Flash) models");
  if (c.isFlash())
    check(c.hcMult > 0 && c.linearNumHeads > 0 && c.linearHeadDim > 0 &&
              c.linearConvKernel > 0,
          src, ": glm5_next needs hc_mult and the KDA geometry "
               "(linear_attn_config num_heads, head_dim, "
               "short_conv_kernel_size)");
  check(c.qLoraRank > 0, src,
        ": q_lora_rank must be set (the q_proj form is not supported)");
  check(c.kvLoraRank > 0 && c.qkNopeHeadDim > 0 && c.vHeadDim > 0, src,
        ": kv_lora_rank, qk_nope_head_dim and v_head_dim must be positive");
  check(c.qkRopeHeadDim % 2 == 0, src, ": qk_rope_head_dim (",
        c.qkRopeHeadDim, ") must be even");
  check(c.ropeInterleave, src,
        ": rope_interleave false is not supported (GLM-5.3 uses "
        "interleaved RoPE)");
  // hidden_act, scoring_func, topk_method, grouped routing, attention_bias,
  // num_key_value_heads and the RoPE type are checked by key in
  // parseModelConfig, for every executor.
  if (c.indexNHeads > 0) {
    check(c.indexHeadDim > c.qkRopeHeadDim && c.indexTopk > 0, src,
          ": index_head_dim must exceed qk_rope_head_dim and index_topk "
          "must be positive");
    check(c.indexerRopeInterleave, src,
          ": indexer_rope_interleave false is not supported");
    int64_t firstMla = 0;
    while (firstMla < c.numLayers && c.isKdaLayer(firstMla))
      ++firstMla;
    check(firstMla == c.numLayers || c.isFullIndexerLayer(firstMla), src,
          ": indexer_types[", firstMla,
          "] is \"shared\" but a shared layer reuses the selection of an "
          "earlier full layer");
  }
}

/// MLA and (on full layers) the indexer of one layer.
static void mlaWeights(Loader &ld, const ModelConfig &c, const std::string &a,
                       bool fullIndexer, LayerWeights &L) {
  const int64_t d = c.hiddenSize, H = c.numHeads;
  const int64_t dn = c.qkNopeHeadDim, dr = c.qkRopeHeadDim, dv = c.vHeadDim;
  L.qA = ld.mat(a + "q_a_proj.weight", c.qLoraRank, d);
  L.qANorm = ld.vec(a + "q_a_layernorm.weight", c.qLoraRank);
  L.qB = ld.mat(a + "q_b_proj.weight", H * (dn + dr), c.qLoraRank);
  L.kvA = ld.mat(a + "kv_a_proj_with_mqa.weight", c.kvLoraRank + dr, d);
  L.kvANorm = ld.vec(a + "kv_a_layernorm.weight", c.kvLoraRank);
  L.kvB = ld.mat(a + "kv_b_proj.weight", H * (dn + dv), c.kvLoraRank);
  L.o = ld.mat(a + "o_proj.weight", d, H * dv);
  L.fullIndexer = c.indexNHeads > 0 && fullIndexer;
  if (L.fullIndexer) {
    std::string ix = a + "indexer.";
    const int64_t nh = c.indexNHeads, hd = c.indexHeadDim;
    L.indexer.wqB = ld.mat(ix + "wq_b.weight", nh * hd, c.qLoraRank);
    L.indexer.wk = ld.mat(ix + "wk.weight", hd, d);
    L.indexer.kNormW = ld.vec(ix + "k_norm.weight", hd);
    L.indexer.kNormB = ld.vec(ix + "k_norm.bias", hd);
    L.indexer.weightsProj = ld.mat(ix + "weights_proj.weight", nh, d);
    if (c.isFlash()) {
      L.indexer.kpoolGate = ld.mat(ix + "index_kpool_compress_gate", hd, d);
      L.indexer.kpoolApe = ld.mat(ix + "index_kpool_compress_ape",
                                  c.indexKpool, hd);
    }
  }
}

/// Router, routed and shared experts of a MoE layer under `m`.
static void moeWeights(Loader &ld, const ModelConfig &c, const std::string &m,
                       LayerWeights &L) {
  const int64_t d = c.hiddenSize;
  L.moe = true;
  L.router = ld.mat(m + "gate.weight", c.numRoutedExperts, d);
  L.routerBias = ld.vec(m + "gate.e_score_correction_bias", c.numRoutedExperts);
  for (int64_t e = 0; e < c.numRoutedExperts; ++e)
    L.experts.push_back(ld.mlp(m + "experts." + std::to_string(e) + ".", d,
                               c.moeIntermediateSize));
  if (c.numSharedExperts > 0)
    L.shared = ld.mlp(m + "shared_experts.", d,
                      c.moeIntermediateSize * c.numSharedExperts);
}

/// Whether the source stores the MTP layers (their eh_proj decides; a
/// partial layer then fails the load by name).
static bool sourceHasMtp(const ModelConfig &c, const WeightSource &src) {
  return c.numNextnPredictLayers > 0 &&
         src.has(c.tensorPrefix() + "layers." + std::to_string(c.numLayers) +
                 ".eh_proj.weight");
}

/// MTP head m (layer num_hidden_layers + m): the names of
/// expectedMtpTensors (runtime/model/hf_names.h).
static MtpWeights mtpWeights(Loader &ld, const ModelConfig &c, int64_t m) {
  const int64_t d = c.hiddenSize;
  const std::string p =
      c.tensorPrefix() + "layers." + std::to_string(c.numLayers + m) + ".";
  MtpWeights w;
  LayerWeights &L = w.layer;
  L.inputNorm = ld.vec(p + "input_layernorm.weight", d);
  L.postNorm = ld.vec(p + "post_attention_layernorm.weight", d);
  mlaWeights(ld, c, p + "self_attn.", true, L);
  moeWeights(ld, c, p + "mlp.", L);
  w.ehProj = ld.mat(p + "eh_proj.weight", d, 2 * d);
  w.enorm = ld.vec(p + "enorm.weight", d);
  w.hnorm = ld.vec(p + "hnorm.weight", d);
  w.headNorm = ld.vec(p + "shared_head.norm.weight", d);
  if (ld.src.has(p + "embed_tokens.weight"))
    w.embed = ld.mat(p + "embed_tokens.weight", c.vocabSize, d);
  if (ld.src.has(p + "shared_head.head.weight"))
    w.head = ld.mat(p + "shared_head.head.weight", c.vocabSize, d);
  return w;
}

/// The one walk over the weights the forward needs: loads them, or in count
/// mode only checks them and sums their fp32 bytes.
static std::shared_ptr<ModelWeights> walkWeights(const ModelConfig &c,
                                                Loader &ld) {
  checkSupportedConfig(c);
  auto w = std::make_shared<ModelWeights>();
  w->config = c;
  const int64_t d = c.hiddenSize;
  const std::string root = c.tensorPrefix();
  // Tensor count, for the progress callback only.
  ld.total = 3;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    ld.total += c.isKdaLayer(l) ? 18 : 9;
    ld.total += c.hcMult > 0 ? 6 : 0;
    if (!c.isKdaLayer(l) && c.indexNHeads > 0 && c.isFullIndexerLayer(l))
      ld.total += c.isFlash() ? 7 : 5;
    ld.total += c.isMoeLayer(l)
                    ? 2 + 3 * (c.numRoutedExperts + (c.numSharedExperts > 0))
                    : 3;
  }
  ld.total += c.tieWordEmbeddings ? 0 : 1;
  const bool mtp = sourceHasMtp(c, ld.src);
  if (mtp) // layer, indexer, MoE, eh_proj and three norms
    ld.total += c.numNextnPredictLayers *
                (13 + (c.indexNHeads > 0 ? (c.isFlash() ? 7 : 5) : 0) + 2 +
                 3 * (c.numRoutedExperts + (c.numSharedExperts > 0)));

  w->embed = ld.mat(root + "embed_tokens.weight", c.vocabSize, d);
  for (int64_t l = 0; l < c.numLayers; ++l) {
    LayerWeights L;
    std::string p = root + "layers." + std::to_string(l) + ".";
    L.inputNorm = ld.vec(p + "input_layernorm.weight", d);
    L.postNorm = ld.vec(p + "post_attention_layernorm.weight", d);
    if (c.hcMult > 0) {
      const int64_t S = c.hcMult, mix = (2 + S) * S;
      for (auto [site, hc] : {std::pair{"attn", &L.attnHc},
                              std::pair{"ffn", &L.ffnHc}}) {
        const std::string h = p + "hc_" + site + "_";
        hc->fn = ld.mat(h + "fn", mix, S * d);
        hc->base = ld.vec(h + "base", mix);
        hc->scale = ld.vec(h + "scale", 3);
      }
    }
    std::string a = p + "self_attn.";
    L.kda = c.isKdaLayer(l);
    if (L.kda) {
      const int64_t nh = c.linearNumHeads, hd = c.linearHeadDim,
                    qkv = nh * hd, K = c.linearConvKernel;
      KdaWeights &k = L.linear;
      k.q = ld.mat(a + "q_proj.weight", qkv, d);
      k.k = ld.mat(a + "k_proj.weight", qkv, d);
      k.v = ld.mat(a + "v_proj.weight", qkv, d);
      k.convQ = ld.get(a + "q_conv1d.weight", {qkv, 1, K});
      k.convK = ld.get(a + "k_conv1d.weight", {qkv, 1, K});
      k.convV = ld.get(a + "v_conv1d.weight", {qkv, 1, K});
      k.fA = ld.mat(a + "f_a_proj.weight", hd, d);
      k.fB = ld.mat(a + "f_b_proj.weight", qkv, hd);
      k.dtBias = ld.vec(a + "dt_bias", qkv);
      k.aLog = ld.vec(a + "A_log", nh);
      k.b = ld.mat(a + "b_proj.weight", nh, d);
      k.gA = ld.mat(a + "g_a_proj.weight", hd, d);
      k.gB = ld.mat(a + "g_b_proj.weight", qkv, hd);
      k.oNorm = ld.vec(a + "o_norm.weight", hd);
      k.o = ld.mat(a + "o_proj.weight", d, qkv);
    } else {
      mlaWeights(ld, c, a, c.isFullIndexerLayer(l), L);
    }
    std::string m = p + "mlp.";
    L.moe = c.isMoeLayer(l);
    if (L.moe)
      moeWeights(ld, c, m, L);
    else
      L.dense = ld.mlp(m, d, c.intermediateSize);
    w->layers.push_back(std::move(L));
  }
  w->finalNorm = ld.vec(root + "norm.weight", d);
  if (c.tieWordEmbeddings && !ld.src.has("lm_head.weight")) {
    w->lmHead = w->embed; // a copy: count it
    ld.bytes += uint64_t(c.vocabSize) * uint64_t(d) * sizeof(float);
  } else {
    w->lmHead = ld.mat("lm_head.weight", c.vocabSize, d);
  }
  if (mtp)
    for (int64_t m = 0; m < c.numNextnPredictLayers; ++m)
      w->mtp.push_back(mtpWeights(ld, c, m));
  return w;
}

std::shared_ptr<const ModelWeights>
ModelWeights::load(const ModelConfig &c, const WeightSource &src,
                   const std::function<void(int64_t, int64_t)> &progress) {
  Loader ld{src, 0, 0, progress};
  return walkWeights(c, ld);
}

uint64_t ModelWeights::fp32Bytes(const ModelConfig &c,
                                 const WeightSource &src) {
  const std::function<void(int64_t, int64_t)> none;
  Loader ld{src, 0, 0, none};
  ld.countOnly = true;
  walkWeights(c, ld);
  return ld.bytes;
}

} // namespace glm::rt::cpu
