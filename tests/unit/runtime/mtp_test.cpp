//===- mtp_test.cpp - the MTP head of the reference forward ---------------===//
//
// transformers has no MTP, so the reference's MTP head (CpuForward::mtpStep)
// is checked against an independent float64 evaluation of the formula of
// shared/specs/glm53-architecture.md §2 item 8 and §3 "MTP", written here
// from the spec: eh_proj over [enorm(embed) ; hnorm(h)], a plain pre-norm
// layer with MLA in its expanded (non-absorbed) form, the DSA indexer (per
// token on GLM-5.3, k-pool on Flash) over the MTP cache's own positions,
// the sigmoid router and (clamped) SwiGLU experts, shared_head.norm and the
// LM head. Run on the synthesized tiny and flash-tiny packs, past
// index_topk so the selection is sparse. Also: rank counts and cache
// truncation give the same bits, and every pack layout (hf, exl3 incl.
// MUL1 at a half-integer width, exlr8 at the manifest's widths) stores,
// verifies and loads the MTP layer.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"
#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"
#include "runtime/formats/pack.h"
#include "runtime/model/hf_names.h"

#include "cpu_test_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace glm::rt;
using namespace glm::rt::cpu;

namespace {

std::string scratch(const std::string &name) {
  fs::path p = fs::temp_directory_path() /
               ("glm_mtp_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// One synthesized Hugging Face pack per preset and test binary run.
const std::string &hfPack(const std::string &preset) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(preset);
  if (it != dirs.end())
    return it->second;
  std::string d = scratch(preset + "_hf");
  glmc::writeRandomHfModel(preset, 21, d, false);
  return dirs[preset] = d;
}

using Vec = std::vector<double>;

/// The MTP head in float64, straight from the spec; weights read by name.
class Mtp64 {
public:
  Mtp64(const ModelConfig &c, const WeightSource &src) : c_(c), src_(src) {
    l_ = c.numLayers;
    p_ = c.tensorPrefix() + "layers." + std::to_string(l_) + ".";
  }

  /// Logits of the pair (h_t, token_{t+1}) at the next position; `out`
  /// receives the layer output (before shared_head.norm).
  Vec step(const Vec &h, int64_t token, Vec *out = nullptr) {
    const int64_t d = c_.hiddenSize, H = c_.numHeads, dn = c_.qkNopeHeadDim,
                  dr = c_.qkRopeHeadDim, dv = c_.vHeadDim, kvr = c_.kvLoraRank,
                  t = (int64_t)lat_.size();
    const double eps = c_.rmsNormEps;
    // x = eh_proj [enorm(embed(token)) ; hnorm(h)].
    Vec emb = row(embedName(), token, d);
    Vec cat = rms(emb, w(p_ + "enorm.weight"), eps);
    Vec hn = rms(h, w(p_ + "hnorm.weight"), eps);
    cat.insert(cat.end(), hn.begin(), hn.end());
    Vec x = mv(p_ + "eh_proj.weight", cat);

    // Attention sublayer.
    const std::string a = p_ + "self_attn.";
    Vec u = rms(x, w(p_ + "input_layernorm.weight"), eps);
    Vec qa =
        rms(mv(a + "q_a_proj.weight", u), w(a + "q_a_layernorm.weight"), eps);
    Vec q = mv(a + "q_b_proj.weight", qa);
    Vec kva = mv(a + "kv_a_proj_with_mqa.weight", u);
    Vec cLat(kva.begin(), kva.begin() + kvr);
    lat_.push_back(rms(cLat, w(a + "kv_a_layernorm.weight"), eps));
    Vec kpe(kva.begin() + kvr, kva.end());
    rope(kpe.data(), dr, t);
    kpe_.push_back(kpe);
    std::vector<int64_t> sel = select(a + "indexer.", u, qa, t);
    lastSelected = (int64_t)sel.size();

    const Vec &kvB = w(a + "kv_b_proj.weight");
    Vec ctxAll(H * dv, 0.0);
    for (int64_t hh = 0; hh < H; ++hh) {
      const double *qn = q.data() + hh * (dn + dr);
      Vec qp(qn + dn, qn + dn + dr);
      rope(qp.data(), dr, t);
      Vec score;
      for (int64_t s : sel) {
        double acc = 0;
        for (int64_t i = 0; i < dn; ++i) { // k_nope = W_UK_h c_s
          double k = 0;
          for (int64_t cc = 0; cc < kvr; ++cc)
            k += kvB[(hh * (dn + dv) + i) * kvr + cc] * lat_[s][cc];
          acc += qn[i] * k;
        }
        for (int64_t i = 0; i < dr; ++i)
          acc += qp[i] * kpe_[s][i];
        score.push_back(acc / std::sqrt((double)(dn + dr)));
      }
      Vec p = softmax(score);
      for (size_t j = 0; j < sel.size(); ++j)
        for (int64_t i = 0; i < dv; ++i) { // v = W_UV_h c_s
          double v = 0;
          for (int64_t cc = 0; cc < kvr; ++cc)
            v += kvB[(hh * (dn + dv) + dn + i) * kvr + cc] * lat_[sel[j]][cc];
          ctxAll[hh * dv + i] += p[j] * v;
        }
    }
    Vec attn = mv(a + "o_proj.weight", ctxAll);
    for (int64_t i = 0; i < d; ++i)
      x[i] += attn[i];

    // MoE sublayer.
    const std::string m = p_ + "mlp.";
    Vec u2 = rms(x, w(p_ + "post_attention_layernorm.weight"), eps);
    Vec r = mv(m + "gate.weight", u2);
    const Vec &bias = w(m + "gate.e_score_correction_bias");
    const int64_t E = c_.numRoutedExperts;
    Vec sg(E), biased(E);
    for (int64_t e = 0; e < E; ++e) {
      sg[e] = 1.0 / (1.0 + std::exp(-r[e]));
      biased[e] = sg[e] + bias[e];
    }
    std::vector<int64_t> chosen = topk(biased, c_.numExpertsPerTok);
    double sum = 0;
    for (int64_t e : chosen)
      sum += sg[e];
    Vec y(d, 0.0);
    for (int64_t e : chosen) {
      double wt = (c_.normTopkProb ? sg[e] / (sum + 1e-20) : sg[e]) *
                  c_.routedScalingFactor;
      Vec o = swiglu(m + "experts." + std::to_string(e) + ".", u2);
      for (int64_t i = 0; i < d; ++i)
        y[i] += wt * o[i];
    }
    if (c_.numSharedExperts > 0) {
      Vec o = swiglu(m + "shared_experts.", u2);
      for (int64_t i = 0; i < d; ++i)
        y[i] += o[i];
    }
    for (int64_t i = 0; i < d; ++i)
      x[i] += y[i];
    if (out)
      *out = x;
    return mv(headName(), rms(x, w(p_ + "shared_head.norm.weight"), eps));
  }

  int64_t lastSelected = 0;

private:
  std::string embedName() const {
    return src_.has(p_ + "embed_tokens.weight")
               ? p_ + "embed_tokens.weight"
               : c_.tensorPrefix() + "embed_tokens.weight";
  }
  std::string headName() const {
    return src_.has(p_ + "shared_head.head.weight")
               ? p_ + "shared_head.head.weight"
               : "lm_head.weight";
  }
  const Vec &w(const std::string &name) {
    auto it = cache_.find(name);
    if (it != cache_.end())
      return it->second;
    std::vector<float> f = src_.load(name);
    return cache_[name] = Vec(f.begin(), f.end());
  }
  Vec row(const std::string &name, int64_t r, int64_t n) {
    const Vec &m = w(name);
    return Vec(m.begin() + r * n, m.begin() + (r + 1) * n);
  }
  Vec mv(const std::string &name, const Vec &x) {
    const Vec &m = w(name);
    const int64_t rows = (int64_t)(m.size() / x.size());
    Vec y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (size_t i = 0; i < x.size(); ++i)
        y[r] += m[r * x.size() + i] * x[i];
    return y;
  }
  static Vec rms(const Vec &x, const Vec &g, double eps) {
    double ss = 0;
    for (double v : x)
      ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / (double)x.size() + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = g[i] * x[i] * inv;
    return y;
  }
  static Vec softmax(const Vec &x) {
    double most = *std::max_element(x.begin(), x.end()), sum = 0;
    Vec p(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      sum += p[i] = std::exp(x[i] - most);
    for (double &v : p)
      v /= sum;
    return p;
  }
  static std::vector<int64_t> topk(const Vec &v, int64_t k) {
    std::vector<int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    idx.resize(std::min<size_t>(k, idx.size()));
    std::sort(idx.begin(), idx.end());
    return idx;
  }
  /// Interleaved RoPE: pair i rotated by pos·θ^(−2i/dim).
  void rope(double *x, int64_t dim, int64_t pos) const {
    for (int64_t i = 0; i < dim / 2; ++i) {
      double ang = (double)pos * std::pow(c_.ropeTheta, -2.0 * i / dim);
      double p = x[2 * i], q = x[2 * i + 1];
      x[2 * i] = p * std::cos(ang) - q * std::sin(ang);
      x[2 * i + 1] = q * std::cos(ang) + p * std::sin(ang);
    }
  }
  Vec swiglu(const std::string &pre, const Vec &x) {
    Vec g = mv(pre + "gate_proj.weight", x), u = mv(pre + "up_proj.weight", x);
    const double lim = c_.swigluLimit;
    for (size_t j = 0; j < g.size(); ++j) {
      if (lim > 0) {
        g[j] = std::min(g[j], lim);
        u[j] = std::max(-lim, std::min(u[j], lim));
      }
      g[j] = g[j] / (1.0 + std::exp(-g[j])) * u[j];
    }
    return mv(pre + "down_proj.weight", g);
  }
  /// The DSA selection of query t over the MTP cache, ascending.
  std::vector<int64_t> select(const std::string &ix, const Vec &u,
                              const Vec &qa, int64_t t) {
    const int64_t nh = c_.indexNHeads, hd = c_.indexHeadDim,
                  dr = c_.qkRopeHeadDim, P = c_.indexKpool, T = t + 1;
    Vec qi = mv(ix + "wq_b.weight", qa);
    for (int64_t hh = 0; hh < nh; ++hh)
      rope(qi.data() + hh * hd, dr, t);
    // k = LayerNorm(wk u) (eps 1e-6, with bias), RoPE on its first dr dims.
    Vec k = mv(ix + "wk.weight", u);
    double mean = std::accumulate(k.begin(), k.end(), 0.0) / hd, var = 0;
    for (double v : k)
      var += (v - mean) * (v - mean);
    var /= hd;
    const Vec &kw = w(ix + "k_norm.weight"), &kb = w(ix + "k_norm.bias");
    for (int64_t i = 0; i < hd; ++i)
      k[i] = (k[i] - mean) / std::sqrt(var + 1e-6) * kw[i] + kb[i];
    rope(k.data(), dr, t);
    keys_.push_back(k);
    if (P > 1)
      gates_.push_back(mv(ix + "index_kpool_compress_gate", u));
    // Candidates: tokens, or complete pools (softmax over a pool's members
    // of gate + ape, per channel, weighting their keys).
    std::vector<Vec> cand;
    if (P == 1) {
      cand = keys_;
    } else {
      const Vec &ape = w(ix + "index_kpool_compress_ape");
      for (int64_t p = 0; (p + 1) * P <= T; ++p) {
        Vec kp(hd);
        for (int64_t cc = 0; cc < hd; ++cc) {
          Vec logit(P);
          for (int64_t j = 0; j < P; ++j)
            logit[j] = gates_[p * P + j][cc] + ape[j * hd + cc];
          Vec sm = softmax(logit);
          for (int64_t j = 0; j < P; ++j)
            kp[cc] += sm[j] * keys_[p * P + j][cc];
        }
        cand.push_back(kp);
      }
    }
    const int64_t want = c_.indexTopk / P;
    std::vector<int64_t> chosen(cand.size());
    std::iota(chosen.begin(), chosen.end(), 0);
    if ((int64_t)cand.size() > want) {
      Vec wts = mv(ix + "weights_proj.weight", u), score(cand.size(), 0.0);
      for (size_t s = 0; s < cand.size(); ++s)
        for (int64_t hh = 0; hh < nh; ++hh) {
          double dotp = 0;
          for (int64_t i = 0; i < hd; ++i)
            dotp += qi[hh * hd + i] * cand[s][i];
          score[s] += wts[hh] / std::sqrt((double)nh) *
                      std::max(0.0, dotp / std::sqrt((double)hd));
        }
      chosen = topk(score, want);
    }
    std::vector<int64_t> sel;
    for (int64_t p : chosen)
      for (int64_t j = 0; j < P; ++j)
        sel.push_back(p * P + j);
    for (int64_t s = (T / P) * P; s < T; ++s) // the incomplete tail
      sel.push_back(s);
    return sel;
  }

  const ModelConfig &c_;
  const WeightSource &src_;
  int64_t l_ = 0;
  std::string p_;
  std::map<std::string, Vec> cache_;
  std::vector<Vec> lat_, kpe_, keys_, gates_;
};

double relDiff(const std::vector<float> &got, const Vec &want) {
  double most = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    most = std::max(most, std::fabs(want[i]));
    diff = std::max(diff, std::fabs(got[i] - want[i]));
  }
  return diff / most;
}

std::vector<int64_t> randomTokens(const ModelConfig &c, int64_t n,
                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t(n);
  for (auto &x : t)
    x = (int64_t)(rng() % (uint64_t)c.vocabSize);
  return t;
}

struct Loaded {
  std::unique_ptr<Pack> pack;
  std::unique_ptr<WeightSource> src;
  std::shared_ptr<const ModelWeights> weights;
};

Loaded load(const std::string &dir, const PackOpenOptions &opt = {}) {
  Loaded l;
  l.pack = Pack::open(dir, opt);
  l.src = packWeightSource(*l.pack);
  l.weights = ModelWeights::load(*l.pack->config(), *l.src);
  return l;
}

class MtpHead : public ::testing::TestWithParam<const char *> {};

// Every prompt pair (h_t, token_{t+1}) through the head, then one chained
// draft step from the head's own output: the float64 formula agrees to
// 1e-6 of the largest logit, with the selection sparse at the end.
TEST_P(MtpHead, EqualsTheFloat64Formula) {
  Loaded L = load(hfPack(GetParam()));
  const ModelConfig &c = L.weights->config;
  ASSERT_EQ(L.weights->mtp.size(), 1u);
  CpuForward fwd(L.weights, TpLayout::fromRule(c, 1));
  ASSERT_TRUE(fwd.hasMtp());
  const int64_t P = 18, d = c.hiddenSize;
  std::vector<int64_t> tokens = randomTokens(c, P, 3);
  Session s = fwd.newSession();
  std::vector<float> hidden;
  fwd.prefill(s, tokens, &hidden);
  ASSERT_EQ((int64_t)hidden.size(), P * d);

  Mtp64 ref(c, *L.src);
  double worst = 0;
  StepTrace trace;
  std::vector<float> out;
  for (int64_t t = 0; t + 1 < P; ++t) {
    std::vector<float> got =
        fwd.mtpStep(s, hidden.data() + t * d, tokens[t + 1], &out, &trace);
    Vec want =
        ref.step(Vec(hidden.begin() + t * d, hidden.begin() + (t + 1) * d),
                 tokens[t + 1]);
    ASSERT_EQ(got.size(), want.size());
    worst = std::max(worst, relDiff(got, want));
    EXPECT_EQ((int64_t)trace.selected[c.numLayers].size(), ref.lastSelected)
        << "position " << t;
  }
  EXPECT_EQ(s.mtpLength, P - 1);
  // Sparse at the last position: fewer keys than positions.
  EXPECT_LT(ref.lastSelected, P - 1);
  EXPECT_EQ(trace.experts[c.numLayers].size(), (size_t)c.numExpertsPerTok);
  // A chained draft step: the head's output with its drafted token.
  Vec out64;
  ref.step(Vec(hidden.end() - d, hidden.end()), tokens[P - 1], &out64);
  std::vector<float> last =
      fwd.mtpStep(s, hidden.data() + (P - 1) * d, tokens[P - 1], &out);
  int64_t draft = argmax(last.data(), (int64_t)last.size());
  std::vector<float> got = fwd.mtpStep(s, out.data(), draft);
  Vec want = ref.step(Vec(out.begin(), out.end()), draft);
  worst = std::max(worst, relDiff(got, want));
  EXPECT_LE(worst, 1e-6) << GetParam();
  std::printf("[ %s ] MTP head vs float64: max |diff| / max |logit| = %.2e\n",
              GetParam(), worst);
}

// Rank counts give the same bits (the head's units reduce in a fixed order);
// truncating the MTP cache and feeding the same pairs again repeats them.
TEST_P(MtpHead, RanksAndTruncationRepeatTheBits) {
  Loaded L = load(hfPack(GetParam()));
  const ModelConfig &c = L.weights->config;
  const int64_t P = 14, d = c.hiddenSize;
  std::vector<int64_t> tokens = randomTokens(c, P, 5);
  std::vector<std::vector<float>> first;
  for (int ranks : {1, 3}) {
    CpuForward fwd(L.weights, TpLayout::fromRule(c, ranks));
    Session s = fwd.newSession();
    std::vector<float> hidden;
    fwd.prefill(s, tokens, &hidden);
    for (int64_t t = 0; t + 1 < P; ++t) {
      auto got = fwd.mtpStep(s, hidden.data() + t * d, tokens[t + 1]);
      if (ranks == 1)
        first.push_back(got);
      else
        EXPECT_EQ(got, first[t]) << "ranks " << ranks << " position " << t;
    }
    fwd.truncateMtp(s, 5);
    EXPECT_EQ(s.mtpLength, 5);
    for (int64_t t = 5; t + 1 < P; ++t)
      EXPECT_EQ(fwd.mtpStep(s, hidden.data() + t * d, tokens[t + 1]), first[t])
          << "after truncation, position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, MtpHead,
                         ::testing::Values("tiny", "flash-tiny"),
                         [](const auto &info) {
                           return std::string(info.param) == "tiny"
                                      ? "Tiny"
                                      : "FlashTiny";
                         });

// The main model's logits do not depend on whether the MTP layer is loaded,
// and weights without one have no head.
TEST(MtpHeadLoad, AbsentHeadIsRefusedAndLeavesTheModelAlone) {
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 9);
  auto w = ModelWeights::load(c, src);
  EXPECT_TRUE(w->mtp.empty());
  CpuForward fwd(w, TpLayout::fromRule(c, 1));
  EXPECT_FALSE(fwd.hasMtp());
  Session s = fwd.newSession();
  std::vector<float> h(c.hiddenSize, 0.5f);
  EXPECT_THROW(fwd.mtpStep(s, h.data(), 1), Error);
  // config says one MTP layer but the weights have none: still no head.
  c.numNextnPredictLayers = 1;
  EXPECT_TRUE(ModelWeights::load(c, src)->mtp.empty());
}

// The full-size MTP layers hold the parameters glm53-architecture.md §6
// counts (GLM-5.3 9.95 B, Flash 7.43 B), at layer num_hidden_layers, with
// no mHC maps; the parser reads each name back to its layer and expert.
TEST(MtpNames, FullSizeListsMatchTheSpecsCounts) {
  for (auto [preset, billions] :
       {std::pair<const char *, double>{"glm53", 9.95}, {"flash", 7.43}}) {
    ModelConfig c = parseModelConfig(glmc::presetConfigJson(preset), preset);
    double n = 0;
    for (const HfTensorSpec &s : expectedMtpTensors(c)) {
      double k = 1;
      for (int64_t x : s.shape)
        k *= (double)x;
      n += k;
      EXPECT_EQ(s.layer, c.numLayers) << s.name;
      EXPECT_EQ(s.name.find(".hc_"), std::string::npos) << s.name;
      HfTensorSpec parsed = parseHfTensorName(s.name);
      EXPECT_EQ(parsed.layer, s.layer) << s.name;
      EXPECT_EQ(parsed.expert, s.expert) << s.name;
      EXPECT_EQ(parsed.shared, s.shared) << s.name;
    }
    EXPECT_NEAR(n / 1e9, billions, 0.005) << preset;
  }
  ModelConfig none = parseModelConfig(glmc::presetConfigJson("glm53"), "x");
  none.numNextnPredictLayers = 0;
  EXPECT_TRUE(expectedMtpTensors(none).empty());
}

bool hasNote(const VerifyReport &r, const std::string &needle) {
  for (const auto &n : r.notes)
    if (n.find(needle) != std::string::npos)
      return true;
  return false;
}

/// Root-mean-square of a − b over that of b.
double relRms(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return std::sqrt(num / den);
}

class MtpPack : public ::testing::TestWithParam<const char *> {};

// hf, exl3 (GLM-5.3: MCG, mixed widths; Flash: a MUL1 mosaic that puts the
// MTP layer at 2.5 bits) and exlr8 (K2 and K3, the manifest choosing per
// half): the MTP layer is stored, verify passes and names it, every MTP
// tensor dequantizes near its source (plain ones exactly), the reference
// loads the head and runs it.
TEST_P(MtpPack, EveryLayoutStoresVerifiesAndLoadsIt) {
  const std::string preset = GetParam();
  const std::string hf = hfPack(preset);
  auto source = Pack::open(hf);
  const ModelConfig cfg = *source->config();
  const std::vector<HfTensorSpec> specs = expectedMtpTensors(cfg);
  ASSERT_FALSE(specs.empty());
  for (const HfTensorSpec &s : specs)
    ASSERT_NE(source->find(s.name), nullptr) << s.name;

  const std::string root = scratch(preset + "_layouts");
  glmc::QuantizeOptions e3;
  e3.seed = 1234;
  if (preset == "flash-tiny") {
    e3.codebook = "mul1";
    e3.layerBits = {2, 3, 2.5}; // layer 2 (the MTP layer) at 2.5 bits
  }
  glmc::quantizeToExl3(cfg, source.get(), root + "/exl3", e3);
  glmc::QuantizeOptions x8;
  x8.seed = 1234;
  x8.widths = {2, 3};
  glmc::quantizeToExlr8(cfg, source.get(), root + "/exlr8", x8);
  // The exlr8 manifests give the MTP layer's halves their widths.
  std::ifstream mf(root + "/exlr8/manifests/exlr8-manifest-mixed.json");
  nlohmann::json manifest = nlohmann::json::parse(mf);
  EXPECT_TRUE(manifest["layers"].contains(std::to_string(cfg.numLayers)));

  const int64_t mtpLayer = cfg.numLayers;
  const std::string ehProj = cfg.tensorPrefix() + "layers." +
                             std::to_string(mtpLayer) + ".eh_proj.weight";
  for (std::string layout : {"hf", "exl3", "exlr8"}) {
    SCOPED_TRACE(preset + " " + layout);
    const std::string dir = layout == "hf" ? hf : root + "/" + layout;
    PackOpenOptions opt;
    if (layout == "exlr8")
      opt.manifest = "mixed";
    auto pack = Pack::open(dir, opt);
    VerifyReport r = pack->verify();
    for (const auto &i : r.issues)
      ADD_FAILURE() << i.file << ": " << i.object << ": " << i.message;
    EXPECT_TRUE(
        hasNote(r, "MTP tensors (layer " + std::to_string(mtpLayer) + ")"));
    double worst = 0;
    for (const HfTensorSpec &s : specs) {
      const WeightInfo *w = pack->find(s.name);
      ASSERT_NE(w, nullptr) << s.name;
      EXPECT_EQ(w->shape, s.shape) << s.name;
      std::vector<float> got = pack->dequantize(s.name),
                         want = source->dequantize(s.name);
      ASSERT_EQ(got.size(), want.size()) << s.name;
      if (s.shape.size() == 1)
        EXPECT_EQ(got, want) << s.name; // norms and biases stay plain
      else
        worst = std::max(worst, relRms(got, want));
    }
    EXPECT_LT(worst, 0.35) << "worst quantized MTP tensor";
    if (layout == "exl3")
      EXPECT_GT(pack->get(ehProj).bitsPerWeight(), 1.0); // quantized
    if (layout == "exl3" && preset == "flash-tiny") {
      const WeightInfo &q =
          pack->get(cfg.tensorPrefix() + "layers." + std::to_string(mtpLayer) +
                    ".self_attn.o_proj.weight");
      EXPECT_NEAR(q.bitsPerWeight(), 2.5, 0.2);
    }

    auto src = packWeightSource(*pack);
    auto weights = ModelWeights::load(cfg, *src);
    ASSERT_EQ(weights->mtp.size(), 1u);
    CpuForward fwd(weights, TpLayout::fromRule(cfg, 2));
    Session s = fwd.newSession();
    std::vector<float> hidden;
    std::vector<int64_t> tokens = randomTokens(cfg, 4, 8);
    fwd.prefill(s, tokens, &hidden);
    std::vector<float> logits = fwd.mtpStep(s, hidden.data(), tokens[1]);
    ASSERT_EQ((int64_t)logits.size(), cfg.vocabSize);
    for (float v : logits)
      ASSERT_TRUE(std::isfinite(v));
  }

  // exlr8: the MTP layer's experts follow the width asked for.
  const std::string expert = cfg.tensorPrefix() + "layers." +
                             std::to_string(mtpLayer) +
                             ".mlp.experts.1.up_proj.weight";
  PackOpenOptions k2, k3;
  k2.width = 2;
  k3.width = 3;
  auto p2 = Pack::open(root + "/exlr8", k2),
       p3 = Pack::open(root + "/exlr8", k3);
  EXPECT_NEAR(p2->get(expert).bitsPerWeight(), 2.0, 0.3);
  EXPECT_NEAR(p3->get(expert).bitsPerWeight(), 3.0, 0.3);
  EXPECT_NE(p2->dequantize(expert), p3->dequantize(expert));
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Presets, MtpPack,
                         ::testing::Values("tiny", "flash-tiny"),
                         [](const auto &info) {
                           return std::string(info.param) == "tiny"
                                      ? "Tiny"
                                      : "FlashTiny";
                         });

} // namespace
