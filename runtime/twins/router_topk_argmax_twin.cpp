//===- router_topk_argmax_twin.cpp - twins of the selection families ------===//
//
// router: s = 1 / (1 + exp(-logit)) in fp32 (the host's expf: <= 2 ulp from
// CUDA's), keys s + bias, TOPK rounds of "largest key, lower id on ties"
// (NaN never wins; none left: expert 0), fp32 sum of the chosen scores in
// selection order, w = s * (scale / (sum + 1e-20)) or s * scale. CUDA
// against the twin: the same ids unless two keys lie within a few ulp,
// weights within 1e-6 relative.
// topk: the k largest order keys (NaN lowest; ties at the threshold to the
// lower index) in ascending index order; the radix select's result is
// defined by that rule alone: bit-exact.
// argmax: largest value, lower index on ties, NaN ignored (-1 when nothing
// beats -inf with an index): order-independent, bit-exact.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace glm::rt::twins {

namespace {
enum RouterArg {
  kRLogits,
  kRBias,
  kRIds,
  kRWeights,
  kRBatch,
  kRExperts,
  kRScale,
  kRRenorm,
  kNumRouterArgs
};
enum TopkArg {
  kTScores,
  kTLen,
  kTSel,
  kTNsel,
  kTBatch,
  kTScoreStride,
  kTSelStride,
  kTK,
  kNumTopkArgs
};
enum ArgmaxArg {
  kAVals,
  kAIdxIn,
  kAOutVal,
  kAOutIdx,
  kABatch,
  kAN,
  kAInStride,
  kAOutStride,
  kAIndexOffset,
  kNumArgmaxArgs
};

/// orderKey of topk.cuh: an unsigned order equal to the float order, NaN 0.
uint32_t orderKey(float f) {
  if (std::isnan(f))
    return 0;
  const uint32_t u = floatToBits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
} // namespace

void routerTwin(const Launch &l) {
  check(l.args.size() == kNumRouterArgs, "twin of router: ", l.args.size(),
        " arguments, the family takes ", int(kNumRouterArgs));
  const int maxExperts = l.targInt("experts"), topk = l.targInt("topk");
  const float *logits = l.ptr<const float>(kRLogits);
  const float *bias = l.ptr<const float>(kRBias);
  int *ids = l.ptr<int>(kRIds);
  float *weights = l.ptr<float>(kRWeights);
  const int batch = std::min<int>(l.i32(kRBatch), int(l.grid[0]));
  const int experts = l.i32(kRExperts);
  const float scale = l.f32(kRScale);
  const bool renorm = l.i32(kRRenorm) != 0;
  if (experts > maxExperts)
    return; // the kernel returns without writing
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> score(experts), key(experts);
  std::vector<int> chosen(topk);
  for (int b = 0; b < batch; ++b) {
    for (int e = 0; e < experts; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[int64_t(b) * experts + e]));
      key[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    for (int k = 0; k < topk; ++k) {
      float bv = -inf;
      int bi = std::numeric_limits<int>::max();
      for (int e = 0; e < experts; ++e)
        if (key[e] > bv || (key[e] == bv && e < bi))
          bv = key[e], bi = e;
      if (bi >= experts)
        bi = 0;
      chosen[k] = bi;
      key[bi] = -inf;
    }
    float sum = 0.0f;
    for (int k = 0; k < topk; ++k)
      sum += score[chosen[k]];
    const float norm = renorm ? scale / (sum + 1e-20f) : scale;
    for (int k = 0; k < topk; ++k) {
      ids[b * topk + k] = chosen[k];
      weights[b * topk + k] = score[chosen[k]] * norm;
    }
  }
}

void topkTwin(const Launch &l) {
  check(l.args.size() == kNumTopkArgs, "twin of topk: ", l.args.size(),
        " arguments, the family takes ", int(kNumTopkArgs));
  const float *scores = l.ptr<const float>(kTScores);
  const int *len = l.ptr<const int>(kTLen);
  int *sel = l.ptr<int>(kTSel);
  int *nsel = l.ptr<int>(kTNsel);
  const int batch = std::min<int>(l.i32(kTBatch), int(l.grid[0]));
  const int scoreStride = l.i32(kTScoreStride), selStride = l.i32(kTSelStride);
  const int k = l.i32(kTK);
  for (int b = 0; b < batch; ++b) {
    const int n = len[b];
    const float *row = scores + int64_t(b) * scoreStride;
    int *out = sel + int64_t(b) * selStride;
    if (n <= k) {
      for (int i = 0; i < n; ++i)
        out[i] = i;
      nsel[b] = n;
      continue;
    }
    // The k-th largest key is the threshold; keys above it are taken, and
    // of the keys equal to it the lowest indices up to k.
    std::vector<uint32_t> keys(n);
    for (int i = 0; i < n; ++i)
      keys[i] = orderKey(row[i]);
    std::vector<uint32_t> sorted = keys;
    std::nth_element(sorted.begin(), sorted.begin() + (k > 0 ? k - 1 : 0),
                     sorted.end(), std::greater<uint32_t>());
    const uint32_t threshold = k > 0 ? sorted[k - 1] : 0xFFFFFFFFu;
    int above = 0;
    for (uint32_t key : keys)
      above += key > threshold;
    int ties = k - above, written = 0;
    for (int i = 0; i < n; ++i) {
      const bool tie = keys[i] == threshold && ties > 0;
      if (keys[i] > threshold || tie) {
        out[written++] = i;
        ties -= tie;
      }
    }
    nsel[b] = k;
  }
}

void argmaxTwin(const Launch &l) {
  check(l.args.size() == kNumArgmaxArgs, "twin of argmax: ", l.args.size(),
        " arguments, the family takes ", int(kNumArgmaxArgs));
  const float *vals = l.ptr<const float>(kAVals);
  const int *idxIn = l.ptr<const int>(kAIdxIn);
  float *outVal = l.ptr<float>(kAOutVal);
  int *outIdx = l.ptr<int>(kAOutIdx);
  const int batch = std::min<int>(l.i32(kABatch), int(l.grid[0]));
  const int n = l.i32(kAN), inStride = l.i32(kAInStride);
  const int outStride = l.i32(kAOutStride), indexOffset = l.i32(kAIndexOffset);
  for (int b = 0; b < batch; ++b) {
    const float *row = vals + int64_t(b) * inStride;
    float bv = -std::numeric_limits<float>::infinity();
    int bi = std::numeric_limits<int>::max();
    for (int i = 0; i < n; ++i) {
      const float v = row[i];
      const int id = idxIn ? idxIn[int64_t(b) * inStride + i] : i + indexOffset;
      if (v > bv || (v == bv && id < bi))
        bv = v, bi = id;
    }
    outVal[int64_t(b) * outStride] = bv;
    outIdx[int64_t(b) * outStride] =
        bi == std::numeric_limits<int>::max() ? -1 : bi;
  }
}

} // namespace glm::rt::twins
