//===- config_test.cpp - presets, the HF tensor list, synthetic tokenizer -===//
//
// The tiny and glm53 presets parse with the real key names; expectedHfTensors
// reproduces the published parameter count of GLM-5.3 and lists exactly what
// writeRandomHfModel writes; the synthetic tokenizer is a consistent BPE and,
// where Python `tokenizers`/`jinja2` are installed, loads and renders there.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "compiler/packtools/tokenizer_gen.h"
#include "runtime/base/error.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/config.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using namespace glm::rt;

namespace {

std::string tmpDir(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_cfg_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool pythonHas(const std::string &module) {
  std::string cmd = "python3 -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

/// Runs a python script, returns its exit status; output goes to `outPath`.
int runPython(const std::string &dir, const std::string &script,
              const std::string &outPath) {
  std::string py = dir + "/check.py";
  std::ofstream(py) << script;
  std::string cmd = "python3 " + py + " > " + outPath + " 2>&1";
  return std::system(cmd.c_str());
}

} // namespace

TEST(Presets, TinyParsesWithRealKeys) {
  ModelConfig c = parseModelConfig(glmc::presetConfigJson("tiny"), "tiny");
  EXPECT_EQ(c.modelType, "glm_moe_dsa");
  EXPECT_EQ(c.architecture, "GlmMoeDsaForCausalLM");
  EXPECT_EQ(c.hiddenSize, 128);
  EXPECT_EQ(c.numLayers, 2);
  EXPECT_FALSE(c.isMoeLayer(0));
  EXPECT_TRUE(c.isMoeLayer(1));
  EXPECT_TRUE(c.isFullIndexerLayer(0));
  EXPECT_FALSE(c.isFullIndexerLayer(1));
  EXPECT_GT(c.numRoutedExperts, c.numExpertsPerTok);
  EXPECT_EQ(c.numSharedExperts, 1);
  EXPECT_EQ(c.indexTopk, 8);
  EXPECT_EQ(c.ropeTheta, 8000000.0);
  EXPECT_EQ(c.routedScalingFactor, 2.5);
  EXPECT_EQ(c.moeIntermediateSize % 128, 0);
  EXPECT_EQ(c.numExpertsPerTok, 2);
  // indexer_types agrees with transformers' freq/offset rule.
  auto j = nlohmann::json::parse(glmc::presetConfigJson("tiny"));
  int64_t freq = j["index_topk_freq"], offset = j["index_skip_topk_offset"];
  for (int64_t i = 0; i < c.numLayers; ++i)
    EXPECT_EQ(c.isFullIndexerLayer(i),
              std::max<int64_t>(i - offset + 1, 0) % freq == 0)
        << "layer " << i;
  // eos ids are the tokenizer's, and every special token fits the vocab.
  EXPECT_EQ(
      c.eosTokenIds,
      (std::vector<int64_t>{glmc::specialTokenId("tiny", "<|endoftext|>"),
                            glmc::specialTokenId("tiny", "<|user|>"),
                            glmc::specialTokenId("tiny", "<|observation|>")}));
  EXPECT_EQ(c.padTokenId, glmc::specialTokenId("tiny", "<|endoftext|>"));
  for (const auto &kv : glmc::specialTokenIds("tiny"))
    EXPECT_LT(kv.second, c.vocabSize) << kv.first;
  // Trellis-quantized linear dimensions are multiples of 128, except the
  // kv_a_proj_with_mqa output (kv_lora + rope), which packs pad.
  for (const HfTensorSpec &s : expectedHfTensors(c)) {
    if (!s.quantizable || s.name.find("indexer") != std::string::npos ||
        s.name == "lm_head.weight")
      continue;
    if (s.name.find("kv_a_proj_with_mqa") == std::string::npos)
      EXPECT_EQ(s.shape[0] % 128, 0) << s.name;
    EXPECT_EQ(s.shape[1] % 128, 0) << s.name;
  }
}

TEST(Presets, Glm53MatchesPublishedGeometry) {
  std::string text = glmc::presetConfigJson("glm53");
  ModelConfig c = parseModelConfig(text, "glm53");
  EXPECT_EQ(c.hiddenSize, 6144);
  EXPECT_EQ(c.numLayers, 78);
  EXPECT_EQ(c.numRoutedExperts, 256);
  EXPECT_EQ(c.vocabSize, 154880);
  EXPECT_EQ(c.eosTokenIds, (std::vector<int64_t>{154820, 154827, 154829}));
  int full = 0;
  for (int64_t i = 0; i < c.numLayers; ++i)
    full += c.isFullIndexerLayer(i);
  EXPECT_EQ(full, 21);
  // The special tokens of the glm53 tokenizer sit at the published ids.
  EXPECT_EQ(glmc::specialTokenId("glm53", "<|endoftext|>"), 154820);
  EXPECT_EQ(glmc::specialTokenId("glm53", "<|user|>"), 154827);
  EXPECT_EQ(glmc::specialTokenId("glm53", "<think>"), 154841);
  EXPECT_THROW(glmc::presetConfigJson("huge"), Error);
}

TEST(HfNames, Glm53ParameterCountMatchesPublished) {
  ModelConfig c = parseModelConfig(glmc::presetConfigJson("glm53"), "glm53");
  std::vector<HfTensorSpec> specs = expectedHfTensors(c);
  double total = 0, experts = 0;
  std::set<std::string> names;
  for (const auto &s : specs) {
    double n = 1;
    for (int64_t d : s.shape)
      n *= (double)d;
    total += n;
    if (s.expert >= 0)
      experts += n;
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    EXPECT_LT(s.layer, 78) << s.name; // no MTP layer
  }
  // shared/specs/glm53-architecture.md §6: main model 743.38 B, routed
  // experts 724.78 B.
  EXPECT_NEAR(total / 1e9, 743.38, 0.01);
  EXPECT_NEAR(experts / 1e9, 724.78, 0.01);
  // Spot checks of names and shapes (transformers GlmMoeDsa modules).
  auto find = [&](const std::string &n) -> const HfTensorSpec * {
    for (const auto &s : specs)
      if (s.name == n)
        return &s;
    return nullptr;
  };
  const HfTensorSpec *kvb = find("model.layers.5.self_attn.kv_b_proj.weight");
  ASSERT_TRUE(kvb);
  EXPECT_EQ(kvb->shape, (std::vector<int64_t>{64 * 448, 512}));
  ASSERT_TRUE(find("model.layers.6.self_attn.indexer.k_norm.bias"));
  EXPECT_FALSE(find("model.layers.5.self_attn.indexer.wq_b.weight"));
  const HfTensorSpec *wq = find("model.layers.6.self_attn.indexer.wq_b.weight");
  ASSERT_TRUE(wq);
  EXPECT_EQ(wq->shape, (std::vector<int64_t>{32 * 128, 2048}));
  const HfTensorSpec *down =
      find("model.layers.77.mlp.experts.255.down_proj.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{6144, 2048}));
  EXPECT_EQ(down->layer, 77);
  EXPECT_EQ(down->expert, 255);
  EXPECT_EQ(down->projection, kProjDown);
  const HfTensorSpec *sh =
      find("model.layers.3.mlp.shared_experts.up_proj.weight");
  ASSERT_TRUE(sh);
  EXPECT_TRUE(sh->shared);
  EXPECT_EQ(sh->expert, -1);
  EXPECT_EQ(sh->projection, kProjUp);
  ASSERT_TRUE(find("model.layers.2.mlp.gate_proj.weight"));
  EXPECT_FALSE(find("model.layers.2.mlp.gate.weight"));
  ASSERT_TRUE(find("model.layers.3.mlp.gate.e_score_correction_bias"));
  ASSERT_TRUE(find("lm_head.weight"));
  // The name parser agrees with the list.
  for (const auto &s : specs) {
    HfTensorSpec p = parseHfTensorName(s.name);
    ASSERT_EQ(p.layer, s.layer) << s.name;
    ASSERT_EQ(p.expert, s.expert) << s.name;
    ASSERT_EQ(p.projection, s.projection) << s.name;
    ASSERT_EQ(p.shared, s.shared) << s.name;
  }
}

TEST(HfNames, TinyListMatchesWhatSynthWrites) {
  std::string dir = tmpDir("tinylist");
  glmc::writeRandomHfModel("tiny", 7, dir, false);
  ModelConfig c = loadModelConfig(dir);
  auto ckpt = SafetensorsCheckpoint::open(dir);
  EXPECT_EQ(ckpt.files().size(), 2u);
  // The causal LM and the MTP layer (layer 2).
  std::vector<HfTensorSpec> specs = expectedHfTensors(c);
  std::vector<HfTensorSpec> mtp = expectedMtpTensors(c);
  EXPECT_EQ(c.numNextnPredictLayers, 1);
  ASSERT_FALSE(mtp.empty());
  for (const auto &s : mtp)
    EXPECT_EQ(s.layer, 2) << s.name;
  specs.insert(specs.end(), mtp.begin(), mtp.end());
  std::set<std::string> written;
  for (const auto &n : ckpt.names())
    written.insert(n);
  EXPECT_EQ(written.size(), specs.size());
  for (const auto &s : specs) {
    const TensorView *t = ckpt.find(s.name);
    ASSERT_TRUE(t) << s.name << " not written";
    EXPECT_EQ(t->shape, s.shape) << s.name;
    EXPECT_EQ(t->dtype,
              s.name.find("e_score_correction_bias") != std::string::npos
                  ? DType::F32
                  : DType::BF16)
        << s.name;
  }
  // Side files are all there and the tokenizer ids match the config.
  for (const char *f : {"tokenizer.json", "tokenizer_config.json",
                        "generation_config.json", "chat_template.jinja"})
    EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
  auto gen = nlohmann::json::parse(readAll(dir + "/generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"].get<std::vector<int64_t>>(), c.eosTokenIds);
  EXPECT_EQ(gen["top_p"].get<double>(), 0.95);

  // Norms near 1, router bias spread, weights with std ~0.02.
  auto norm = ckpt.get("model.layers.1.input_layernorm.weight").toFloat();
  for (float x : norm)
    EXPECT_NEAR(x, 1.0f, 0.3f);
  auto bias =
      ckpt.get("model.layers.1.mlp.gate.e_score_correction_bias").toFloat();
  EXPECT_NE(*std::min_element(bias.begin(), bias.end()),
            *std::max_element(bias.begin(), bias.end()));
  auto w = ckpt.get("model.layers.1.mlp.experts.3.up_proj.weight").toFloat();
  double ss = 0;
  for (float x : w)
    ss += (double)x * x;
  EXPECT_NEAR(std::sqrt(ss / w.size()), 0.02, 0.002);

  // Same seed, same bytes; another seed, other bytes.
  std::string again = tmpDir("tinylist2");
  glmc::writeRandomHfModel("tiny", 7, again, false);
  std::string other = tmpDir("tinylist3");
  glmc::writeRandomHfModel("tiny", 8, other, false);
  for (const char *f :
       {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "tokenizer.json"})
    EXPECT_EQ(readAll(dir + "/" + f), readAll(again + "/" + f)) << f;
  EXPECT_NE(readAll(dir + "/model-00002-of-00002.safetensors"),
            readAll(other + "/model-00002-of-00002.safetensors"));

  // Index-only: config and tokenizer, no weights.
  std::string io = tmpDir("tinyindexonly");
  glmc::writeRandomHfModel("tiny", 7, io, true);
  EXPECT_TRUE(fs::exists(io + "/config.json"));
  EXPECT_TRUE(fs::exists(io + "/tokenizer.json"));
  EXPECT_FALSE(fs::exists(io + "/model.safetensors.index.json"));
  // glm53 with weights is refused (1.5 TB), index-only works.
  EXPECT_THROW(glmc::writeRandomHfModel("glm53", 1, tmpDir("big"), false),
               Error);
  std::string big = tmpDir("bigindex");
  glmc::writeRandomHfModel("glm53", 1, big, true);
  EXPECT_EQ(readAll(big + "/config.json"), glmc::presetConfigJson("glm53"));

  // copyModelSideFiles copies config and tokenizer files only.
  std::string copy = tmpDir("copy");
  glmc::copyModelSideFiles(dir, copy);
  EXPECT_EQ(readAll(copy + "/config.json"), readAll(dir + "/config.json"));
  EXPECT_TRUE(fs::exists(copy + "/chat_template.jinja"));
  EXPECT_FALSE(fs::exists(copy + "/model.safetensors.index.json"));
  EXPECT_THROW(glmc::copyModelSideFiles(tmpDir("nocfg"), copy), Error);
}

TEST(SynthTokenizer, BpeIsConsistent) {
  auto j = nlohmann::json::parse(glmc::tokenizerJson("tiny"));
  const auto &vocab = j["model"]["vocab"];
  EXPECT_EQ((int64_t)vocab.size(), glmc::kTinyBpeVocab);
  std::set<int64_t> ids;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    ids.insert(it.value().get<int64_t>());
  EXPECT_EQ((int64_t)ids.size(), glmc::kTinyBpeVocab);
  EXPECT_EQ(*ids.rbegin(), glmc::kTinyBpeVocab - 1);
  // Every merge joins two known tokens into a known token.
  const auto &merges = j["model"]["merges"];
  EXPECT_GE(merges.size(), 200u);
  for (const auto &m : merges) {
    std::string s = m.get<std::string>();
    size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos);
    std::string a = s.substr(0, sp), b = s.substr(sp + 1);
    EXPECT_TRUE(vocab.contains(a)) << a;
    EXPECT_TRUE(vocab.contains(b)) << b;
    EXPECT_TRUE(vocab.contains(a + b)) << a + b;
  }
  // The space byte is 'Ġ' (U+0120) in the byte-level alphabet.
  EXPECT_TRUE(vocab.contains("\xC4\xA0"));
  EXPECT_EQ(j["added_tokens"].size(), glmc::glmSpecialTokens().size());
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], glmc::kTinyBpeVocab);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  // Deterministic.
  EXPECT_EQ(glmc::tokenizerJson("tiny"), glmc::tokenizerJson("tiny"));
}

TEST(SynthTokenizer, LoadsInHuggingFaceTokenizers) {
  if (!pythonHas("tokenizers"))
    GTEST_SKIP() << "python3 tokenizers not installed";
  std::string dir = tmpDir("hftok");
  glmc::writeRandomHfModel("tiny", 1, dir, true);
  std::string out = dir + "/out.txt";
  int rc = runPython(dir, R"PY(
import sys, json
from tokenizers import Tokenizer
d = sys.argv[0].rsplit('/', 1)[0]
t = Tokenizer.from_file(d + '/tokenizer.json')
texts = ["Hello world! The quick brown fox.", "def f(x):\n    return x + 1\n",
         "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600 12345",
         "[gMASK]<sop><|user|>hi<|assistant|><think>"]
for s in texts:
    ids = t.encode(s).ids
    assert t.decode(ids, skip_special_tokens=False) == s, (s, ids)
ids = t.encode("[gMASK]<sop><|user|>").ids
assert ids == [478, 480, 483], ids
assert t.get_vocab_size() == 496, t.get_vocab_size()
n = len(t.encode("The quick brown fox jumps over the lazy dog.").ids)
assert n < 30, n
print("ok")
)PY",
                     out);
  EXPECT_EQ(rc, 0) << readAll(out);
}

TEST(SynthTokenizer, ChatTemplateRendersInJinja) {
  if (!pythonHas("jinja2"))
    GTEST_SKIP() << "python3 jinja2 not installed";
  std::string dir = tmpDir("jinja");
  glmc::writeRandomHfModel("tiny", 1, dir, true);
  std::string out = dir + "/out.txt";
  int rc = runPython(dir, R"PY(
import sys, json, jinja2
d = sys.argv[0].rsplit('/', 1)[0]
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
env.filters['tojson'] = lambda x: json.dumps(x, ensure_ascii=False)
t = env.from_string(open(d + '/chat_template.jinja').read())
msgs = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "get_weather",
                         "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "22C"}]
tools = [{"type": "function", "function": {"name": "get_weather"}}]
s = t.render(messages=msgs, tools=tools, add_generation_prompt=True)
assert s.startswith("[gMASK]<sop><|system|>\n# Tools"), s
assert "<|system|>Be brief.<|user|>Weather in Paris?<|assistant|><think></think>" in s, s
assert "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>" in s, s
assert "<|observation|><tool_response>sunny</tool_response><tool_response>22C</tool_response><|assistant|><think>" in s, s
assert s.endswith("<|assistant|><think>"), s
s2 = t.render(messages=msgs[:2], add_generation_prompt=True, enable_thinking=False)
assert s2 == "[gMASK]<sop><|system|>Be brief.<|user|>Weather in Paris?<|assistant|></think>", s2
print("ok")
)PY",
                     out);
  EXPECT_EQ(rc, 0) << readAll(out);
}

//===----------------------------------------------------------------------===//
// GLM-5.3-Flash presets (glm5_next)
//===----------------------------------------------------------------------===//

TEST(Presets, FlashParsesWithRealKeys) {
  ModelConfig t =
      parseModelConfig(glmc::presetConfigJson("flash-tiny"), "flash-tiny");
  EXPECT_TRUE(t.isFlash());
  EXPECT_EQ(t.tensorPrefix(), "model.language_model.");
  EXPECT_EQ(t.hcMult, 4);
  EXPECT_EQ(t.indexKpool, 4);
  EXPECT_DOUBLE_EQ(t.swigluLimit, 10.0);
  EXPECT_TRUE(t.isKdaLayer(0));
  EXPECT_FALSE(t.isKdaLayer(1));
  EXPECT_FALSE(t.isMoeLayer(0));
  EXPECT_TRUE(t.isMoeLayer(1));
  EXPECT_EQ(t.numNextnPredictLayers, 1);
  // Linear widths an exlr8 half or dense trellis record needs.
  EXPECT_EQ(t.hiddenSize % 128, 0);
  EXPECT_EQ(t.moeIntermediateSize % 128, 0);
  EXPECT_EQ(t.linearNumHeads * t.linearHeadDim % 128, 0);

  ModelConfig f = parseModelConfig(glmc::presetConfigJson("flash"), "flash");
  EXPECT_EQ(f.hiddenSize, 4096);
  EXPECT_EQ(f.numLayers, 45);
  EXPECT_EQ(f.numRoutedExperts, 288);
  EXPECT_EQ(f.linearNumHeads, 64);
  EXPECT_EQ(f.linearHeadDim, 128);
  EXPECT_EQ(f.linearConvKernel, 4);
  EXPECT_DOUBLE_EQ(f.linearLowerBound, -5.0);
  int kda = 0;
  for (int64_t l = 0; l < f.numLayers; ++l)
    kda += f.isKdaLayer(l) ? 1 : 0;
  EXPECT_EQ(kda, 34); // §3: 34 KDA, 11 DSA ([3, 7, .., 43])
  EXPECT_FALSE(f.isKdaLayer(43));
  auto j = nlohmann::json::parse(glmc::presetConfigJson("flash"));
  EXPECT_EQ(j["vision_config"]["depth"], 24);
  EXPECT_EQ(j["architectures"][0], "Glm5NextForConditionalGeneration");
  // --layers cuts the text_config lists, linear_attn_config's included.
  ModelConfig cut = parseModelConfig(
      glmc::truncatedConfigJson(glmc::presetConfigJson("flash"), 5), "cut");
  EXPECT_EQ(cut.numLayers, 5);
  auto jc = nlohmann::json::parse(
      glmc::truncatedConfigJson(glmc::presetConfigJson("flash"), 5));
  EXPECT_EQ(jc["text_config"]["linear_attn_config"]["full_attn_layers"],
            nlohmann::json::array({3}));
}

TEST(HfNames, FlashParameterCountsMatchSpec) {
  ModelConfig c = parseModelConfig(glmc::presetConfigJson("flash"), "flash");
  // glm53-architecture.md §6 (GLM-5.3-Flash), counted per component.
  std::map<std::string, double> kda, mla, ix, hc;
  double expert = 0, dense = 0, embed = 0, routed = 0;
  for (const auto &s : expectedHfTensors(c)) {
    double n = 1;
    for (int64_t d : s.shape)
      n *= (double)d;
    const std::string L = std::to_string(s.layer);
    if (s.name.find(".hc_") != std::string::npos)
      hc[L] += n;
    else if (s.name.find(".indexer.") != std::string::npos)
      ix[L] += n;
    else if (s.name.find(".self_attn.") != std::string::npos)
      (c.isKdaLayer(s.layer) ? kda : mla)[L] += n;
    else if (s.expert >= 0) {
      routed += n;
      if (s.layer == 3 && s.expert == 0)
        expert += n;
    } else if (s.layer == 0 && s.name.find(".mlp.") != std::string::npos)
      dense += n;
    else if (s.name.find("embed_tokens") != std::string::npos)
      embed = n;
  }
  EXPECT_EQ(kda.size(), 34u);
  EXPECT_EQ(mla.size(), 11u);
  EXPECT_EQ(ix.size(), 11u);
  EXPECT_EQ(hc.size(), 45u);
  for (auto &[l, n] : kda)
    EXPECT_EQ(n, 137732288.0) << "KDA layer " << l;
  for (auto &[l, n] : mla)
    EXPECT_EQ(n, 117442560.0) << "MLA layer " << l;
  for (auto &[l, n] : ix)
    EXPECT_EQ(n, 7471872.0) << "indexer layer " << l;
  for (auto &[l, n] : hc)
    EXPECT_EQ(n, 786486.0) << "mHC layer " << l;
  EXPECT_EQ(expert, 25165824.0);
  EXPECT_NEAR(routed / 1e9, 304.41, 0.01); // 288 x 42 layers
  EXPECT_EQ(dense, 150994944.0);
  EXPECT_NEAR(embed / 1e9, 0.634, 0.001);
}

TEST(HfNames, FlashTinyListMatchesWhatSynthWrites) {
  std::string dir = tmpDir("flashlist");
  glmc::writeRandomHfModel("flash-tiny", 3, dir, false);
  ModelConfig c = loadModelConfig(dir);
  auto ckpt = SafetensorsCheckpoint::open(dir);
  const std::vector<std::string> names = ckpt.names();
  std::set<std::string> written(names.begin(), names.end());
  size_t vision = 0, mtp = 0;
  for (const auto &n : written) {
    vision += n.rfind("model.visual.", 0) == 0;
    mtp += n.rfind("model.language_model.layers.2.", 0) == 0;
  }
  const auto specs = expectedHfTensors(c);
  EXPECT_GT(vision, 20u);
  EXPECT_GT(mtp, 20u);
  EXPECT_EQ(written.size(), specs.size() + vision + mtp);
  for (const auto &s : specs) {
    const TensorView *t = ckpt.find(s.name);
    ASSERT_TRUE(t) << s.name << " not written";
    EXPECT_EQ(t->shape, s.shape) << s.name;
  }
  // The MTP layer: eh_proj over [enorm(emb); hnorm(h)], no mHC maps.
  const TensorView *eh =
      ckpt.find("model.language_model.layers.2.eh_proj.weight");
  ASSERT_TRUE(eh);
  EXPECT_EQ(eh->shape, (std::vector<int64_t>{128, 256}));
  EXPECT_TRUE(ckpt.find("model.language_model.layers.2.shared_head.norm.weight"));
  EXPECT_FALSE(ckpt.find("model.language_model.layers.2.hc_attn_fn"));
  // KDA's gate parameters in fp32, as the release keeps them; plausible.
  const TensorView &alog =
      ckpt.get("model.language_model.layers.0.self_attn.A_log");
  EXPECT_EQ(alog.dtype, DType::F32);
  EXPECT_EQ(ckpt.get("model.language_model.layers.0.self_attn.dt_bias").dtype,
            DType::F32);
  for (float x : alog.toFloat())
    EXPECT_LT(std::fabs(x), 4.0f);
  EXPECT_EQ(ckpt.get("model.visual.patch_embed.proj.weight").shape,
            (std::vector<int64_t>{32, 3, 2, 14, 14}));
  // The full geometry refuses random weights (640 GB), index-only works.
  EXPECT_THROW(glmc::writeRandomHfModel("flash", 1, tmpDir("flashbig"), false),
               Error);
}
