//===- synth_hf.cpp - random Hugging Face GLM-5.3 checkpoints (glmc synth)
//-===//
//
// presetConfigJson gives the config.json of a preset ("tiny": small enough to
// quantize at every width in seconds yet exercising dense and MoE layers,
// full and shared indexer layers and sparse selection; "glm53": the published
// geometry). writeRandomHfModel writes what save_pretrained would: config,
// tokenizer files, and seeded random BF16 weights in two shards with an
// index. The random numbers come from our own generator so the bytes are the
// same on every platform.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "compiler/packtools/tokenizer_gen.h"
#include "runtime/base/error.h"
#include "runtime/base/strings.h"
#include "runtime/base/hash.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/hf_names.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using glm::rt::check;
using glm::rt::fail;

namespace glmc {
using glm::rt::endsWith;

namespace {

/// shared/configs/glm53.config.json byte for byte, embedded so glmc needs no
/// data files at run time.
// clang-format off
const char *const kGlm53Config = R"json({
  "architectures": [
    "GlmMoeDsaForCausalLM"
  ],
  "model_type": "glm_moe_dsa",
  "attention_bias": false,
  "attention_dropout": 0.0,
  "dtype": "bfloat16",
  "eos_token_id": [
    154820,
    154827,
    154829
  ],
  "pad_token_id": 154820,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 6144,
  "index_head_dim": 128,
  "index_n_heads": 32,
  "index_share_for_mtp_iteration": true,
  "index_skip_topk_offset": 3,
  "index_topk": 2048,
  "index_topk_freq": 4,
  "index_topk_pattern": null,
  "indexer_rope_interleave": true,
  "indexer_types": [
    "full",
    "full",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared",
    "full",
    "shared",
    "shared",
    "shared"
  ],
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "kv_lora_rank": 512,
  "max_position_embeddings": 1048576,
  "mlp_layer_types": [
    "dense",
    "dense",
    "dense",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse",
    "sparse"
  ],
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "moe_router_dtype": "float32",
  "n_group": 1,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 64,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 78,
  "num_key_value_heads": 64,
  "num_nextn_predict_layers": 1,
  "pretraining_tp": 1,
  "q_lora_rank": 2048,
  "qk_head_dim": 256,
  "qk_nope_head_dim": 192,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-05,
  "rope_interleave": true,
  "rope_parameters": {
    "rope_theta": 8000000,
    "rope_type": "default"
  },
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "noaux_tc",
  "use_cache": true,
  "v_head_dim": 256,
  "vocab_size": 154880
})json";
// clang-format on

/// Two layers (dense + full indexer, MoE + shared indexer), 4 routed experts
/// of two 128-channel halves, top-2, one shared expert: every code path of
/// the model at a size that `glmc synth --layout exlr8` (each half at K2, K3
/// and K4) encodes in ~16 s on 2 cores (measured; 3 layers x 8 experts took
/// 48 s), plus the MTP layer (layer 2: MLA with its own full indexer, MoE,
/// eh_proj). Linear dimensions are multiples of 128 except
/// kv_a_proj_with_mqa.
std::string tinyConfigJson() {
  using ojson = nlohmann::ordered_json;
  const int64_t eot = specialTokenId("tiny", "<|endoftext|>");
  ojson j;
  j["architectures"] = {"GlmMoeDsaForCausalLM"};
  j["model_type"] = "glm_moe_dsa";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["dtype"] = "bfloat16";
  j["eos_token_id"] = {eot, specialTokenId("tiny", "<|user|>"),
                       specialTokenId("tiny", "<|observation|>")};
  j["pad_token_id"] = eot;
  j["ep_size"] = 1;
  j["first_k_dense_replace"] = 1;
  j["head_dim"] = 32; // = qk_rope_head_dim, as transformers rewrites it
  j["hidden_act"] = "silu";
  j["hidden_size"] = 128;
  j["index_head_dim"] = 64;
  j["index_n_heads"] = 2;
  j["index_share_for_mtp_iteration"] = true;
  // full iff max(i - offset + 1, 0) % freq == 0: layer 0 full, 1 shared.
  j["index_skip_topk_offset"] = 1;
  j["index_topk"] = 8; // prompts longer than 8 tokens select sparsely
  j["index_topk_freq"] = 4;
  j["index_topk_pattern"] = nullptr;
  j["indexer_rope_interleave"] = true;
  j["indexer_types"] = {"full", "shared"};
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = 256;
  j["kv_lora_rank"] = 128;
  j["max_position_embeddings"] = 4096;
  j["mlp_layer_types"] = {"dense", "sparse"};
  j["moe_intermediate_size"] = 256; // two 128-channel halves per expert
  j["moe_layer_freq"] = 1;
  j["moe_router_dtype"] = "float32";
  j["n_group"] = 1;
  j["n_routed_experts"] = 4;
  j["n_shared_experts"] = 1;
  j["norm_topk_prob"] = true;
  j["num_attention_heads"] = 4;
  j["num_experts_per_tok"] = 2;
  j["num_hidden_layers"] = 2;
  j["num_key_value_heads"] = 4;
  j["num_nextn_predict_layers"] = 1; // layer 2: the MTP head
  j["pretraining_tp"] = 1;
  j["q_lora_rank"] = 128;
  j["qk_head_dim"] = 64;
  j["qk_nope_head_dim"] = 32;
  j["qk_rope_head_dim"] = 32;
  j["rms_norm_eps"] = 1e-05;
  j["rope_interleave"] = true;
  j["rope_parameters"] = {{"rope_theta", 8000000}, {"rope_type", "default"}};
  j["routed_scaling_factor"] = 2.5;
  j["scoring_func"] = "sigmoid";
  j["tie_word_embeddings"] = false;
  j["topk_group"] = 1;
  j["topk_method"] = "noaux_tc";
  j["use_cache"] = true;
  j["v_head_dim"] = 128; // a head spans a whole Hadamard-128 block
  j["vocab_size"] = 512;
  return j.dump(2) + "\n";
}

/// GLM-5.3-Flash (glm5_next) config.json: `tiny` = flash-tiny, else the
/// full geometry of glm53-architecture.md §1b. flash-tiny has one KDA layer
/// (dense MLP), one NoPE DSA layer with the k-pool indexer (MoE: 4 experts
/// of two 128-channel halves + 1 shared), mHC with 4 streams, the SwiGLU
/// clamp, an MTP layer (so readers meet layer num_hidden_layers) and a
/// 1-block vision tower; linear widths are multiples of 128 where a layout
/// quantizes them.
std::string flashConfigJson(bool tiny) {
  using ojson = nlohmann::ordered_json;
  const std::string tok = tiny ? "flash-tiny" : "flash";
  const int64_t eot = specialTokenId(tok, "<|endoftext|>");
  const int64_t layers = tiny ? 2 : 45;
  ojson t;
  t["model_type"] = "glm5_next_text";
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["eos_token_id"] = {eot, specialTokenId(tok, "<|user|>"),
                       specialTokenId(tok, "<|observation|>")};
  t["pad_token_id"] = eot;
  t["first_k_dense_replace"] = tiny ? 1 : 3;
  t["hc_eps"] = 1e-06;
  t["hc_mult"] = 4;
  t["hc_sinkhorn_iters"] = 20;
  t["head_dim"] = 0;
  t["hidden_act"] = "silu";
  t["hidden_size"] = tiny ? 128 : 4096;
  t["index_head_dim"] = tiny ? 64 : 128;
  t["index_kpool"] = 4;
  t["index_kpool_always_select_tail"] = true;
  t["index_kpool_compress"] = true;
  t["index_n_heads"] = tiny ? 2 : 32;
  t["index_share_for_mtp_iteration"] = true;
  t["index_topk"] = tiny ? 8 : 2048; // tiny: prompts past 8 tokens select
  t["indexer_rope_interleave"] = true;
  t["indexer_types"] = std::vector<std::string>(layers, "full");
  t["initializer_range"] = 0.02;
  t["intermediate_size"] = tiny ? 256 : 12288;
  t["kv_lora_rank"] = tiny ? 128 : 512;
  std::vector<std::string> types, mlp;
  std::vector<int64_t> kda, full;
  for (int64_t l = 0; l < layers; ++l) {
    bool dsa = tiny ? l == 1 : l % 4 == 3;
    types.push_back(dsa ? "deepseek_sparse_attention" : "linear_attention");
    (dsa ? full : kda).push_back(l);
    mlp.push_back(l < (tiny ? 1 : 3) ? "dense" : "sparse");
  }
  t["layer_types"] = types;
  t["linear_attn_config"] = {{"num_heads", tiny ? 2 : 64},
                             {"head_dim", tiny ? 64 : 128},
                             {"short_conv_kernel_size", 4},
                             {"gate_lower_bound", -5.0},
                             {"kda_layers", kda},
                             {"full_attn_layers", full}};
  t["linear_lower_bound"] = -5.0;
  t["max_position_embeddings"] = tiny ? 4096 : 1048576;
  t["mhc"] = true;
  t["mla_use_nope"] = true;
  t["mlp_layer_types"] = mlp;
  t["moe_intermediate_size"] = tiny ? 256 : 2048;
  t["moe_router_dtype"] = "float32";
  t["n_group"] = 1;
  t["n_routed_experts"] = tiny ? 4 : 288;
  t["n_shared_experts"] = 1;
  t["norm_topk_prob"] = true;
  t["num_attention_heads"] = tiny ? 2 : 64;
  t["num_experts_per_tok"] = tiny ? 2 : 8;
  t["num_hidden_layers"] = layers;
  t["num_key_value_heads"] = tiny ? 2 : 64;
  t["num_nextn_predict_layers"] = 1;
  t["q_lora_rank"] = tiny ? 128 : 1536;
  t["qk_head_dim"] = tiny ? 64 : 256;
  t["qk_nope_head_dim"] = tiny ? 64 : 256;
  t["qk_rope_head_dim"] = 0;
  t["rms_norm_eps"] = 1e-05;
  t["rope_parameters"] = nullptr;
  t["routed_scaling_factor"] = 2.5;
  t["scoring_func"] = "sigmoid";
  t["swiglu_limit"] = 10.0;
  t["tie_word_embeddings"] = false;
  t["topk_group"] = 1;
  t["topk_method"] = "noaux_tc";
  t["use_cache"] = true;
  t["v_head_dim"] = tiny ? 64 : 256;
  t["vocab_size"] = tiny ? 512 : 154880;
  ojson v;
  v["model_type"] = "glm5_next_vision";
  v["attention_bias"] = true;
  v["depth"] = tiny ? 1 : 24;
  v["hidden_act"] = "silu";
  v["hidden_size"] = tiny ? 32 : 1024;
  v["image_size"] = tiny ? 28 : 448;
  v["in_channels"] = 3;
  v["intermediate_size"] = tiny ? 64 : 4096;
  v["num_heads"] = tiny ? 2 : 16;
  v["out_hidden_size"] = t["hidden_size"];
  v["patch_size"] = 14;
  v["projection_intermediate_size"] = tiny ? 64 : 10240;
  v["rms_norm_eps"] = 1e-05;
  v["spatial_merge_size"] = 2;
  v["swiglu_limit"] = 10.0;
  v["temporal_patch_size"] = 2;
  ojson j;
  j["architectures"] = {"Glm5NextForConditionalGeneration"};
  j["model_type"] = "glm5_next";
  j["dtype"] = "bfloat16";
  j["image_start_token_id"] = 154830;
  j["image_end_token_id"] = 154831;
  j["image_token_id"] = 154854;
  j["video_start_token_id"] = 154832;
  j["video_end_token_id"] = 154833;
  j["video_token_id"] = 154855;
  j["tie_word_embeddings"] = false;
  j["text_config"] = t;
  j["vision_config"] = v;
  return j.dump(2) + "\n";
}

/// The vision tower's tensors as transformers saves them (model.visual.*,
/// the layout of tests/oracle/goldens/glm_flash_a): glmc does not run it
/// yet, but packs carry it so readers meet it and skip it by name.
std::vector<glm::rt::HfTensorSpec> visionTensors(const std::string &cfgText) {
  auto root = nlohmann::json::parse(cfgText);
  std::vector<glm::rt::HfTensorSpec> out;
  if (!root.contains("vision_config"))
    return out;
  const auto &v = root["vision_config"];
  const int64_t h = v.at("hidden_size"), inter = v.at("intermediate_size"),
                heads = v.at("num_heads"), o = v.at("out_hidden_size"),
                pi = v.at("projection_intermediate_size"),
                m = v.at("spatial_merge_size"), p = v.at("patch_size"),
                tp = v.at("temporal_patch_size"), ch = v.at("in_channels"),
                depth = v.at("depth");
  auto add = [&](const std::string &n, std::vector<int64_t> shape) {
    glm::rt::HfTensorSpec s;
    s.name = "model.visual." + n;
    s.shape = std::move(shape);
    out.push_back(std::move(s));
  };
  for (int64_t b = 0; b < depth; ++b) {
    const std::string k = "blocks." + std::to_string(b) + ".";
    add(k + "attn.qkv.weight", {3 * h, h});
    add(k + "attn.qkv.bias", {3 * h});
    add(k + "attn.proj.weight", {h, h});
    add(k + "attn.proj.bias", {h});
    add(k + "attn.q_norm.weight", {h / heads});
    add(k + "attn.k_norm.weight", {h / heads});
    for (const char *x : {"gate_proj", "up_proj"}) {
      add(k + "mlp." + x + ".weight", {inter, h});
      add(k + "mlp." + x + ".bias", {inter});
    }
    add(k + "mlp.down_proj.weight", {h, inter});
    add(k + "mlp.down_proj.bias", {h});
    add(k + "norm1.weight", {h});
    add(k + "norm2.weight", {h});
  }
  add("downsample.weight", {o, h, m, m});
  add("downsample.bias", {o});
  add("merger.proj.weight", {o, o});
  add("merger.post_projection_norm.weight", {o});
  add("merger.post_projection_norm.bias", {o});
  add("merger.gate_proj.weight", {pi, o});
  add("merger.up_proj.weight", {pi, o});
  add("merger.down_proj.weight", {o, pi});
  add("patch_embed.proj.weight", {h, ch, tp, p, p});
  add("patch_embed.proj.bias", {h});
  add("post_layernorm.weight", {h});
  return out;
}

/// splitmix64: a tiny, portable generator (std distributions differ
/// between standard libraries, and the bytes must not).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() {
    return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  /// Box-Muller; one normal per call keeps the stream simple.
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

/// Values of one tensor: norms near 1, the router bias small and spread so
/// routing is not degenerate, everything else N(0, 0.02) like
/// initializer_range.
std::vector<float> randomValues(const glm::rt::HfTensorSpec &s, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : s.shape)
    n *= d;
  // Each tensor has its own stream: adding a tensor changes no other one.
  Rng rng(seed ^ glm::rt::xxh64(s.name.data(), s.name.size(), 0x5EED));
  std::vector<float> v((size_t)n);
  const bool norm = endsWith(s.name, "norm.weight");
  const bool bias = endsWith(s.name, "e_score_correction_bias");
  // Flash's vectors at the scale of the oracle's goldens
  // (tests/oracle/make_flash_goldens.py): the gates and mHC maps then do
  // more than pass their input through.
  const bool wide = endsWith(s.name, "A_log") || endsWith(s.name, "dt_bias") ||
                    endsWith(s.name, "_base") ||
                    endsWith(s.name, "index_kpool_compress_ape") ||
                    s.name.find("_conv1d.") != std::string::npos;
  const bool hcScale = endsWith(s.name, "_scale") &&
                       s.name.find(".hc_") != std::string::npos;
  for (auto &x : v) {
    double z = rng.normal();
    if (norm)
      x = (float)(1.0 + 0.05 * z);
    else if (bias)
      x = (float)(0.05 * z);
    else if (wide)
      x = (float)(0.5 * z);
    else if (hcScale)
      x = (float)(1.0 + 0.2 * z);
    else
      x = (float)(0.02 * z);
  }
  return v;
}

void writeText(const fs::path &p, const std::string &text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  check(out.good(), p.string(), ": cannot create");
  out << text;
  check(out.good(), p.string(), ": write failed");
}

/// Kept in fp32 by transformers (and by the release): the router bias and
/// KDA's forget-gate parameters.
bool storedAsF32(const std::string &name) {
  return endsWith(name, "e_score_correction_bias") ||
         endsWith(name, "A_log") || endsWith(name, "dt_bias");
}

} // namespace

std::string presetConfigJson(const std::string &preset) {
  if (preset == "tiny")
    return tinyConfigJson();
  if (preset == "glm53")
    return kGlm53Config;
  if (preset == "flash-tiny" || preset == "flash")
    return flashConfigJson(preset == "flash-tiny");
  fail("unknown preset \"", preset,
       "\" (expected tiny, glm53, flash-tiny or flash)");
}

bool presetIsFullSize(const std::string &preset) {
  return preset == "glm53" || preset == "flash";
}

std::string truncatedConfigJson(const std::string &configText, int layers) {
  auto root = nlohmann::ordered_json::parse(configText);
  // GLM-5.3-Flash keeps the text geometry under text_config.
  auto &j = root.contains("text_config") ? root["text_config"] : root;
  const int64_t have = j.at("num_hidden_layers").get<int64_t>();
  check(layers >= 1 && layers <= have, "--layers ", layers,
        ": the preset has ", have, " decoder layers; give 1..", have);
  j["num_hidden_layers"] = layers;
  // Per-layer lists follow the layer count (the config parser checks it).
  for (auto &[key, v] : j.items())
    if (v.is_array() && (int64_t)v.size() == have)
      v.erase(v.begin() + layers, v.end());
  // linear_attn_config lists layer numbers: keep those that remain.
  if (j.contains("linear_attn_config"))
    for (const char *k : {"kda_layers", "full_attn_layers"})
      if (j["linear_attn_config"].contains(k)) {
        auto &list = j["linear_attn_config"][k];
        nlohmann::ordered_json kept = nlohmann::ordered_json::array();
        for (auto &l : list)
          if (l.get<int64_t>() < layers)
            kept.push_back(l);
        list = kept;
      }
  return root.dump(2) + "\n";
}

void writeRandomHfModel(const std::string &preset, uint64_t seed,
                        const std::string &dir, bool indexOnly, int layers) {
  const std::string cfgText =
      layers > 0 ? truncatedConfigJson(presetConfigJson(preset), layers)
                 : presetConfigJson(preset);
  const glm::rt::ModelConfig cfg =
      glm::rt::parseModelConfig(cfgText, "preset " + preset + " config.json");
  check(indexOnly || !presetIsFullSize(preset), "--preset ", preset,
        " with random weights would write ~",
        preset == "flash" ? "640 GB" : "1.5 TB",
        " of BF16; use --index-only (the compiler needs no weight bytes)");
  fs::path root(dir);
  fs::create_directories(root);
  writeText(root / "config.json", cfgText);
  writeText(root / "tokenizer.json", tokenizerJson(preset));
  writeText(root / "tokenizer_config.json", tokenizerConfigJson(preset));
  writeText(root / "generation_config.json",
            generationConfigJson(cfg.eosTokenIds, cfg.padTokenId));
  writeText(root / "chat_template.jinja", chatTemplateJinja());
  if (indexOnly)
    return;

  // Two shards split at half the bytes, as save_pretrained shards by size.
  // The causal LM, then what a release ships beside it: MTP layers and the
  // vision tower (readers recognise and skip both).
  std::vector<glm::rt::HfTensorSpec> specs = glm::rt::expectedHfTensors(cfg);
  for (auto &s : glm::rt::expectedMtpTensors(cfg))
    specs.push_back(std::move(s));
  for (auto &s : visionTensors(cfgText))
    specs.push_back(std::move(s));
  auto bytesOf = [](const glm::rt::HfTensorSpec &s) {
    int64_t n = storedAsF32(s.name) ? 4 : 2;
    for (int64_t d : s.shape)
      n *= d;
    return (uint64_t)n;
  };
  uint64_t total = 0;
  for (const auto &s : specs)
    total += bytesOf(s);
  const std::string names[2] = {"model-00001-of-00002.safetensors",
                                "model-00002-of-00002.safetensors"};
  glm::rt::SafetensorsWriter shard[2];
  nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
  uint64_t running = 0;
  for (const auto &s : specs) {
    int k = running < total / 2 ? 0 : 1;
    running += bytesOf(s);
    std::vector<float> v = randomValues(s, seed);
    if (storedAsF32(s.name))
      shard[k].addF32(s.name, s.shape, v);
    else
      shard[k].addBF16(s.name, s.shape, v);
    weightMap[s.name] = names[k];
  }
  for (int k = 0; k < 2; ++k) {
    shard[k].setMetadata("format", "pt");
    shard[k].write((root / names[k]).string());
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weightMap;
  writeText(root / "model.safetensors.index.json", index.dump(2) + "\n");
}

void copyModelSideFiles(const std::string &srcDir, const std::string &dstDir) {
  static const char *const kFiles[] = {
      "config.json",           "tokenizer.json",
      "tokenizer_config.json", "generation_config.json",
      "chat_template.jinja",   "special_tokens_map.json",
      "processor_config.json"};
  fs::path src(srcDir), dst(dstDir);
  check(fs::exists(src / "config.json"), srcDir,
        ": no config.json to copy (is this a Hugging Face model directory?)");
  fs::create_directories(dst);
  for (const char *f : kFiles) {
    if (!fs::exists(src / f))
      continue;
    std::error_code ec;
    fs::copy_file(src / f, dst / f, fs::copy_options::overwrite_existing, ec);
    check(!ec, (src / f).string(), ": cannot copy to ", dstDir, " (",
          ec.message(), ")");
  }
}

} // namespace glmc
