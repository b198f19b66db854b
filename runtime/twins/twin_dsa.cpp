//===- twin_dsa.cpp - twins of the DSA families ---------------------------===//
//
// dsa_iota, indexer_scores_ctx and dsa_select: integer work and fp64 sums
// in the kernels' order (head dots serial over i, heads added in order), so
// the same bits as CUDA. indexer_scores_mma: the tensor-core kernel's
// operands (fp16 hi + lo splits) with fp64 sums, within a tolerance of it.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/kv_rows.h"

#include "codegen/templates/dsa_select.cuh"
#include "codegen/templates/indexer_scores_mma.cuh"
#include "runtime/base/numeric.h"
#include "runtime/base/parallel.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace glm::rt::twins {

// dsa_iota(sel, nsel, pos, maxCtx); grid (n, B).
void dsaIotaTwin(const Launch &l) {
  int *sel = l.ptr<int>(0), *nsel = l.ptr<int>(1);
  const int *pos = l.ptr<const int>(2);
  const int maxCtx = l.i32(3);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int T = pos[b] + 1;
    for (int t = 0; t < T; ++t)
      sel[(int64_t)b * maxCtx + t] = t;
    nsel[b] = T;
  }
}

// indexer_scores_ctx(qi, keys, wts, score, seq, pos, nh, hd, maxCtx,
// headScale, dotScale, pages, pageShift); grid (n, B): every t < (pos[b] + 1) /
// pool once (template pool, default 1: keys and scores have maxCtx / pool rows;
// template kv: the keys' form, kv_rows.h).
void indexerScoresCtxTwin(const Launch &l) {
  const float *qi = l.ptr<const float>(0), *wts = l.ptr<const float>(2);
  const void *keys = l.ptr<const void>(1);
  double *score = l.ptr<double>(3);
  const int *seq = l.ptr<const int>(4), *pos = l.ptr<const int>(5);
  const int nh = l.i32(6), hd = l.i32(7), maxCtx = l.i32(8);
  const double headScale = l.args.at(9).f, dotScale = l.args.at(10).f;
  const int pool = l.targIntOr("pool", 1), pc = maxCtx / pool;
  KvRows rows(keys, l.kvForm(), hd);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int T = (pos[b] + 1) / pool;
    const float *q = qi + (int64_t)b * nh * hd;
    const float *wv = wts + (int64_t)b * nh;
    const glm::kv::SlotRows r0 = slotRowsOf(l, 11, seq[b], pc);
    for (int t = 0; t < T; ++t) {
      const float *kt = rows.row(r0(t));
      double acc = 0;
      for (int h = 0; h < nh; ++h) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += (double)q[h * hd + i] * (double)kt[i];
        const double v = d * dotScale;
        acc += (double)wv[h] * headScale * (v > 0.0 ? v : 0.0);
      }
      score[(int64_t)b * pc + t] = acc;
    }
  }
}

/// x as the kernel's fp16 pair: hi = fp16(x), lo = fp16(x - hi), the
/// difference in fp32 (exact: hi is within a rounding of x).
static void splitHalf(float x, double &hi, double &lo) {
  const float h = roundToHalf(x);
  hi = h;
  lo = roundToHalf(x - h);
}

// indexer_scores_mma(qi, keys, wts, score, seq, pos, nh, hd, maxCtx,
// headScale, dotScale, pages, pageShift); grid (gx, B), 256 threads:
// indexer_scores_ctx's scores (pool 1) from the tensor-core kernel's operands.
// q and f32 / bf16 keys split into fp16 hi + lo, the dot hi.hi + hi.lo + lo.hi;
// e4m3 keys as their byte values (hi.b + lo.b), the dot times the row's scale.
// Every product is exact in fp64 and the dot sums them in fp64 over i in order,
// then the ctx kernel's fp64 epilogue. The kernel adds the same products
// in fp32 (tensor-core order) with an fp32 epilogue: within ~1e-6 of the
// largest score (tests/gpu/indexer_scores_mma_gpu_test.cpp). Shapes the
// kernel refuses (indexerMmaTakes) write nothing, as there.
void indexerScoresMmaTwin(const Launch &l) {
  const float *qi = l.ptr<const float>(0), *wts = l.ptr<const float>(2);
  const uint8_t *keys = l.ptr<const uint8_t>(1);
  double *score = l.ptr<double>(3);
  const int *seq = l.ptr<const int>(4), *pos = l.ptr<const int>(5);
  const int nh = l.i32(6), hd = l.i32(7), maxCtx = l.i32(8);
  const double headScale = l.args.at(9).f, dotScale = l.args.at(10).f;
  const int kv = l.kvForm(), B = int(l.grid[1]);
  if (!glm::indexerMmaTakes(nh, hd, int(l.block[0])))
    return;
  const int64_t rowBytes = kvRowBytes(kv, hd);
  parallelFor(B, 1, 0, [&](int64_t b0, int64_t b1, int) {
    std::vector<double> qh(size_t(nh) * hd), ql(qh.size()), kh(hd), kl(hd);
    for (int64_t b = b0; b < b1; ++b) {
      const float *q = qi + b * nh * hd;
      for (size_t i = 0; i < qh.size(); ++i)
        splitHalf(q[i], qh[i], ql[i]);
      const float *wv = wts + b * nh;
      const int T = std::min(pos[b] + 1, maxCtx);
      const glm::kv::SlotRows r0 = slotRowsOf(l, 11, seq[b], maxCtx);
      for (int t = 0; t < T; ++t) {
        const uint8_t *p = keys + r0(t) * rowBytes;
        double scale = 1.0;
        for (int i = 0; i < hd; ++i) {
          if (kv == glm::kv::kE4m3) {
            kh[i] = glm::kv::e4m3Value(p[i]), kl[i] = 0.0; // exact in fp16
          } else {
            float x;
            if (kv == glm::kv::kBf16) {
              uint16_t h;
              std::memcpy(&h, p + 2 * i, 2);
              x = bf16ToFloat(h);
            } else {
              std::memcpy(&x, p + 4 * i, 4);
            }
            splitHalf(x, kh[i], kl[i]);
          }
        }
        if (kv == glm::kv::kE4m3) {
          float s;
          std::memcpy(&s, p + hd, 4);
          scale = s;
        }
        double acc = 0;
        for (int h = 0; h < nh; ++h) {
          const double *a = qh.data() + size_t(h) * hd,
                       *al = ql.data() + size_t(h) * hd;
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += a[i] * kh[i] + a[i] * kl[i] + al[i] * kh[i];
          const double v = d * scale * dotScale;
          acc += (double)wv[h] * headScale * (v > 0.0 ? v : 0.0);
        }
        score[b * maxCtx + t] = acc;
      }
    }
  });
}

// dsa_select(scoreAll, pos, k, flagsAll, selAll, nsel, maxCtx); grid (1, B).
// Template pool (default 1): candidates are the complete pools, expanded to
// their tokens, then the tail tokens (dsa_select.cuh). The k largest keys
// (dsa::scoreKey: -0 as +0, NaN largest), ties to the lower position, in
// position order: the kernel's radix select chooses the same set.
void dsaSelectTwin(const Launch &l) {
  const double *scoreAll = l.ptr<const double>(0);
  const int *pos = l.ptr<const int>(1);
  const int k = l.i32(2);
  int *flagsAll = l.ptr<int>(3), *selAll = l.ptr<int>(4), *nsel = l.ptr<int>(5);
  const int maxCtx = l.i32(6);
  const int pool = l.targIntOr("pool", 1), pc = maxCtx / pool;
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int T = (pos[b] + 1) / pool;
    const double *score = scoreAll + (int64_t)b * pc;
    int *flags = flagsAll + (int64_t)b * pc;
    int *sel = selAll + (int64_t)b * maxCtx;
    if (T <= k || k <= 0) {
      const int first = k <= 0 ? T * pool : 0;
      for (int t = first; t <= pos[b]; ++t)
        sel[t - first] = t;
      for (int t = 0; k <= 0 && t < T; ++t)
        flags[t] = 0;
      nsel[b] = pos[b] + 1 - first;
      continue;
    }
    // K: the k-th largest key; `need` of the keys equal to it are chosen.
    std::vector<unsigned long long> keys(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t)
      keys[size_t(t)] = glm::dsa::scoreKey(score[t]);
    std::vector<unsigned long long> order = keys;
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                     std::greater<unsigned long long>());
    const unsigned long long K = order[size_t(k - 1)];
    int need = k;
    for (unsigned long long key : keys)
      need -= key > K ? 1 : 0;
    int n = 0;
    for (int t = 0; t < T; ++t) {
      const unsigned long long key = keys[size_t(t)];
      const bool chosen = key > K || (key == K && need-- > 0);
      flags[t] = chosen;
      if (chosen)
        for (int j = 0; j < pool; ++j)
          sel[n++] = t * pool + j;
    }
    for (int t = T * pool; t <= pos[b]; ++t)
      sel[n++] = t;
    nsel[b] = n;
  }
}

} // namespace glm::rt::twins
