//===- twin_flash.cpp - twins of the GLM-5.3-Flash decode families --------===//
//
// mhc_mix, mhc_post, mhc_head, kda_decode and kpool_store
// (codegen/templates/*.cuh):
// each kernel's fp32 operations in its order, its fp64 block sums in the
// kernel's butterfly order, and the scalar math of flash_math.cuh itself
// (included here: exp, sigmoid, SiLU, the mHC map and the forget gate built
// from IEEE-exact operations). CUDA (--fmad=false) therefore gives the same
// bits as these twins; the one exception is kda_decode's softplus form (no
// lower bound, a libm log1p/exp in fp64), unused by the checkpoints.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"

#include "runtime/base/error.h"

#include "codegen/templates/flash_math.cuh"

#include <algorithm>
#include <vector>

namespace glm::rt::twins {

namespace {

/// fm::mhcCoefficients<S> for a runtime S (the template argument).
void mhcCoefficientsAny(int S, const float *mRaw, double inv,
                        const float *base, const float *scale, float hcEps,
                        int iters, float *coef) {
  switch (S) {
#define GLM_MHC_CASE(s)                                                        \
  case s:                                                                      \
    return fm::mhcCoefficients<s>(mRaw, inv, base, scale, hcEps, iters, coef);
    GLM_MHC_CASE(1)
    GLM_MHC_CASE(2)
    GLM_MHC_CASE(3)
    GLM_MHC_CASE(4)
#undef GLM_MHC_CASE
  default:
    fail("mhc twin: streams=", S, " is not 1..4 (codegen.cpp)");
  }
}

/// The columns [c0, c1) of block x of G over d (the kernels' split).
void blockColumns(int d, int G, int x, int &c0, int &c1) {
  const int cw = (d + G - 1) / G;
  c0 = std::min(d, x * cw);
  c1 = std::min(d, c0 + cw);
}

/// hx::warpSumF of lane partials: lane l adds x[i]·x[i] for i = l, l+32, ..
float warpSquares(const float *x, int n) {
  float lanes[32] = {};
  for (int l = 0; l < 32; ++l)
    for (int i = l; i < n; i += 32)
      lanes[l] = lanes[l] + x[i] * x[i];
  return hx::warpSumF(lanes);
}

} // namespace

// mhc_mix(X, mRaw, base, scale, wdt, ssParts, nParts, u, coef, d, rmsEps,
// hcEps, iters); grid (G, B), template streams S.
void mhcMixTwin(const Launch &l) {
  const float *X = l.ptr<const float>(0), *mRaw = l.ptr<const float>(1);
  const void *base = l.ptr<const void>(2), *scale = l.ptr<const void>(3);
  const int wdt = l.i32(4);
  const double *ssParts = l.ptr<const double>(5);
  const int nParts = l.i32(6);
  float *u = l.ptr<float>(7), *coef = l.ptr<float>(8);
  const int d = l.i32(9), iters = l.i32(12);
  const double rmsEps = l.args.at(10).f;
  const float hcEps = (float)l.args.at(11).f;
  const int S = l.targInt("streams"), M = (2 + S) * S, nt = (int)l.block[0];
  const int64_t n = (int64_t)S * d;
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const float *xb = X + (int64_t)b * n;
    double ss = 0;
    if (ssParts) {
      for (int p = 0; p < nParts; ++p)
        ss += ssParts[(int64_t)b * nParts + p];
    } else {
      std::vector<double> part(nt, 0.0);
      for (int t = 0; t < nt; ++t)
        for (int64_t i = t; i < n; i += nt) {
          const float v = xb[i];
          part[t] += (double)(v * v);
        }
      ss = hx::blockSumFixedD(part);
    }
    std::vector<float> bs(M), sc(3), co(M);
    for (int i = 0; i < M; ++i)
      bs[i] = hx::ldAny(base, i, wdt);
    for (int i = 0; i < 3; ++i)
      sc[i] = hx::ldAny(scale, i, wdt);
    const double inv = 1.0 / fm::sqrtD(ss / (double)n + rmsEps);
    mhcCoefficientsAny(S, mRaw + (int64_t)b * M, inv, bs.data(), sc.data(),
                       hcEps, iters, co.data());
    std::copy(co.begin(), co.end(), coef + (int64_t)b * M);
    for (int c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int j = 0; j < S; ++j)
        acc = acc + co[j] * xb[(int64_t)j * d + c];
      u[(int64_t)b * d + c] = acc;
    }
  }
}

// mhc_post(y, ys, X, coef, Xout, ssParts, d); grid (G, B).
void mhcPostTwin(const Launch &l) {
  const float *y = l.ptr<const float>(0);
  const int ys = l.i32(1);
  const float *X = l.ptr<const float>(2), *coef = l.ptr<const float>(3);
  float *Xout = l.ptr<float>(4);
  double *ssParts = l.ptr<double>(5);
  const int d = l.i32(6);
  const int S = l.targInt("streams"), M = (2 + S) * S, nt = (int)l.block[0];
  const int G = (int)l.grid[0];
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const float *co = coef + (int64_t)b * M;
    const int64_t rowOff = (int64_t)b * S * d;
    for (int x = 0; x < G; ++x) {
      int c0, c1;
      blockColumns(d, G, x, c0, c1);
      std::vector<double> part(nt, 0.0);
      for (int t = 0; t < nt; ++t)
        for (int c = c0 + t; c < c1; c += nt) {
          float xv[8];
          for (int j = 0; j < S; ++j)
            xv[j] = X ? X[rowOff + (int64_t)j * d + c] : 0.0f;
          const float yc = y[(int64_t)b * ys + c];
          for (int i = 0; i < S; ++i) {
            float acc = co[S + i] * yc;
            if (X)
              for (int j = 0; j < S; ++j)
                acc = acc + co[2 * S + j * S + i] * xv[j];
            Xout[rowOff + (int64_t)i * d + c] = acc;
            part[t] += (double)(acc * acc);
          }
        }
      if (ssParts)
        ssParts[(int64_t)b * G + x] = hx::blockSumFixedD(part);
    }
  }
}

// mhc_head(X, out, d); grid (ceil(d/T), B), template streams S.
void mhcHeadTwin(const Launch &l) {
  const float *X = l.ptr<const float>(0);
  float *out = l.ptr<float>(1);
  const int d = l.i32(2), S = l.targInt("streams");
  const int64_t m = std::min<int64_t>(d, (int64_t)l.grid[0] * l.block[0]);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (int64_t c = 0; c < m; ++c) {
      double acc = 0;
      for (int j = 0; j < S; ++j)
        acc += (double)X[((int64_t)b * S + j) * d + c];
      out[(int64_t)b * d + c] = (float)(acc / (double)S);
    }
}

// kda_decode(q, k, v, f, gate, ins, bRaw, bs, convQ, convK, convV, aLog,
// dtBias, oNorm, wdt, convState, state, seq, pos, out, h0, dk, dv, K, lower,
// eps); grid (n, B), templates rows, threads.
void kdaDecodeTwin(const Launch &l) {
  const float *q = l.ptr<const float>(0), *k = l.ptr<const float>(1),
              *v = l.ptr<const float>(2), *f = l.ptr<const float>(3),
              *gate = l.ptr<const float>(4);
  const int ins = l.i32(5);
  const float *bRaw = l.ptr<const float>(6);
  const int bs = l.i32(7);
  const void *convW[3] = {l.ptr<const void>(8), l.ptr<const void>(9),
                          l.ptr<const void>(10)};
  const void *aLog = l.ptr<const void>(11), *dtBias = l.ptr<const void>(12),
             *oNorm = l.ptr<const void>(13);
  const int wdt = l.i32(14);
  float *convState = l.ptr<float>(15), *state = l.ptr<float>(16);
  const int *seq = l.ptr<const int>(17), *pos = l.ptr<const int>(18);
  float *out = l.ptr<float>(19);
  const int h0 = l.i32(20), dk = l.i32(21), dv = l.i32(22), K = l.i32(23);
  const float lower = l.f32(24), eps = l.f32(25);
  const int ROWS = l.targInt("rows"), nt = (int)l.block[0];
  const int n = (int)l.grid[0];
  const int dvr = (dv + 31) & ~31, RG = nt / dvr;
  check(dk >= 1 && dk <= 256 && dv >= 1 && dv <= 256 && dvr <= nt &&
            (dk + RG - 1) / RG <= ROWS && K >= 1 && K <= 8,
        "kda_decode twin: dk ", dk, " dv ", dv, " K ", K,
        " do not fit the kernel's threads ", nt, " rows ", ROWS);
  const int K1 = K - 1;
  std::vector<float> qs(dk), ks(dk), vs(dv), dec(dk), os(dv), red(nt),
      s((size_t)nt * ROWS);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (int hl = 0; hl < n; ++hl) {
      const int h = h0 + hl;
      const bool fresh = pos && pos[b] == 0;
      const int64_t slot = seq[b], in0 = (int64_t)b * ins;
      float *cs = convState + slot * (int64_t)n * (2 * dk + dv) * K1;
      for (int ch = 0; ch < 2 * dk + dv; ++ch) {
        const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
        const int a = ch - x * dk, width = x == 2 ? dv : dk;
        const float *src = x == 0 ? q : x == 1 ? k : v;
        const float xin = src[in0 + (int64_t)hl * width + a];
        const int64_t tapRow = ((int64_t)h * width + a) * K;
        float *st = cs + ((int64_t)x * n * dk + (int64_t)hl * width + a) * K1;
        float acc = hx::ldAny(convW[x], tapRow + K1, wdt) * xin;
        for (int j = 0; j < K1; ++j)
          acc = acc +
                hx::ldAny(convW[x], tapRow + j, wdt) * (fresh ? 0.0f : st[j]);
        for (int j = 0; j + 1 < K1; ++j)
          st[j] = fresh ? 0.0f : st[j + 1];
        if (K1 > 0)
          st[K1 - 1] = xin;
        (x == 0 ? qs : x == 1 ? ks : vs)[a] = fm::siluF(acc);
      }
      const float rate = fm::expF(hx::ldAny(aLog, h, wdt));
      for (int a = 0; a < dk; ++a) {
        const float xg = f[in0 + (int64_t)hl * dk + a] +
                         hx::ldAny(dtBias, (int64_t)h * dk + a, wdt);
        dec[a] = fm::kdaDecay(xg, rate, lower);
      }
      const float invQ = 1.0f / fm::sqrtF(warpSquares(qs.data(), dk) + 1e-6f);
      const float invK = 1.0f / fm::sqrtF(warpSquares(ks.data(), dk) + 1e-6f);
      const float beta = fm::sigmoidF(bRaw[(int64_t)b * bs + hl]);
      const float qScale = 1.0f / fm::sqrtF((float)dk);
      for (int a = 0; a < dk; ++a) {
        qs[a] = (qs[a] * invQ) * qScale;
        ks[a] = ks[a] * invK;
      }
      float *S = state + ((slot * n + hl) * (int64_t)dk) * dv;
      auto active = [&](int t) { return t / dvr < RG && t % dvr < dv; };
      for (int t = 0; t < nt; ++t) {
        const int r = t / dvr, c = t % dvr;
        float pm = 0.0f;
        for (int i = 0; i < ROWS && active(t); ++i) {
          const int a = r + i * RG;
          if (a >= dk)
            continue;
          float &si = s[(size_t)t * ROWS + i];
          si = (fresh ? 0.0f : S[(int64_t)a * dv + c]) * dec[a];
          pm = pm + si * ks[a];
        }
        red[t] = pm;
      }
      std::vector<float> delta(nt, 0.0f);
      for (int t = 0; t < nt; ++t)
        if (active(t)) {
          const int c = t % dvr;
          float mem = 0.0f;
          for (int g = 0; g < RG; ++g)
            mem = mem + red[g * dvr + c];
          delta[t] = beta * (vs[c] - mem);
        }
      for (int t = 0; t < nt; ++t) {
        const int r = t / dvr, c = t % dvr;
        float po = 0.0f;
        for (int i = 0; i < ROWS && active(t); ++i) {
          const int a = r + i * RG;
          if (a >= dk)
            continue;
          float &si = s[(size_t)t * ROWS + i];
          si = si + ks[a] * delta[t];
          S[(int64_t)a * dv + c] = si;
          po = po + si * qs[a];
        }
        red[t] = po;
      }
      for (int c = 0; c < dv; ++c) {
        float o = 0.0f;
        for (int g = 0; g < RG; ++g)
          o = o + red[g * dvr + c];
        os[c] = o;
      }
      const float inv =
          1.0f / fm::sqrtF(warpSquares(os.data(), dv) / (float)dv + eps);
      for (int j = 0; j < dv; ++j) {
        const float gv = gate[in0 + (int64_t)hl * dv + j];
        out[((int64_t)b * n + hl) * dv + j] =
            (hx::ldAny(oNorm, j, wdt) * (os[j] * inv)) * fm::sigmoidF(gv);
      }
    }
}

// kpool_store(k, w, bias, gateIn, gs, ape, adt, ring, poolKeys, seq, pos,
// hd, P, maxCtx); grid (1, B).
void kpoolStoreTwin(const Launch &l) {
  const float *k = l.ptr<const float>(0), *w = l.ptr<const float>(1),
              *bias = l.ptr<const float>(2), *gateIn = l.ptr<const float>(3);
  const int gs = l.i32(4);
  const void *ape = l.ptr<const void>(5);
  const int adt = l.i32(6);
  float *ring = l.ptr<float>(7), *poolKeys = l.ptr<float>(8);
  const int *seq = l.ptr<const int>(9), *pos = l.ptr<const int>(10);
  const int hd = l.i32(11), P = l.i32(12), maxCtx = l.i32(13);
  const int nt = (int)l.block[0];
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const int p0 = pos[b], j0 = p0 % P;
    const int64_t slot = seq[b];
    float *rk = ring + slot * 2 * P * hd, *rg = rk + (int64_t)P * hd;
    hx::layerNormKey(k + (int64_t)b * hd, w, bias, rk + (int64_t)j0 * hd, hd,
                     nt);
    for (int c = 0; c < hd; ++c)
      rg[(int64_t)j0 * hd + c] = gateIn[(int64_t)b * gs + c];
    if (j0 != P - 1)
      continue;
    float *dst = poolKeys + (slot * (maxCtx / P) + p0 / P) * hd;
    for (int c = 0; c < hd; ++c) {
      float most = -3.402823466e38f;
      for (int j = 0; j < P; ++j) {
        const float x = rg[j * hd + c] + hx::ldAny(ape, j * hd + c, adt);
        most = x > most ? x : most;
      }
      float sum = 0.0f, acc = 0.0f;
      for (int j = 0; j < P; ++j) {
        const float e =
            fm::expF(rg[j * hd + c] + hx::ldAny(ape, j * hd + c, adt) - most);
        sum = sum + e;
        acc = acc + e * rk[j * hd + c];
      }
      dst[c] = acc / sum;
    }
  }
}

} // namespace glm::rt::twins
