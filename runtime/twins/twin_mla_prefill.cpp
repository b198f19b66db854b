//===- twin_mla_prefill.cpp - twin of mla_prefill -------------------------===//
//
// The tensor-core attention of a prefill chunk (templates/mla_prefill.cuh):
// the same fp16 roundings of q, the key rows and the probabilities, the
// exact products summed in fp64 (the kernel sums them in fp32 on the tensor
// cores, so the two agree to fp32 rounding), the power-of-two row scales,
// the scores and probabilities as the kernel forms them in fp32. And the
// twin of mla_rows16 (templates/mla_rows16.cuh): the same key and value
// rows written once per chunk, which mla_prefill<keys = rows16> reads as
// they are (the two paths give the same bits).
//
//===----------------------------------------------------------------------===//
#include "codegen/mla_prefill_abi.h"
#include "runtime/base/numeric.h"
#include "runtime/base/parallel.h"
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/kv_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace glm::rt::twins {

namespace {

/// mp::scaleExp of mla_prefill.cuh: e = 15 - (the exponent of m) within
/// [lo, hi], 0 for m = 0.
int scaleExp(float m, int lo, int hi) {
  if (!(m > 0.0f))
    return 0;
  int k;
  std::frexp(m, &k);
  return std::clamp(15 - k, lo, hi);
}

/// n values times 2^e (scaleExp of their max |value|), rounded to fp16;
/// returns 2^-e.
float scaledHalves(float *v, int n, int lo, int hi) {
  float m = 0.0f;
  for (int c = 0; c < n; ++c)
    m = std::max(m, std::fabs(v[c]));
  const int e = scaleExp(m, lo, hi);
  const float up = std::ldexp(1.0f, e);
  for (int c = 0; c < n; ++c)
    v[c] = roundToHalf(v[c] * up);
  return std::ldexp(1.0f, -e);
}

/// Whether the launch reads mla_rows16's buffer (keys = rows16).
bool readsRows16(const Launch &l) {
  if (!l.templateArgs)
    return false;
  auto it = l.templateArgs->find("keys");
  return it != l.templateArgs->end() && it->second == "rows16";
}

/// Key row t of a rows16 buffer as fp32 (lat values) and its 2^-e; the
/// value row (kvr) and its 2^-e.
struct Rows16View {
  const unsigned char *b;
  int64_t maxCtx, kvr, dr;
  float key(int64_t t, float *out) const {
    const int64_t kh = glm::rows16::keyHalves(kvr, dr);
    const auto *h = reinterpret_cast<const uint16_t *>(b) + t * kh;
    for (int64_t c = 0; c < kvr + dr; ++c)
      out[c] = halfToFloat(h[c]);
    return reinterpret_cast<const float *>(
        b + glm::rows16::keyScaleOffset(maxCtx, kvr, dr))[t];
  }
  float value(int64_t t, float *out) const {
    const auto *h = reinterpret_cast<const uint16_t *>(
                        b + glm::rows16::valueOffset(maxCtx, kvr, dr)) +
                    t * kvr;
    for (int64_t c = 0; c < kvr; ++c)
      out[c] = halfToFloat(h[c]);
    return reinterpret_cast<const float *>(
        b + glm::rows16::valueScaleOffset(maxCtx, kvr, dr))[t];
  }
};

/// n values times 2^e (scaleExp within [lo, hi]) as fp16 bits, zero past
/// n up to `width`; returns 2^-e.
float scaledHalfBits(const float *v, int n, int width, int lo, int hi,
                     uint16_t *out) {
  float m = 0.0f;
  for (int c = 0; c < n; ++c)
    m = std::max(m, std::fabs(v[c]));
  const int e = scaleExp(m, lo, hi);
  const float up = std::ldexp(1.0f, e);
  for (int c = 0; c < width; ++c)
    out[c] = c < n ? floatToHalf(v[c] * up) : 0;
  return std::ldexp(1.0f, -e);
}

} // namespace

// mla_rows16(cache, seq, pos, R, maxCtx, kvr, dr, rows16, pages, pageShift);
// grid
// (ceil(maxCtx / 8)), 256 threads; template kv: the cache's form.
void mlaRows16Twin(const Launch &l) {
  const void *cache = l.ptr<const void>(0);
  const int *seq = l.ptr<const int>(1), *pos = l.ptr<const int>(2);
  const int R = l.i32(3), maxCtx = l.i32(4), kvr = l.i32(5), dr = l.i32(6);
  auto *b = l.ptr<unsigned char>(7);
  const int lat = kvr + dr, kvForm = l.kvForm();
  // keys = rows16: `cache` is mla_rows16's buffer of the chunk's slot.
  std::optional<Rows16View> rows16;
  if (readsRows16(l))
    rows16 =
        Rows16View{static_cast<const unsigned char *>(cache), maxCtx, kvr, dr};
  const int kh = int(glm::rows16::keyHalves(kvr, dr));
  // The rows the grid covers, up to the chunk's last position.
  const int64_t covered = int64_t(l.grid[0]) * glm::rows16::kRowsPerBlock;
  const int64_t last =
      std::min<int64_t>({R > 0 ? pos[R - 1] : -1, maxCtx - 1, covered - 1});
  auto *keys = reinterpret_cast<uint16_t *>(b);
  auto *vals = reinterpret_cast<uint16_t *>(
      b + glm::rows16::valueOffset(maxCtx, kvr, dr));
  auto *kscale = reinterpret_cast<float *>(
      b + glm::rows16::keyScaleOffset(maxCtx, kvr, dr));
  auto *vscale = reinterpret_cast<float *>(
      b + glm::rows16::valueScaleOffset(maxCtx, kvr, dr));
  const glm::kv::SlotRows slot = slotRowsOf(l, 8, seq[0], maxCtx);
  parallelFor(last + 1, 64, 0, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> raw(lat);
    for (int64_t t = t0; t < t1; ++t) {
      kvReadRow(cache, kvForm, slot(int(t)), lat, raw.data());
      kscale[t] = scaledHalfBits(raw.data(), lat, kh, glm::rows16::kKeyLo,
                                 glm::rows16::kKeyHi, keys + t * kh);
      vscale[t] = scaledHalfBits(raw.data(), kvr, kvr, glm::rows16::kValueLo,
                                 glm::rows16::kValueHi, vals + t * kvr);
    }
  });
}

// mla_prefill(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx,
// ctxAll, heads, nh, H, dn, dr, kvr, scale, pStride, pages, pageShift); grid
// (ceil(nh / heads per block), B); template kv: the cache's form; keys =
// rows16: `cache` is mla_rows16's buffer.
void mlaPrefillTwin(const Launch &l) {
  const float *qAll = l.ptr<const float>(0), *qabsAll = l.ptr<const float>(1);
  const void *cache = l.ptr<const void>(2);
  const int *seq = l.ptr<const int>(3), *selAll = l.ptr<const int>(4),
            *nselp = l.ptr<const int>(5);
  float *pAll = l.ptr<float>(6);
  const int maxCtx = l.i32(7);
  float *ctxAll = l.ptr<float>(8);
  const int *heads = l.ptr<const int>(9);
  const int nh = l.i32(10), H = l.i32(11), dn = l.i32(12), dr = l.i32(13),
            kvr = l.i32(14);
  const float fscale = float(l.args.at(15).f);
  const int pStride = l.i32(16); // pAll's row: the most keys a row selects
  const int lat = kvr + dr, kvForm = l.kvForm();
  // keys = rows16: `cache` is mla_rows16's buffer of the chunk's slot.
  std::optional<Rows16View> rows16;
  if (readsRows16(l))
    rows16 =
        Rows16View{static_cast<const unsigned char *>(cache), maxCtx, kvr, dr};
  const int64_t covered = std::min<int64_t>(
      nh, int64_t(l.grid[0]) * codegen::mlaPrefillHeadsPerBlock(l.block[0]));
  parallelFor(l.grid[1], 1, 0, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> raw, keys, vals, q(lat), s;
    std::vector<float> kscale, vscale;
    std::vector<double> ctx(kvr);
    for (int64_t b = b0; b < b1; ++b) {
      const int n = std::min(nselp[b], pStride);
      const glm::kv::SlotRows r0 = rows16 ? glm::kv::slotRows(nullptr, 0, 0, 0)
                                          : slotRowsOf(l, 17, seq[b], maxCtx);
      const int *sel = selAll + b * maxCtx;
      // Each key row as pass 1 scales it, its first kvr values as pass 2.
      raw.resize(lat);
      keys.assign(size_t(n) * lat, 0.0f);
      vals.assign(size_t(n) * kvr, 0.0f);
      kscale.resize(n);
      vscale.resize(n);
      for (int j = 0; j < n; ++j) {
        float *k = keys.data() + size_t(j) * lat,
              *v = vals.data() + size_t(j) * kvr;
        if (rows16) {
          kscale[j] = rows16->key(sel[j], k);
          vscale[j] = rows16->value(sel[j], v);
          continue;
        }
        kvReadRow(cache, kvForm, r0(sel[j]), lat, raw.data());
        std::copy(raw.begin(), raw.end(), k);
        std::copy(raw.begin(), raw.begin() + kvr, v);
        kscale[j] =
            scaledHalves(k, lat, glm::rows16::kKeyLo, glm::rows16::kKeyHi);
        vscale[j] =
            scaledHalves(v, kvr, glm::rows16::kValueLo, glm::rows16::kValueHi);
      }
      s.resize(n);
      for (int64_t hi = 0; hi < covered; ++hi) {
        const int64_t bh = b * H + heads[hi];
        for (int c = 0; c < kvr; ++c)
          q[c] = qabsAll[bh * kvr + c];
        for (int c = 0; c < dr; ++c)
          q[kvr + c] = qAll[bh * (dn + dr) + dn + c];
        const float qscale = scaledHalves(q.data(), lat, -126, 100);
        float *p = pAll + bh * pStride;
        float mx = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n; ++j) {
          const float *k = keys.data() + size_t(j) * lat;
          double d = 0.0;
          for (int c = 0; c < lat; ++c)
            d += double(q[c]) * double(k[c]);
          s[j] = float(d) * (qscale * kscale[j]) * fscale;
          p[j] = s[j];
          mx = std::max(mx, s[j]);
        }
        std::fill(ctx.begin(), ctx.end(), 0.0);
        double sum = 0.0;
        for (int j = 0; j < n; ++j) {
          const float pj = roundToHalf(std::exp(s[j] - mx) * vscale[j]);
          sum += double(pj / vscale[j]);
          const float *v = vals.data() + size_t(j) * kvr;
          for (int c = 0; c < kvr; ++c)
            ctx[c] += double(pj) * double(v[c]);
        }
        const float lsum = float(sum);
        const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        float *out = ctxAll + bh * kvr;
        for (int c = 0; c < kvr; ++c)
          out[c] = float(ctx[c]) * inv;
      }
    }
  });
}

} // namespace glm::rt::twins
