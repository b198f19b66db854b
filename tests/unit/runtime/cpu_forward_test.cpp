//===- cpu_forward_test.cpp - cpu executor vs an independent reference ----===//
//
// The reference below computes the whole sequence at once the way
// transformers' GlmMoeDsaForCausalLM does: expanded K/V per head (no
// absorption, no latent cache), RoPE as de-interleave + rotate_half, the
// DSA selection as a mask over a dense score matrix, experts as whole
// SwiGLUs — all in double. The executor (incremental, absorbed, fp32 storage)
// must match it within 1e-5 relative at every position.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"
#include "runtime/cpu/generator.h"

#include "cpu_test_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

using namespace glm::rt;
using namespace glm::rt::cpu;

namespace {

using Vec = std::vector<double>;

struct Ref {
  const MapWeightSource &src;
  const ModelConfig &c;
  std::map<std::string, std::vector<float>> cache;

  const std::vector<float> &w(const std::string &n) {
    auto it = cache.find(n);
    if (it == cache.end())
      it = cache.emplace(n, src.load(n)).first;
    return it->second;
  }
  // y = W x for W [out, in].
  Vec lin(const std::string &n, const Vec &x) {
    const auto &m = w(n);
    int64_t in = (int64_t)x.size(), out = (int64_t)m.size() / in;
    Vec y(out, 0.0);
    for (int64_t r = 0; r < out; ++r)
      for (int64_t i = 0; i < in; ++i)
        y[r] += m[r * in + i] * x[i];
    return y;
  }
  Vec rms(const std::string &n, const Vec &x) {
    double ss = 0;
    for (double v : x)
      ss += v * v;
    double inv = 1 / std::sqrt(ss / x.size() + c.rmsNormEps);
    const auto &g = w(n);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = g[i] * x[i] * inv;
    return y;
  }
  // transformers' apply_rotary_pos_emb_interleave on x[off, off+dr):
  // de-interleave (evens, then odds), then x·cos + rotate_half(x)·sin with
  // cos = cat(freqs, freqs). Returns the permuted rotated block.
  Vec ropeHf(const Vec &x, size_t off, int64_t pos) {
    int64_t dr = c.qkRopeHeadDim, half = dr / 2;
    Vec y(dr), out(dr);
    for (int64_t i = 0; i < half; ++i) {
      y[i] = x[off + 2 * i];
      y[half + i] = x[off + 2 * i + 1];
    }
    for (int64_t j = 0; j < dr; ++j) {
      double f = pos * std::pow(c.ropeTheta, -2.0 * (j % half) / dr);
      double rot = j < half ? -y[j + half] : y[j - half];
      out[j] = y[j] * std::cos(f) + rot * std::sin(f);
    }
    return out;
  }
  Vec mlp(const std::string &p, const Vec &x) {
    Vec g = lin(p + "gate_proj.weight", x), u = lin(p + "up_proj.weight", x);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    return lin(p + "down_proj.weight", g);
  }
  static std::vector<int64_t> topk(const Vec &s, int64_t k) {
    std::vector<int64_t> idx(s.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    idx.resize(std::min<int64_t>(k, s.size()));
    return idx;
  }

  std::vector<Vec> logits(const std::vector<int64_t> &toks) {
    const int64_t S = toks.size(), d = c.hiddenSize, H = c.numHeads;
    const int64_t dn = c.qkNopeHeadDim, dr = c.qkRopeHeadDim,
                  dv = c.vHeadDim, kvr = c.kvLoraRank;
    std::vector<Vec> x(S);
    const auto &emb = w("model.embed_tokens.weight");
    for (int64_t t = 0; t < S; ++t)
      x[t] = Vec(emb.begin() + toks[t] * d, emb.begin() + (toks[t] + 1) * d);
    std::vector<std::vector<int64_t>> sel; // per query
    for (int64_t l = 0; l < c.numLayers; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".",
                  a = p + "self_attn.";
      std::vector<Vec> h(S), qr(S), Q(S), K(S), V(S);
      for (int64_t t = 0; t < S; ++t) {
        h[t] = rms(p + "input_layernorm.weight", x[t]);
        qr[t] = rms(a + "q_a_layernorm.weight", lin(a + "q_a_proj.weight", h[t]));
        Vec q = lin(a + "q_b_proj.weight", qr[t]);
        Vec kv = lin(a + "kv_a_proj_with_mqa.weight", h[t]);
        Vec cc(kv.begin(), kv.begin() + kvr);
        cc = rms(a + "kv_a_layernorm.weight", cc);
        Vec kpe = ropeHf(kv, kvr, t);
        Vec kvb = lin(a + "kv_b_proj.weight", cc);
        Q[t].clear();
        K[t].clear();
        V[t].clear();
        for (int64_t hh = 0; hh < H; ++hh) {
          // Per head: [nope | rope] for q and k, v.
          Vec qpe = ropeHf(q, hh * (dn + dr) + dn, t);
          Q[t].insert(Q[t].end(), q.begin() + hh * (dn + dr),
                      q.begin() + hh * (dn + dr) + dn);
          Q[t].insert(Q[t].end(), qpe.begin(), qpe.end());
          K[t].insert(K[t].end(), kvb.begin() + hh * (dn + dv),
                      kvb.begin() + hh * (dn + dv) + dn);
          K[t].insert(K[t].end(), kpe.begin(), kpe.end());
          V[t].insert(V[t].end(), kvb.begin() + hh * (dn + dv) + dn,
                      kvb.begin() + (hh + 1) * (dn + dv));
        }
      }
      if (c.isFullIndexerLayer(l)) {
        std::string ix = a + "indexer.";
        const int64_t nh = c.indexNHeads, hd = c.indexHeadDim;
        std::vector<Vec> iq(S), ik(S), iw(S);
        for (int64_t t = 0; t < S; ++t) {
          Vec q = lin(ix + "wq_b.weight", qr[t]);
          for (int64_t hh = 0; hh < nh; ++hh) {
            Vec r = ropeHf(q, hh * hd, t);
            std::copy(r.begin(), r.end(), q.begin() + hh * hd);
          }
          iq[t] = q;
          Vec k = lin(ix + "wk.weight", h[t]);
          double mean = std::accumulate(k.begin(), k.end(), 0.0) / hd, var = 0;
          for (double v : k)
            var += (v - mean) * (v - mean);
          var /= hd;
          const auto &g = w(ix + "k_norm.weight");
          const auto &b = w(ix + "k_norm.bias");
          for (int64_t i = 0; i < hd; ++i)
            k[i] = (k[i] - mean) / std::sqrt(var + 1e-6) * g[i] + b[i];
          Vec r = ropeHf(k, 0, t);
          std::copy(r.begin(), r.end(), k.begin());
          ik[t] = k;
          iw[t] = lin(ix + "weights_proj.weight", h[t]);
        }
        sel.assign(S, {});
        for (int64_t t = 0; t < S; ++t) {
          Vec score(t + 1, 0.0);
          for (int64_t s = 0; s <= t; ++s)
            for (int64_t hh = 0; hh < nh; ++hh) {
              double dq = 0;
              for (int64_t i = 0; i < hd; ++i)
                dq += iq[t][hh * hd + i] * ik[s][i];
              score[s] += iw[t][hh] / std::sqrt((double)nh) *
                          std::max(0.0, dq / std::sqrt((double)hd));
            }
          sel[t] = topk(score, c.indexTopk);
        }
      }
      for (int64_t t = 0; t < S; ++t) {
        Vec att(H * dv, 0.0);
        for (int64_t hh = 0; hh < H; ++hh) {
          Vec sc(sel[t].size());
          for (size_t j = 0; j < sel[t].size(); ++j) {
            double s = 0;
            for (int64_t i = 0; i < dn + dr; ++i)
              s += Q[t][hh * (dn + dr) + i] * K[sel[t][j]][hh * (dn + dr) + i];
            sc[j] = s / std::sqrt((double)(dn + dr));
          }
          double m = *std::max_element(sc.begin(), sc.end()), z = 0;
          for (double &v : sc)
            z += (v = std::exp(v - m));
          for (size_t j = 0; j < sel[t].size(); ++j)
            for (int64_t i = 0; i < dv; ++i)
              att[hh * dv + i] += sc[j] / z * V[sel[t][j]][hh * dv + i];
        }
        Vec o = lin(a + "o_proj.weight", att);
        for (int64_t i = 0; i < d; ++i)
          x[t][i] += o[i];
        Vec h2 = rms(p + "post_attention_layernorm.weight", x[t]);
        Vec y(d, 0.0);
        std::string m = p + "mlp.";
        if (c.isMoeLayer(l)) {
          Vec lg = lin(m + "gate.weight", h2), s(lg.size()), ch(lg.size());
          const auto &bias = w(m + "gate.e_score_correction_bias");
          for (size_t e = 0; e < lg.size(); ++e) {
            s[e] = 1 / (1 + std::exp(-lg[e]));
            ch[e] = s[e] + bias[e];
          }
          auto chosen = topk(ch, c.numExpertsPerTok);
          double sum = 0;
          for (int64_t e : chosen)
            sum += s[e];
          for (int64_t e : chosen) {
            Vec eo = mlp(m + "experts." + std::to_string(e) + ".", h2);
            for (int64_t i = 0; i < d; ++i)
              y[i] += s[e] / (sum + 1e-20) * c.routedScalingFactor * eo[i];
          }
          Vec so = mlp(m + "shared_experts.", h2);
          for (int64_t i = 0; i < d; ++i)
            y[i] += so[i];
        } else {
          y = mlp(m, h2);
        }
        for (int64_t i = 0; i < d; ++i)
          x[t][i] += y[i];
      }
    }
    std::vector<Vec> out(S);
    for (int64_t t = 0; t < S; ++t)
      out[t] = lin("lm_head.weight", rms("model.norm.weight", x[t]));
    return out;
  }
};

std::vector<int64_t> testTokens(int64_t n, int64_t vocab) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back((i * 37 + 11) % vocab);
  return t;
}

} // namespace

TEST(CpuForward, MatchesExpandedReferenceAtEveryPosition) {
  ModelConfig c = cputest::tinyConfig();
  for (uint64_t seed : {1, 2, 3}) {
    MapWeightSource src = cputest::tinyWeights(c, seed);
    CpuForward fwd(ModelWeights::load(c, src), TpLayout::fromRule(c, 1));
    auto toks = testTokens(14, c.vocabSize); // > index_topk = 5
    Ref ref{src, c, {}};
    auto want = ref.logits(toks);
    Session s = fwd.newSession();
    for (size_t t = 0; t < toks.size(); ++t) {
      auto got = fwd.step(s, toks[t]);
      double maxAbs = 0, maxDiff = 0;
      for (int64_t v = 0; v < c.vocabSize; ++v) {
        maxAbs = std::max(maxAbs, std::fabs(want[t][v]));
        maxDiff = std::max(maxDiff, std::fabs(want[t][v] - got[v]));
      }
      EXPECT_LE(maxDiff / maxAbs, 1e-5)
          << "seed " << seed << " position " << t;
    }
  }
}

TEST(CpuForward, SparseSelectionAndSharedLayersReuseLatestFull) {
  ModelConfig c = cputest::tinyConfig();
  c.indexerTypes = {"full", "shared", "full", "shared"};
  MapWeightSource src = cputest::tinyWeights(c, 7);
  CpuForward fwd(ModelWeights::load(c, src), TpLayout::fromRule(c, 1));
  Session s = fwd.newSession();
  auto toks = testTokens(12, c.vocabSize);
  bool differed = false;
  for (size_t t = 0; t < toks.size(); ++t) {
    StepTrace tr;
    fwd.step(s, toks[t], &tr);
    int64_t T = (int64_t)t + 1;
    EXPECT_EQ((int64_t)tr.selected[0].size(), std::min(T, c.indexTopk));
    EXPECT_EQ(tr.selected[1], tr.selected[0]);
    EXPECT_EQ(tr.selected[3], tr.selected[2]);
    differed |= tr.selected[2] != tr.selected[0];
    for (int64_t l = 1; l < c.numLayers; ++l)
      EXPECT_EQ((int64_t)tr.experts[l].size(), c.numExpertsPerTok);
  }
  EXPECT_TRUE(differed) << "the two full layers never chose differently; "
                           "the test would not see a wrong reuse";
}

TEST(CpuForward, BitIdenticalAcrossRankCounts) {
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 11);
  auto w = ModelWeights::load(c, src);
  auto toks = testTokens(10, c.vocabSize);
  std::vector<float> base;
  for (int n = 1; n <= 4; ++n) {
    CpuForward fwd(w, TpLayout::fromRule(c, n));
    Session s = fwd.newSession();
    std::vector<float> all;
    for (int64_t t : toks) {
      auto lg = fwd.step(s, t);
      all.insert(all.end(), lg.begin(), lg.end());
    }
    if (n == 1)
      base = all;
    else
      EXPECT_EQ(0, std::memcmp(base.data(), all.data(), 4 * all.size()))
          << n << " ranks";
  }
}

TEST(CpuForward, TpRuleAssignsHalvesAndHeads) {
  ModelConfig c = cputest::tinyConfig();
  TpLayout t = TpLayout::fromRule(c, 3);
  EXPECT_EQ(t.expertHalves, 2); // 160 channels = 128 + 32
  // half h of expert e in layer L on rank (pairs·e + h/2 + L) mod N, pairs
  // = ceil(halves / 2): the shard rule's pairs of halves.
  EXPECT_EQ(t.expertHalfRank(2, 4, 1), (1 * 4 + 1 / 2 + 2) % 3);
  EXPECT_EQ(t.layers[0].headRank, (std::vector<int>{0, 1, 2, 2}));
  EXPECT_EQ(t.vocabBegin, (std::vector<int64_t>{0, 16, 33, 50}));
}

TEST(CpuForward, RejectsBadTokenAndBadShapes) {
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 1);
  CpuForward fwd(ModelWeights::load(c, src), TpLayout::fromRule(c, 1));
  Session s = fwd.newSession();
  EXPECT_THROW(fwd.step(s, c.vocabSize), Error);
  src.add("model.layers.1.mlp.experts.3.up_proj.weight", {3, 3},
          std::vector<float>(9));
  try {
    ModelWeights::load(c, src);
    FAIL() << "a wrong shape loaded";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("experts.3.up_proj"),
              std::string::npos);
  }
}

TEST(CpuGenerator, LogitRowsAndStopIds) {
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 5);
  auto gen = makeCpuGenerator(ModelWeights::load(c, src),
                              TpLayout::fromRule(c, 2));
  auto prompt = testTokens(6, c.vocabSize);
  SamplingParams p;
  p.maxNew = 4;
  std::vector<float> rows;
  std::vector<int64_t> streamed;
  auto r = gen->generate(prompt, p,
                         [&](int64_t t) {
                           streamed.push_back(t);
                           return true;
                         },
                         &rows);
  ASSERT_EQ(r.tokens.size(), 4u);
  EXPECT_EQ(streamed, r.tokens);
  EXPECT_EQ(r.finishReason, "length");
  EXPECT_EQ(rows.size(), (size_t)(6 + 3) * c.vocabSize);
  // Greedy: each generated token is the argmax of the row before it.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(r.tokens[i], argmax(rows.data() + (5 + i) * c.vocabSize,
                                  c.vocabSize));
  // Stop on the second generated token.
  p.stopIds = {r.tokens[1]};
  auto r2 = gen->generate(prompt, p);
  EXPECT_EQ(r2.finishReason, "stop");
  EXPECT_EQ(r2.tokens.size(), r.tokens[0] == r.tokens[1] ? 1u : 2u);
  // A callback returning false cancels.
  auto r3 = gen->generate(prompt, p, [](int64_t) { return false; });
  EXPECT_EQ(r3.tokens.size(), 1u);
  EXPECT_THROW(gen->generate({}, p), Error);
}

TEST(CpuWeights, Fp32BytesIsWhatLoadHolds) {
  // The memory check before loading (engine setup) relies on this count.
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 5);
  auto w = ModelWeights::load(c, src);
  uint64_t held = (w->embed.data.size() + w->lmHead.data.size() +
                   w->finalNorm.size()) * sizeof(float);
  auto mat = [&](const Matrix &m) { held += m.data.size() * sizeof(float); };
  auto vec = [&](const std::vector<float> &v) {
    held += v.size() * sizeof(float);
  };
  auto mlp = [&](const MlpWeights &m) {
    mat(m.gate);
    mat(m.up);
    mat(m.down);
  };
  for (const LayerWeights &L : w->layers) {
    vec(L.inputNorm);
    vec(L.postNorm);
    mat(L.qA);
    vec(L.qANorm);
    mat(L.qB);
    mat(L.kvA);
    vec(L.kvANorm);
    mat(L.kvB);
    mat(L.o);
    if (L.fullIndexer) {
      mat(L.indexer.wqB);
      mat(L.indexer.wk);
      vec(L.indexer.kNormW);
      vec(L.indexer.kNormB);
      mat(L.indexer.weightsProj);
    }
    if (L.moe) {
      mat(L.router);
      vec(L.routerBias);
      for (const MlpWeights &e : L.experts)
        mlp(e);
      mlp(L.shared);
    } else {
      mlp(L.dense);
    }
  }
  EXPECT_GT(held, 0u);
  EXPECT_EQ(ModelWeights::fp32Bytes(c, src), held);
}
