//===- mla_decode_indexer_scores_twin.cpp - twins of the DSA attention ----===//
//
// indexer_scores: per key, per head, a fp32 dot over HEAD_DIM (lanes, then
// a warp tree) and total += w * ReLU(dot * qk_scale) in head order; the
// twin forms each dot in fp64 (one rounding) and follows the kernel's fp32
// head loop. CUDA against the twin: max|cuda - twin| <= 1e-5 * max|twin|.
// mla_decode: scores = fp32(dot) * softmax_scale with each dot in fp64, the
// max-subtracted softmax in fp32 (host expf), its sum and the weighted
// latent sum in fp64 rounded once, o = acc * (1 / sum). CUDA against the
// twin: max|cuda - twin| <= 1e-5 * max|twin|.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/families.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace glm::rt::twins {

namespace {
enum IndexerArg {
  kIQ,
  kIW,
  kIKeys,
  kILen,
  kIScores,
  kIBatch,
  kIScoreStride,
  kIQkScale,
  kNumIndexerArgs
};
enum MlaArg {
  kMQLat,
  kMQPe,
  kMCache,
  kMCacheScale,
  kMSel,
  kMNsel,
  kMOLat,
  kMBatch,
  kMHeads,
  kMMaxSel,
  kMSoftmaxScale,
  kNumMlaArgs
};
} // namespace

void indexerScoresTwin(const Launch &l) {
  check(l.args.size() == kNumIndexerArgs,
        "twin of indexer_scores: ", l.args.size(),
        " arguments, the family takes ", int(kNumIndexerArgs));
  const int dim = l.targInt("head_dim"), nHeads = l.targInt("n_heads");
  const int kt = storageId(l, "kt");
  const float *q = l.ptr<const float>(kIQ);
  const float *w = l.ptr<const float>(kIW);
  const void *keys = l.args[kIKeys].p;
  const int *len = l.ptr<const int>(kILen);
  float *scores = l.ptr<float>(kIScores);
  const int batch = std::min<int>(l.i32(kIBatch), int(l.grid[1]));
  const int scoreStride = l.i32(kIScoreStride);
  const float qkScale = l.f32(kIQkScale);
  // Each warp scores 4 keys: the grid covers keys < grid.x * warps * 4.
  const int64_t covered = int64_t(l.grid[0]) * (l.block[0] / 32) * 4;
  for (int b = 0; b < batch; ++b) {
    const int64_t n = std::min<int64_t>(len[b], covered);
    const float *qb = q + int64_t(b) * nHeads * dim;
    parallelFor(n, 64, 0, [&](int64_t s0, int64_t s1, int) {
      for (int64_t s = s0; s < s1; ++s) {
        float total = 0.0f;
        for (int h = 0; h < nHeads; ++h) {
          double dot = 0;
          for (int d = 0; d < dim; ++d)
            dot += double(qb[h * dim + d]) * storageAt(keys, kt, s * dim + d);
          total +=
              w[int64_t(b) * nHeads + h] * std::max(float(dot) * qkScale, 0.0f);
        }
        scores[int64_t(b) * scoreStride + s] = total;
      }
    });
  }
}

void mlaDecodeTwin(const Launch &l) {
  check(l.args.size() == kNumMlaArgs, "twin of mla_decode: ", l.args.size(),
        " arguments, the family takes ", int(kNumMlaArgs));
  const int lora = l.targInt("lora"), rope = l.targInt("rope");
  const int perBlock = l.targInt("heads");
  const bool e4m3 = l.targ("kv") == "e4m3";
  const int row = lora + rope;
  const float *qLat = l.ptr<const float>(kMQLat);
  const float *qPe = l.ptr<const float>(kMQPe);
  const void *cache = l.args[kMCache].p;
  const float *cacheScale = l.ptr<const float>(kMCacheScale);
  const int *sel = l.ptr<const int>(kMSel);
  const int *nsel = l.ptr<const int>(kMNsel);
  float *oLat = l.ptr<float>(kMOLat);
  const int batch = std::min<int>(l.i32(kMBatch), int(l.grid[1]));
  const int heads = std::min<int>(l.i32(kMHeads), int(l.grid[0]) * perBlock);
  const int maxSel = l.i32(kMMaxSel);
  const float softmaxScale = l.f32(kMSoftmaxScale);
  auto cacheAt = [&](int64_t s, int d) {
    const int64_t at = s * row + d;
    if (!e4m3)
      return bf16ToFloat(static_cast<const uint16_t *>(cache)[at]);
    return e4m3ToFloat(static_cast<const uint8_t *>(cache)[at]) *
           (cacheScale ? cacheScale[s] : 1.0f);
  };
  parallelFor(int64_t(batch) * heads, 1, 0, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const int b = int(t / heads), h = int(t % heads);
      const int n = std::min(nsel[b], maxSel);
      const int *idx = sel + int64_t(b) * maxSel;
      const float *ql = qLat + (int64_t(b) * l.i32(kMHeads) + h) * lora;
      const float *qp = qPe + (int64_t(b) * l.i32(kMHeads) + h) * rope;
      std::vector<float> p(std::max(n, 0));
      float m = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < n; ++i) {
        double dot = 0;
        for (int d = 0; d < lora; ++d)
          dot += double(ql[d]) * cacheAt(idx[i], d);
        for (int d = 0; d < rope; ++d)
          dot += double(qp[d]) * cacheAt(idx[i], lora + d);
        p[i] = float(dot) * softmaxScale;
        m = std::max(m, p[i]);
      }
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        p[i] = std::exp(p[i] - m);
        sum += p[i];
      }
      const float sumF = float(sum);
      const float inv = sumF > 0.0f ? 1.0f / sumF : 0.0f;
      float *o = oLat + (int64_t(b) * l.i32(kMHeads) + h) * lora;
      for (int d = 0; d < lora; ++d) {
        double acc = 0;
        for (int i = 0; i < n; ++i)
          acc += double(p[i]) * cacheAt(idx[i], d);
        o[d] = float(acc) * inv;
      }
    }
  });
}

} // namespace glm::rt::twins
