//===- twin_mla_prefill.cpp - twin of mla_prefill -------------------------===//
//
// The tensor-core attention of a prefill chunk (templates/mla_prefill.cuh):
// the same fp16 roundings of q, the key rows and the probabilities, the
// exact products summed in fp64 (the kernel sums them in fp32 on the tensor
// cores, so the two agree to fp32 rounding), the power-of-two row scales,
// the scores and probabilities as the kernel forms them in fp32.
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

} // namespace

// mla_prefill(qAll, qabsAll, cache, seq, selAll, nselp, pAll, maxCtx,
// ctxAll, heads, nh, H, dn, dr, kvr, scale); grid (ceil(nh / heads per
// block), B); template kv: the cache's form.
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
  const int lat = kvr + dr, kvForm = l.kvForm();
  const int64_t covered =
      std::min<int64_t>(nh, int64_t(l.grid[0]) *
                                codegen::mlaPrefillHeadsPerBlock(l.block[0]));
  parallelFor(l.grid[1], 1, 0, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> raw, keys, vals, q(lat), s;
    std::vector<float> kscale, vscale;
    std::vector<double> ctx(kvr);
    for (int64_t b = b0; b < b1; ++b) {
      const int n = nselp[b];
      const int64_t r0 = int64_t(seq[b]) * maxCtx;
      const int *sel = selAll + b * maxCtx;
      // Each key row as pass 1 scales it, its first kvr values as pass 2.
      raw.resize(lat);
      keys.assign(size_t(n) * lat, 0.0f);
      vals.assign(size_t(n) * kvr, 0.0f);
      kscale.resize(n);
      vscale.resize(n);
      for (int j = 0; j < n; ++j) {
        kvReadRow(cache, kvForm, r0 + sel[j], lat, raw.data());
        float *k = keys.data() + size_t(j) * lat, *v = vals.data() + size_t(j) * kvr;
        std::copy(raw.begin(), raw.end(), k);
        std::copy(raw.begin(), raw.begin() + kvr, v);
        kscale[j] = scaledHalves(k, lat, -126, 100);
        vscale[j] = scaledHalves(v, kvr, -15, 0);
      }
      s.resize(n);
      for (int64_t hi = 0; hi < covered; ++hi) {
        const int64_t bh = b * H + heads[hi];
        for (int c = 0; c < kvr; ++c)
          q[c] = qabsAll[bh * kvr + c];
        for (int c = 0; c < dr; ++c)
          q[kvr + c] = qAll[bh * (dn + dr) + dn + c];
        const float qscale = scaledHalves(q.data(), lat, -126, 100);
        float *p = pAll + bh * maxCtx;
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
