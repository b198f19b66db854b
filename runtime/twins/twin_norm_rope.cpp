//===- twin_norm_rope.cpp - twins of embedding, norms, RoPE and stores ----===//
//
// embed_tokens, rms_norm_rows, add_rms_norm, rope_rows, kv_store and
// index_key_store: see helper_twins.h for the arithmetic contract. The
// norms' fp64 sums follow the kernels' block reductions exactly; RoPE's
// angles use the host's pow/cos/sin (the CUDA ones may differ in the last
// bit of a double, rarely of the rounded float).
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/kv_rows.h"

#include <algorithm>
#include <cmath>

namespace glm::rt::twins {

namespace {

/// Elements a 1-D grid of this launch covers in x.
int64_t coveredX(const Launch &l) { return (int64_t)l.grid[0] * l.block[0]; }

/// hx::rmsNormRow (rms_norm_rows.cuh): thread t sums x[t + k*nt]^2 in
/// order (the register path adds 0.0 for the slots past n: no change), then
/// blockSumFixedD; every block gets the same inv, so the blocks' element
/// split does not matter. Reads the whole row before writing (y may alias
/// x when dr is null).
void rmsNormRow(const float *xr, const float *dr, float *xo, const float *w,
                float *yr, int n, double eps, int nt) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i)
    v[i] = dr ? xr[i] + dr[i] : xr[i];
  std::vector<double> ss(nt, 0.0);
  for (int t = 0; t < nt; ++t)
    for (int i = t; i < n; i += nt)
      ss[t] += (double)v[i] * (double)v[i];
  const double inv = 1.0 / std::sqrt(hx::blockSumFixedD(ss) / (double)n + eps);
  for (int i = 0; i < n; ++i) {
    yr[i] = (float)((double)w[i] * ((double)v[i] * inv));
    if (dr)
      xo[i] = v[i];
  }
}

} // namespace

// embed_tokens(table, dt, rowScale, tok, x, d); grid (ceil(d/T), B).
void embedTokensTwin(const Launch &l) {
  const void *table = l.ptr<const void>(0);
  const int dt = l.i32(1);
  const float *rowScale = l.ptr<const float>(2);
  const int *tok = l.ptr<const int>(3);
  float *x = l.ptr<float>(4);
  const int d = l.i32(5);
  const int64_t n = std::min<int64_t>(d, coveredX(l));
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int64_t t = tok[b];
    for (int64_t i = 0; i < n; ++i) {
      float v = hx::ldAny(table, t * d + i, dt);
      if (rowScale)
        v *= rowScale[t];
      x[(int64_t)b * d + i] = v;
    }
  }
}

// rms_norm_rows(x, w, y, n, eps, xs, ys); grid (G, B).
void rmsNormRowsTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0), *w = l.ptr<const float>(1);
  float *y = l.ptr<float>(2);
  const int n = l.i32(3), xs = l.i32(5), ys = l.i32(6);
  const double eps = l.args.at(4).f;
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    rmsNormRow(x + (int64_t)b * xs, nullptr, nullptr, w, y + (int64_t)b * ys, n,
               eps, (int)l.block[0]);
}

// add_rms_norm(x, delta, xout, w, y, n, eps); grid (G, B).
void addRmsNormTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0), *delta = l.ptr<const float>(1);
  float *xout = l.ptr<float>(2);
  const float *w = l.ptr<const float>(3);
  float *y = l.ptr<float>(4);
  const int n = l.i32(5);
  const double eps = l.args.at(6).f;
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int64_t o = (int64_t)b * n;
    rmsNormRow(x + o, delta + o, xout + o, w, y + o, n, eps, (int)l.block[0]);
  }
}

// rope_rows(x, dim, stride, rowStride, pos, theta); grid (vectors, B),
// thread i < dim/2 rotates pair i.
void ropeRowsTwin(const Launch &l) {
  float *x = l.ptr<float>(0);
  const int dim = l.i32(1), stride = l.i32(2), rowStride = l.i32(3);
  const int *pos = l.ptr<const int>(4);
  const double theta = l.args.at(5).f;
  const int pairs = std::min<int>(dim / 2, (int)l.block[0]);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (uint32_t v = 0; v < l.grid[0]; ++v) {
      float *p = x + (int64_t)b * rowStride + (int64_t)v * stride;
      for (int i = 0; i < pairs; ++i)
        hx::ropePair(p, i, dim, pos[b], theta);
    }
}

// kv_store(kva, normW, cache, seq, pos, kvr, dr, maxCtx, eps, theta, pages,
// pageShift);
// grid (1, B); template kv: the cache's form (kv_rows.h), the row computed
// in fp32 first.
void kvStoreTwin(const Launch &l) {
  const float *kva = l.ptr<const float>(0), *normW = l.ptr<const float>(1);
  void *cache = l.ptr<void>(2);
  const int *seq = l.ptr<const int>(3), *pos = l.ptr<const int>(4);
  const int kvr = l.i32(5), dr = l.i32(6), maxCtx = l.i32(7);
  const double eps = l.args.at(8).f, theta = l.args.at(9).f;
  const int nt = (int)l.block[0], lat = kvr + dr, kv = l.kvForm();
  std::vector<float> staged(lat);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const float *src = kva + (int64_t)b * lat;
    const int64_t r = slotRowsOf(l, 10, seq[b], maxCtx)(pos[b]);
    float *dst = kv == glm::kv::kF32 ? static_cast<float *>(cache) + r * lat
                                     : staged.data();
    std::vector<double> ss(nt, 0.0);
    for (int t = 0; t < nt; ++t)
      for (int i = t; i < kvr; i += nt)
        ss[t] += (double)src[i] * (double)src[i];
    const double inv = 1.0 / std::sqrt(hx::blockSumD(ss) / (double)kvr + eps);
    for (int i = 0; i < kvr; ++i)
      dst[i] = (float)((double)normW[i] * ((double)src[i] * inv));
    for (int i = 0; i < dr; ++i)
      dst[kvr + i] = src[kvr + i];
    for (int i = 0; i < dr / 2; ++i)
      hx::ropePair(dst + kvr, i, dr, pos[b], theta);
    if (kv != glm::kv::kF32)
      kvWriteRow(cache, kv, r, dst, lat);
  }
}

namespace hx {

void layerNormKey(const float *x, const float *w, const float *bias, float *dst,
                  int hd, int nt) {
  std::vector<double> part(nt, 0.0);
  for (int t = 0; t < nt; ++t)
    for (int i = t; i < hd; i += nt)
      part[t] += x[i];
  const double mean = blockSumD(part) / (double)hd;
  std::fill(part.begin(), part.end(), 0.0);
  for (int t = 0; t < nt; ++t)
    for (int i = t; i < hd; i += nt) {
      const double d = (double)x[i] - mean;
      part[t] += d * d;
    }
  const double inv = 1.0 / std::sqrt(blockSumD(part) / (double)hd + 1e-6);
  for (int i = 0; i < hd; ++i)
    dst[i] =
        (float)(((double)x[i] - mean) * inv * (double)w[i] + (double)bias[i]);
}

} // namespace hx

// index_key_store(k, w, bias, keys, seq, pos, hd, dr, maxCtx, theta, pages,
// pageShift);
// grid (1, B); template kv: the keys' form (kv_rows.h).
void indexKeyStoreTwin(const Launch &l) {
  const float *k = l.ptr<const float>(0), *w = l.ptr<const float>(1),
              *bias = l.ptr<const float>(2);
  void *keys = l.ptr<void>(3);
  const int *seq = l.ptr<const int>(4), *pos = l.ptr<const int>(5);
  const int hd = l.i32(6), dr = l.i32(7), maxCtx = l.i32(8);
  const double theta = l.args.at(9).f;
  const int nt = (int)l.block[0], kv = l.kvForm();
  std::vector<float> staged(hd);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int64_t r = slotRowsOf(l, 10, seq[b], maxCtx)(pos[b]);
    float *dst = kv == glm::kv::kF32 ? static_cast<float *>(keys) + r * hd
                                     : staged.data();
    hx::layerNormKey(k + (int64_t)b * hd, w, bias, dst, hd, nt);
    for (int i = 0; i < dr / 2; ++i)
      hx::ropePair(dst, i, dr, pos[b], theta);
    if (kv != glm::kv::kF32)
      kvWriteRow(keys, kv, r, dst, hd);
  }
}

} // namespace glm::rt::twins
