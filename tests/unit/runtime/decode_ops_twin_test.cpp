//===- decode_ops_twin_test.cpp - twins of the decode helper families -----===//
//
// embed, rms_norm, rope, router, topk, argmax, indexer_scores and
// mla_decode against the CPU reference ops (runtime/cpu/ops.h: fp64 norms,
// RoPE, router, top-k, argmax) or float64 evaluations written here.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops.h"
#include "twin_test_util.h"

#include <algorithm>
#include <limits>
#include <set>

using namespace glm::twintest;
namespace cpu = glm::rt::cpu;

namespace {

TEST(EmbedTwin, FormatsAndShardRows) {
  std::mt19937 rng(21);
  const int hidden = 300, rows = 10, rowBegin = 5;
  const std::vector<float> tab = randn(rng, size_t(rows) * hidden);
  std::vector<float> scale(rows);
  for (float &s : scale)
    s = 0.25f + float(rng() % 8) / 16.0f;
  const std::vector<int> ids = {7, 3, 14, 15}; // 3 and 15: not this shard
  for (const char *format : {"f32", "f16", "bf16", "fp8_row"}) {
    const std::string f = format;
    std::vector<uint8_t> bytes;
    if (f == "fp8_row") {
      for (float v : tab)
        bytes.push_back(glm::rt::floatToE4m3(v));
    } else {
      bytes = storeAs(f == "f32" ? 0 : f == "f16" ? 1 : 2, tab);
    }
    std::vector<float> out(ids.size() * hidden, NAN);
    const glm::plan::KeyValues targs = {{"format", format}, {"threads", "128"}};
    runTwin(launch("embed", targs, (hidden + 127) / 128, 4, 128,
                   {P(ids.data()), P(bytes.data()), P(scale.data()),
                    P(out.data()), I(4), I(hidden), I(rowBegin), I(rows)}));
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < hidden; ++i) {
        const int r = ids[b] - rowBegin;
        float want = 0.0f;
        if (r >= 0 && r < rows) {
          const float v = tab[size_t(r) * hidden + i];
          want = f == "f32"    ? v
                 : f == "f16"  ? glm::rt::roundToHalf(v)
                 : f == "bf16" ? roundTo(2, v)
                               : glm::rt::roundToE4m3(v) * scale[r];
        }
        ASSERT_EQ(out[size_t(b) * hidden + i], want) << format << b << i;
      }
  }
}

TEST(RmsNormTwin, FusedResidualAddMatchesReference) {
  std::mt19937 rng(22);
  const int rows = 3, n = 1000, xStride = 1024;
  std::vector<float> x = randn(rng, size_t(rows) * xStride);
  const std::vector<float> add = randn(rng, size_t(rows) * n);
  const std::vector<float> w = randn(rng, n);
  const std::vector<uint8_t> wB = storeAs(2, w);
  std::vector<float> wR(n);
  for (int i = 0; i < n; ++i)
    wR[i] = roundTo(2, w[i]);
  std::vector<float> sum(size_t(rows) * n);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i)
      sum[size_t(r) * n + i] =
          x[size_t(r) * xStride + i] + add[size_t(r) * n + i];
  std::vector<float> y(size_t(rows) * n, NAN);
  const glm::plan::KeyValues targs = {{"wt", "bf16"}, {"threads", "256"}};
  Launch l = launch("rms_norm", targs, rows, 1, 256,
                    {P(x.data()),
                     P(add.data()),
                     P(wB.data()),
                     P(y.data()),
                     I(rows),
                     I(n),
                     I(xStride),
                     {}});
  l.args[7].f = 1e-6;
  runTwin(l);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) // x += add, written back exactly
      ASSERT_EQ(x[size_t(r) * xStride + i], sum[size_t(r) * n + i]);
    std::vector<float> ref(n);
    cpu::rmsNorm(&sum[size_t(r) * n], wR.data(), ref.data(), n, 1e-6);
    std::vector<double> refD(ref.begin(), ref.end());
    EXPECT_LE(relErr(&y[size_t(r) * n], refD.data(), n), 1e-6);
  }
}

TEST(RopeTwin, MatchesReferenceRotation) {
  std::mt19937 rng(23);
  const int batch = 2, heads = 3, dim = 64, headStride = 96, offset = 32;
  const int rowStride = heads * headStride;
  std::vector<float> x = randn(rng, size_t(batch) * rowStride);
  const std::vector<int> pos = {5, 300};
  std::vector<float> ref = x;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      cpu::ropeInterleave(&ref[size_t(b) * rowStride + h * headStride + offset],
                          dim, pos[b], 1e6);
  const glm::plan::KeyValues targs = {{"rope_dim", "64"}};
  Launch l = launch("rope", targs, heads, batch, dim / 2,
                    {P(x.data()),
                     P(pos.data()),
                     I(batch),
                     I(heads),
                     I(rowStride),
                     I(headStride),
                     I(offset),
                     {}});
  l.args[7].f = 1e6;
  runTwin(l);
  std::vector<double> refD(ref.begin(), ref.end());
  // fp32 angles against the reference's double ones at position 300.
  expectRel("rope", x.data(), refD.data(), x.size(), 1e-4);
}

TEST(RouterTwin, MatchesReferenceRouting) {
  std::mt19937 rng(24);
  const int batch = 3, experts = 64, topk = 6;
  const std::vector<float> logits = randn(rng, size_t(batch) * experts);
  const std::vector<float> bias = randn(rng, experts, 0.1f);
  for (int renorm : {0, 1}) {
    std::vector<int> ids(size_t(batch) * topk, -7);
    std::vector<float> w(size_t(batch) * topk, NAN);
    const glm::plan::KeyValues targs = {
        {"experts", "64"}, {"topk", "6"}, {"threads", "128"}};
    Launch l = launch("router", targs, batch, 1, 128,
                      {P(logits.data()),
                       P(bias.data()),
                       P(ids.data()),
                       P(w.data()),
                       I(batch),
                       I(experts),
                       {},
                       I(renorm)});
    l.args[6].f = 2.5;
    runTwin(l);
    for (int b = 0; b < batch; ++b) {
      std::vector<double> lg(logits.begin() + b * experts,
                             logits.begin() + (b + 1) * experts);
      const cpu::RouterChoice want =
          cpu::routeExperts(lg, bias.data(), topk, renorm != 0, 2.5);
      // The twin lists experts in selection order, the reference by id.
      std::vector<std::pair<int, float>> got;
      for (int k = 0; k < topk; ++k)
        got.emplace_back(ids[b * topk + k], w[b * topk + k]);
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got.size(), want.experts.size());
      for (int k = 0; k < topk; ++k) {
        EXPECT_EQ(got[k].first, want.experts[k]);
        EXPECT_NEAR(got[k].second, want.weights[k], 1e-6 * 2.5);
      }
    }
  }
}

TEST(TopkTwin, ThresholdTiesAndShortRows) {
  std::mt19937 rng(25);
  const int batch = 3, stride = 500, k = 40;
  std::vector<float> scores = randn(rng, size_t(batch) * stride);
  for (int i = 0; i < 100; i += 3) // ties at many values, a NaN, -inf
    scores[i] = 1.5f;
  scores[7] = NAN;
  scores[8] = -std::numeric_limits<float>::infinity();
  const std::vector<int> len = {500, 30, 233};
  std::vector<int> sel(size_t(batch) * k, -1), nsel(batch, -1);
  const glm::plan::KeyValues targs = {{"threads", "256"}};
  runTwin(launch("topk", targs, batch, 1, 256,
                 {P(scores.data()), P(len.data()), P(sel.data()),
                  P(nsel.data()), I(batch), I(stride), I(k), I(k)}));
  for (int b = 0; b < batch; ++b) {
    const int n = len[b];
    std::vector<double> v(n);
    for (int i = 0; i < n; ++i) {
      const float s = scores[size_t(b) * stride + i];
      v[i] = std::isnan(s) ? -std::numeric_limits<double>::infinity() : s;
    }
    std::vector<int64_t> want = cpu::topkIndices(v, std::min(k, n));
    std::sort(want.begin(), want.end());
    ASSERT_EQ(nsel[b], int(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(sel[size_t(b) * k + i], want[i]) << b << " " << i;
  }
}

TEST(ArgmaxTwin, IndicesOffsetsAndCandidates) {
  const std::vector<float> vals = {1, 3, NAN, 3, -2, 0.5f, 9, 9};
  const std::vector<int> cand = {40, 11, 12, 10, 3, 4, 99, 98};
  float ov[2];
  int oi[2];
  const glm::plan::KeyValues targs = {{"threads", "256"}};
  runTwin(launch("argmax", targs, 2, 1, 256,
                 {P(vals.data()), P(nullptr), P(ov), P(oi), I(2), I(4), I(4),
                  I(1), I(100)}));
  EXPECT_EQ(ov[0], 3.0f);
  EXPECT_EQ(oi[0], 101); // the lower index of the tie, + offset
  EXPECT_EQ(ov[1], 9.0f);
  EXPECT_EQ(oi[1], 102);
  runTwin(launch("argmax", targs, 2, 1, 256,
                 {P(vals.data()), P(cand.data()), P(ov), P(oi), I(2), I(4),
                  I(4), I(1), I(0)}));
  EXPECT_EQ(oi[0], 10); // tie: the lower candidate index
  EXPECT_EQ(oi[1], 98);
}

TEST(IndexerScoresTwin, MatchesFloat64) {
  std::mt19937 rng(26);
  const int batch = 2, dim = 64, heads = 4, nKeys = 50, stride = 64;
  const std::vector<float> q = randn(rng, size_t(batch) * heads * dim);
  const std::vector<float> w = randn(rng, size_t(batch) * heads);
  const std::vector<float> keys = randn(rng, size_t(nKeys) * dim);
  const std::vector<uint8_t> keysB = storeAs(2, keys);
  const std::vector<int> len = {50, 17};
  std::vector<float> scores(size_t(batch) * stride, -5.0f);
  const glm::plan::KeyValues targs = {
      {"head_dim", "64"}, {"n_heads", "4"}, {"kt", "bf16"}, {"threads", "128"}};
  Launch l = launch("indexer_scores", targs, (nKeys + 15) / 16, batch, 128,
                    {P(q.data()),
                     P(w.data()),
                     P(keysB.data()),
                     P(len.data()),
                     P(scores.data()),
                     I(batch),
                     I(stride),
                     {}});
  l.args[7].f = 0.125;
  runTwin(l);
  for (int b = 0; b < batch; ++b)
    for (int s = 0; s < stride; ++s) {
      if (s >= len[b]) {
        EXPECT_EQ(scores[size_t(b) * stride + s], -5.0f);
        continue;
      }
      double total = 0;
      for (int h = 0; h < heads; ++h) {
        double dot = 0;
        for (int d = 0; d < dim; ++d)
          dot += double(q[(size_t(b) * heads + h) * dim + d]) *
                 roundTo(2, keys[size_t(s) * dim + d]);
        total += w[size_t(b) * heads + h] * std::max(dot * 0.125, 0.0);
      }
      EXPECT_NEAR(scores[size_t(b) * stride + s], total,
                  1e-5 * (1 + std::fabs(total)));
    }
}

TEST(MlaDecodeTwin, MatchesFloat64Softmax) {
  std::mt19937 rng(27);
  const int batch = 2, heads = 4, lora = 64, rope = 16, tokens = 30;
  const int maxSel = 12, row = lora + rope;
  const std::vector<float> qLat = randn(rng, size_t(batch) * heads * lora);
  const std::vector<float> qPe = randn(rng, size_t(batch) * heads * rope);
  const std::vector<float> c = randn(rng, size_t(tokens) * row);
  std::vector<float> cScale(tokens);
  for (float &s : cScale)
    s = 0.5f + float(rng() % 4) / 8.0f;
  std::vector<int> sel(size_t(batch) * maxSel), nsel = {12, 5};
  for (int &s : sel)
    s = int(rng() % tokens);
  for (bool e4m3 : {false, true}) {
    std::vector<uint8_t> cache;
    std::vector<double> cv(c.size()); // the values the kernel reads
    for (size_t i = 0; i < c.size(); ++i) {
      if (e4m3) {
        cache.push_back(glm::rt::floatToE4m3(c[i]));
        cv[i] = double(glm::rt::e4m3ToFloat(cache.back()) * cScale[i / row]);
      } else {
        const uint16_t h = glm::rt::floatToBf16(c[i]);
        cache.push_back(uint8_t(h)), cache.push_back(uint8_t(h >> 8));
        cv[i] = glm::rt::bf16ToFloat(h);
      }
    }
    std::vector<float> o(size_t(batch) * heads * lora, NAN);
    const glm::plan::KeyValues targs = {{"lora", "64"},
                                        {"rope", "16"},
                                        {"kv", e4m3 ? "e4m3" : "bf16"},
                                        {"heads", "2"},
                                        {"threads", "128"}};
    Launch l = launch("mla_decode", targs, heads / 2, batch, 128,
                      {P(qLat.data()),
                       P(qPe.data()),
                       P(cache.data()),
                       P(e4m3 ? cScale.data() : nullptr),
                       P(sel.data()),
                       P(nsel.data()),
                       P(o.data()),
                       I(batch),
                       I(heads),
                       I(maxSel),
                       {}},
                      heads / 2 * maxSel * 4);
    l.args[10].f = 0.1;
    runTwin(l);
    std::vector<double> ref(o.size());
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h) {
        const int n = nsel[b];
        std::vector<double> p(n);
        for (int i = 0; i < n; ++i) {
          const int s = sel[size_t(b) * maxSel + i];
          double dot = 0;
          for (int d = 0; d < lora; ++d)
            dot += qLat[(size_t(b) * heads + h) * lora + d] *
                   cv[size_t(s) * row + d];
          for (int d = 0; d < rope; ++d)
            dot += qPe[(size_t(b) * heads + h) * rope + d] *
                   cv[size_t(s) * row + lora + d];
          p[i] = dot * 0.1;
        }
        cpu::softmax(p);
        for (int d = 0; d < lora; ++d) {
          double acc = 0;
          for (int i = 0; i < n; ++i)
            acc += p[i] * cv[size_t(sel[size_t(b) * maxSel + i]) * row + d];
          ref[(size_t(b) * heads + h) * lora + d] = acc;
        }
      }
    expectRel(std::string("mla_decode ") + (e4m3 ? "e4m3" : "bf16"), o.data(),
              ref.data(), o.size(), 1e-5);
  }
}

} // namespace
