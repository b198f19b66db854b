//===- flash_reference_test.cpp - GLM-5.3-Flash pieces of the reference ---===//
//
// The glm5_next config keys and their refusals, the tensor list against a
// checkpoint transformers saved (tests/oracle/goldens/glm_flash_*), and the
// building blocks of runtime/cpu/flash_ops.h: the chunked KDA form equals
// the token-by-token delta rule (the prompt and decode paths agree), the
// causal conv equals a zero-padded convolution, mHC's Sinkhorn map is
// doubly stochastic, the k-pool key is a per-channel convex mix; the whole
// forward's prompt path (chunked) equals its token-by-token path.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/flash_ops.h"
#include "runtime/cpu/forward.h"
#include "runtime/formats/pack.h"
#include "runtime/formats/safetensors.h"
#include "runtime/model/config.h"
#include "runtime/model/hf_names.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

using namespace glm::rt;
using namespace glm::rt::cpu;

namespace {

const std::string kGoldens = GLM_TEST_DATA_DIR "/../oracle/goldens";

std::string readText(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

/// glm_flash_a's config.json with `edit` applied to text_config.
std::string flashConfig(const std::function<void(nlohmann::json &)> &edit) {
  auto j = nlohmann::json::parse(
      readText(kGoldens + "/glm_flash_a/config.json"));
  edit(j["text_config"]);
  return j.dump();
}

std::vector<double> randomVec(std::mt19937 &rng, size_t n, double lo,
                              double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = u(rng);
  return v;
}

} // namespace

TEST(FlashConfig, GoldenConfigParses) {
  ModelConfig c = parseModelConfig(flashConfig([](nlohmann::json &) {}),
                                   "glm_flash_a");
  EXPECT_TRUE(c.isFlash());
  EXPECT_EQ(c.tensorPrefix(), "model.language_model.");
  ASSERT_EQ(c.layerTypes.size(), 4u);
  EXPECT_TRUE(c.isKdaLayer(0) && c.isKdaLayer(2) && !c.isKdaLayer(3));
  EXPECT_EQ(c.headsOf(0), 4);
  EXPECT_EQ(c.linearHeadDim, 16);
  EXPECT_EQ(c.linearConvKernel, 4);
  EXPECT_TRUE(c.hasLinearLowerBound);
  EXPECT_EQ(c.linearLowerBound, -5.0);
  EXPECT_EQ(c.hcMult, 4);
  EXPECT_EQ(c.hcSinkhornIters, 20);
  EXPECT_EQ(c.indexKpool, 4);
  EXPECT_EQ(c.swigluLimit, 1.5);
  EXPECT_EQ(c.qkRopeHeadDim, 0);
}

TEST(FlashConfig, LinearAttnConfigWinsAndLayerTypesDefault) {
  ModelConfig c = parseModelConfig(flashConfig([](nlohmann::json &t) {
                                     t.erase("layer_types");
                                     t["linear_num_heads"] = 9;
                                     t["linear_attn_config"]["num_heads"] = 2;
                                     t["linear_attn_config"]["head_dim"] = 32;
                                   }),
                                   "edited");
  EXPECT_EQ(c.linearNumHeads, 2); // as transformers reads it
  EXPECT_EQ(c.linearHeadDim, 32);
  // transformers' schedule: every fourth layer (3, 7, ..) is MLA.
  EXPECT_TRUE(c.isKdaLayer(0) && !c.isKdaLayer(3));
  ModelConfig soft = parseModelConfig(flashConfig([](nlohmann::json &t) {
                                        t["linear_lower_bound"] = nullptr;
                                        t["linear_attn_config"].erase(
                                            "gate_lower_bound");
                                      }),
                                      "no bound");
  EXPECT_FALSE(soft.hasLinearLowerBound);
}

TEST(FlashConfig, WrongValuesAreRefusedByKey) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    const char *needle;
  } cases[] = {
      {[](nlohmann::json &t) { t["qk_rope_head_dim"] = 8; },
       "qk_rope_head_dim"},
      {[](nlohmann::json &t) { t["index_topk"] = 10; }, "index_topk"},
      {[](nlohmann::json &t) { t.erase("index_kpool"); }, "index_kpool"},
      {[](nlohmann::json &t) { t["index_kpool_always_select_tail"] = false; },
       "index_kpool_always_select_tail"},
      {[](nlohmann::json &t) { t["indexer_types"][3] = "shared"; },
       "indexer_types[3]"},
      {[](nlohmann::json &t) { t["layer_types"][1] = "mamba"; },
       "layer_types"},
      {[](nlohmann::json &t) { t["hc_mult"] = 0; }, "hc_mult"},
      {[](nlohmann::json &t) { t["swiglu_limit"] = -1; }, "swiglu_limit"},
      {[](nlohmann::json &t) { t["linear_attn_config"] = 3; },
       "linear_attn_config"},
  };
  for (auto &c : cases) {
    std::string e = errorOf([&] {
      parseModelConfig(flashConfig(c.edit), "cfg.json");
    });
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.needle << ": " << e;
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
  }
}

// Every tensor transformers saved for the text model is listed, with its
// shape, and nothing else; the vision tower is the only remainder.
TEST(FlashNames, ListEqualsWhatTransformersSaved) {
  for (const char *name : {"glm_flash_a", "glm_flash_b"}) {
    const std::string dir = kGoldens + "/" + name;
    ModelConfig c = loadModelConfig(dir);
    auto ckpt = SafetensorsFile::open(dir + "/model.safetensors");
    std::map<std::string, std::vector<int64_t>> saved;
    for (const TensorView &t : ckpt->tensors())
      if (t.name.rfind("model.visual.", 0) != 0)
        saved[t.name] = t.shape;
    std::map<std::string, std::vector<int64_t>> listed;
    for (const HfTensorSpec &s : expectedHfTensors(c)) {
      EXPECT_TRUE(listed.emplace(s.name, s.shape).second) << s.name;
      HfTensorSpec parsed = parseHfTensorName(s.name);
      EXPECT_EQ(parsed.layer, s.layer) << s.name;
      EXPECT_EQ(parsed.expert, s.expert) << s.name;
    }
    EXPECT_EQ(listed, saved) << name;
  }
}

TEST(FlashOps, ChunkedKdaEqualsTheRecurrentSteps) {
  std::mt19937 rng(7);
  const int64_t T = 37, dk = 16, dv = 12;
  for (int64_t C : {1, 4, 16, 64}) {
    std::vector<double> q = randomVec(rng, T * dk, -1, 1),
                        k = randomVec(rng, T * dk, -1, 1),
                        v = randomVec(rng, T * dv, -2, 2),
                        g = randomVec(rng, T * dk, -5, 0),
                        beta = randomVec(rng, T, 0, 1);
    for (int64_t t = 0; t < T; ++t) {
      kdaL2Norm(&q[t * dk], dk);
      kdaL2Norm(&k[t * dk], dk);
    }
    // A state carried in from an earlier chunk of the prompt.
    std::vector<double> S0 = randomVec(rng, dk * dv, -0.5, 0.5);
    std::vector<double> Sr = S0, Sc = S0, outR(T * dv), outC;
    for (int64_t t = 0; t < T; ++t)
      kdaRecurrentStep(Sr, &q[t * dk], &k[t * dk], &v[t * dv], &g[t * dk],
                       beta[t], dk, dv, &outR[t * dv]);
    kdaChunked(Sc, q, k, v, g, beta, T, dk, dv, C, outC);
    double worst = 0;
    for (size_t i = 0; i < outR.size(); ++i)
      worst = std::max(worst, std::fabs(outR[i] - outC[i]));
    for (size_t i = 0; i < Sr.size(); ++i)
      worst = std::max(worst, std::fabs(Sr[i] - Sc[i]));
    EXPECT_LT(worst, 1e-12) << "chunk " << C;
  }
}

TEST(FlashOps, CausalConvIsAZeroPaddedConvolution) {
  std::mt19937 rng(3);
  for (int64_t K : {1, 3, 4}) {
    std::vector<float> taps(K), state(std::max<int64_t>(K - 1, 0), 0.0f);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float &t : taps)
      t = u(rng);
    std::vector<float> x(10);
    for (float &v : x)
      v = u(rng);
    for (int64_t t = 0; t < 10; ++t) {
      double want = 0;
      for (int64_t j = 0; j < K; ++j) {
        int64_t src = t - (K - 1) + j;
        if (src >= 0)
          want += (double)taps[j] * x[src];
      }
      want = want / (1.0 + std::exp(-want)); // SiLU
      EXPECT_NEAR(causalConvStep(taps.data(), state.data(), K, x[t]), want,
                  1e-12)
          << "K " << K << " t " << t;
    }
  }
}

TEST(FlashOps, HyperConnCombIsDoublyStochasticAndMixesStreams) {
  std::mt19937 rng(11);
  const int64_t S = 4, d = 8, mix = (2 + S) * S;
  HyperConnWeights w;
  w.fn.rows = mix;
  w.fn.cols = S * d;
  std::normal_distribution<float> n01(0, 1);
  for (int64_t i = 0; i < mix * S * d; ++i)
    w.fn.data.push_back(n01(rng));
  for (int64_t i = 0; i < mix; ++i)
    w.base.push_back(n01(rng));
  w.scale = {1.1f, 0.9f, 1.3f};
  std::vector<float> X(S * d);
  for (float &x : X)
    x = n01(rng);
  HyperMix m = hyperConnMix(w, X, S, 1e-5, 1e-6, 20);
  for (int64_t i = 0; i < S; ++i) {
    double row = 0, col = 0;
    for (int64_t j = 0; j < S; ++j) {
      row += m.comb[i * S + j];
      col += m.comb[j * S + i];
    }
    EXPECT_NEAR(row, 1.0, 1e-3);
    EXPECT_NEAR(col, 1.0, 1e-5); // columns are normalised last
    EXPECT_GT(m.pre[i], 0.0);
    EXPECT_LT(m.pre[i], 1.0 + 1e-5);
    EXPECT_GT(m.post[i], 0.0);
    EXPECT_LT(m.post[i], 2.0);
  }
  // Collapse and expand follow the pre / post / comb definitions.
  std::vector<float> u = hyperConnCollapse(m, X, S);
  std::vector<float> y(d, 0.5f), X2 = X;
  hyperConnExpand(m, y, X2, S);
  for (int64_t c = 0; c < d; ++c) {
    double want = 0;
    for (int64_t j = 0; j < S; ++j)
      want += m.pre[j] * X[j * d + c];
    EXPECT_NEAR(u[c], want, 1e-6);
    double x1 = m.post[1] * 0.5;
    for (int64_t j = 0; j < S; ++j)
      x1 += m.comb[j * S + 1] * X[j * d + c];
    EXPECT_NEAR(X2[1 * d + c], x1, 1e-6);
  }
}

TEST(FlashOps, KpoolKeyIsAPerChannelConvexMix) {
  const int64_t P = 4, hd = 3;
  std::vector<float> keys = {1, 2, 3, 5, 6, 7, -1, 0, 1, 9, 9, 9};
  std::vector<float> gates(P * hd, 0.0f), ape(P * hd, 0.0f);
  std::vector<float> mean = kpoolKey(keys.data(), gates.data(), ape.data(),
                                     P, hd);
  EXPECT_FLOAT_EQ(mean[0], (1 + 5 - 1 + 9) / 4.0f);
  ape[2 * hd + 1] = 100.0f; // channel 1 taken from member 2 alone
  std::vector<float> picked = kpoolKey(keys.data(), gates.data(), ape.data(),
                                       P, hd);
  EXPECT_NEAR(picked[1], 0.0f, 1e-6);
  EXPECT_FLOAT_EQ(picked[0], mean[0]);
}

// The prompt path (layer by layer, KDA in the chunked form) and the decode
// path (token by token, recurrent KDA) give the same logits, also when a
// prompt continues in a second chunk after some decoded tokens.
TEST(FlashForward, ChunkedPromptEqualsTokenByToken) {
  const std::string dir = kGoldens + "/glm_flash_b";
  auto pack = Pack::open(dir);
  const ModelConfig &cfg = *pack->config();
  auto weights = ModelWeights::load(cfg, *packWeightSource(*pack));
  for (int ranks : {1, 3}) {
    CpuForward fwd(weights, TpLayout::fromRule(cfg, ranks));
    std::vector<int64_t> a = {5, 9, 200, 31, 7, 7, 120, 64, 3, 18, 77},
                         b = {41, 42, 43, 150, 2, 99, 12};
    Session tok = fwd.newSession(), chunk = fwd.newSession();
    std::vector<float> want, got = fwd.prefill(chunk, a);
    for (int64_t t : a) {
      std::vector<float> row = fwd.step(tok, t);
      want.insert(want.end(), row.begin(), row.end());
    }
    std::vector<float> row = fwd.step(tok, 8), more = fwd.step(chunk, 8);
    want.insert(want.end(), row.begin(), row.end());
    got.insert(got.end(), more.begin(), more.end());
    std::vector<float> rest = fwd.prefill(chunk, b);
    got.insert(got.end(), rest.begin(), rest.end());
    for (int64_t t : b) {
      row = fwd.step(tok, t);
      want.insert(want.end(), row.begin(), row.end());
    }
    ASSERT_EQ(got.size(), want.size());
    const int64_t V = cfg.vocabSize;
    for (size_t r = 0; r < want.size() / V; ++r) {
      double most = 0, diff = 0;
      for (int64_t v = 0; v < V; ++v) {
        most = std::max(most, (double)std::fabs(want[r * V + v]));
        diff = std::max(diff, (double)std::fabs(want[r * V + v] -
                                                got[r * V + v]));
      }
      EXPECT_LE(diff / most, 1e-6) << "row " << r << ", " << ranks << " ranks";
    }
    EXPECT_EQ(chunk.length, tok.length);
  }
}
