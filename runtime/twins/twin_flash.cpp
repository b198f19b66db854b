//===- twin_flash.cpp - twins of the GLM-5.3-Flash decode families --------===//
//
// mhc_mix, mhc_post, mhc_head, kda_decode, kpool_store and the KDA prefill
// families kda_prep, kda_chunk, kda_gnorm (codegen/templates/*.cuh):
// each kernel's fp32 operations in its order, its fp64 block sums in the
// kernel's butterfly order, and the scalar math of flash_math.cuh itself
// (included here: exp, sigmoid, SiLU, the mHC map and the forget gate built
// from IEEE-exact operations). CUDA (--fmad=false) therefore gives the same
// bits as these twins; the one exception is kda_decode's softplus form (no
// lower bound, a libm log1p/exp in fp64), unused by the checkpoints.
// kda_chunk runs on tensor cores: its twin repeats every fp32 step outside
// the MMAs, rounds each MMA operand as cvt.rna.tf32 does (3xTF32: the hi
// and lo parts) and sums the exact products in fp64, where the kernel's
// MMAs sum in fp32: CUDA is held to it within 1e-4 (tf32x3) and 2e-3
// (tf32: helper_twins.h says why).
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/kv_rows.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/error.h"
#include "runtime/base/parallel.h"

#include "codegen/templates/flash_math.cuh"

#include <algorithm>
#include <cstring>
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
// hd, P, maxCtx); grid (1, B); template kv: the pooled keys' form
// (kv_rows.h; the ring stays fp32).
void kpoolStoreTwin(const Launch &l) {
  const float *k = l.ptr<const float>(0), *w = l.ptr<const float>(1),
              *bias = l.ptr<const float>(2), *gateIn = l.ptr<const float>(3);
  const int gs = l.i32(4);
  const void *ape = l.ptr<const void>(5);
  const int adt = l.i32(6);
  float *ring = l.ptr<float>(7);
  void *poolKeys = l.ptr<void>(8);
  const int *seq = l.ptr<const int>(9), *pos = l.ptr<const int>(10);
  const int hd = l.i32(11), P = l.i32(12), maxCtx = l.i32(13);
  const int nt = (int)l.block[0], kv = l.kvForm();
  std::vector<float> staged(hd);
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
    const int64_t row = slot * (maxCtx / P) + p0 / P;
    float *dst = kv == glm::kv::kF32 ? static_cast<float *>(poolKeys) + row * hd
                                     : staged.data();
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
    if (kv != glm::kv::kF32)
      kvWriteRow(poolKeys, kv, row, dst, hd);
  }
}

// kda_prep(q, k, v, f, ins, bRaw, bs, convQ, convK, convV, aLog, dtBias,
// wdt, convState, seq, pos, qo, ko, vo, go, betaO, T, h0, dk, dv, K,
// lower); grid (n, ceil(T/8)): kda_decode's per-token half, written out.
void kdaPrepTwin(const Launch &l) {
  const float *q = l.ptr<const float>(0), *k = l.ptr<const float>(1),
              *v = l.ptr<const float>(2), *f = l.ptr<const float>(3);
  const int ins = l.i32(4);
  const float *bRaw = l.ptr<const float>(5);
  const int bs = l.i32(6);
  const void *convW[3] = {l.ptr<const void>(7), l.ptr<const void>(8),
                          l.ptr<const void>(9)};
  const void *aLog = l.ptr<const void>(10), *dtBias = l.ptr<const void>(11);
  const int wdt = l.i32(12);
  float *convState = l.ptr<float>(13);
  const int *seq = l.ptr<const int>(14), *pos = l.ptr<const int>(15);
  float *qo = l.ptr<float>(16), *ko = l.ptr<float>(17), *vo = l.ptr<float>(18),
        *go = l.ptr<float>(19), *betaO = l.ptr<float>(20);
  const int T = l.i32(21), h0 = l.i32(22), dk = l.i32(23), dv = l.i32(24),
            K = l.i32(25);
  const float lower = l.f32(26);
  const int n = (int)l.grid[0];
  check(dk >= 1 && dk <= 256 && dv >= 1 && dv <= 256 && K >= 1 && K <= 8,
        "kda_prep twin: dk ", dk, " dv ", dv, " K ", K, " out of range");
  // Tokens the grid covers (8 a block).
  const int Tc = std::min<int64_t>(T, (int64_t)l.grid[1] * 8);
  const bool fresh = pos && pos[0] == 0;
  const int64_t slot = seq[0];
  const int K1 = K - 1;
  const int64_t ldk = (int64_t)n * dk, ldv = (int64_t)n * dv;
  float *cs = convState + slot * (int64_t)n * (2 * dk + dv) * K1;
  std::vector<float> qs(dk), ks(dk), vs(dv);
  for (int hl = 0; hl < n; ++hl) {
    const int h = h0 + hl;
    const float rate = fm::expF(hx::ldAny(aLog, h, wdt));
    const float qScale = 1.0f / fm::sqrtF((float)dk);
    for (int tt = 0; tt < Tc; ++tt) {
      const int64_t in0 = (int64_t)tt * ins;
      for (int ch = 0; ch < 2 * dk + dv; ++ch) {
        const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
        const int a = ch - x * dk, width = x == 2 ? dv : dk;
        const float *src = x == 0 ? q : x == 1 ? k : v;
        const int64_t col = (int64_t)hl * width + a;
        const int64_t tapRow = ((int64_t)h * width + a) * K;
        const float *st = cs + ((int64_t)x * n * dk + col) * K1;
        float acc = hx::ldAny(convW[x], tapRow + K1, wdt) * src[in0 + col];
        for (int j = 0; j < K1; ++j) {
          const int back = tt - K1 + j;
          const float xj = back >= 0 ? src[(int64_t)back * ins + col]
                           : fresh   ? 0.0f
                                     : st[back + K1];
          acc = acc + hx::ldAny(convW[x], tapRow + j, wdt) * xj;
        }
        (x == 0 ? qs : x == 1 ? ks : vs)[a] = fm::siluF(acc);
      }
      for (int a = 0; a < dk; ++a) {
        const float xg = f[in0 + (int64_t)hl * dk + a] +
                         hx::ldAny(dtBias, (int64_t)h * dk + a, wdt);
        go[tt * ldk + (int64_t)hl * dk + a] = fm::kdaLogGate(xg, rate, lower);
      }
      const float invQ = 1.0f / fm::sqrtF(warpSquares(qs.data(), dk) + 1e-6f);
      const float invK = 1.0f / fm::sqrtF(warpSquares(ks.data(), dk) + 1e-6f);
      for (int a = 0; a < dk; ++a) {
        qo[tt * ldk + (int64_t)hl * dk + a] = (qs[a] * invQ) * qScale;
        ko[tt * ldk + (int64_t)hl * dk + a] = ks[a] * invK;
      }
      for (int c = 0; c < dv; ++c)
        vo[tt * ldv + (int64_t)hl * dv + c] = vs[c];
      betaO[(int64_t)tt * n + hl] = fm::sigmoidF(bRaw[(int64_t)tt * bs + hl]);
    }
    if (l.grid[1] == 0 || K1 == 0)
      continue;
    for (int ch = 0; ch < 2 * dk + dv; ++ch) {
      const int x = ch < dk ? 0 : ch < 2 * dk ? 1 : 2;
      const int a = ch - x * dk, width = x == 2 ? dv : dk;
      const float *src = x == 0 ? q : x == 1 ? k : v;
      const int64_t col = (int64_t)hl * width + a;
      float *st = cs + ((int64_t)x * n * dk + col) * K1;
      float keep[8];
      for (int j = 0; j < K1; ++j) {
        const int back = T - K1 + j;
        keep[j] = back >= 0 ? src[(int64_t)back * ins + col]
                  : fresh   ? 0.0f
                            : st[back + K1];
      }
      for (int j = 0; j < K1; ++j)
        st[j] = keep[j];
    }
  }
}

namespace {

/// MMA operands as the kernel feeds them: hi = tf32(x) and, for 3xTF32,
/// lo = tf32(x − hi), of a rows x cols panel read from x with row stride
/// `rs` and column stride `cs` (so a panel can be taken transposed).
struct Panel {
  int cols = 0;
  std::vector<float> hi, lo;
  void take(const float *x, int rows, int cols_, int64_t rs, int64_t cs,
            int split) {
    cols = cols_;
    hi.resize((size_t)rows * cols);
    lo.assign(split == 3 ? hi.size() : 0, 0.0f);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const float v = x[r * rs + c * cs], h = tf32(v);
        hi[(size_t)r * cols + c] = h;
        if (split == 3)
          lo[(size_t)r * cols + c] = tf32(v - h);
      }
  }
};

/// Row ra of A times row rb of B over their n columns, as the MMAs take
/// it, exact products summed in fp64: hi·hi (+ hi·lo + lo·hi for 3xTF32).
double mmaDot(const Panel &A, int ra, const Panel &B, int rb, int n) {
  const float *ah = &A.hi[(size_t)ra * A.cols],
              *bh = &B.hi[(size_t)rb * B.cols];
  double acc = 0;
  if (A.lo.empty()) {
    for (int i = 0; i < n; ++i)
      acc += (double)ah[i] * bh[i];
    return acc;
  }
  const float *al = &A.lo[(size_t)ra * A.cols],
              *bl = &B.lo[(size_t)rb * B.cols];
  for (int i = 0; i < n; ++i)
    acc +=
        (double)ah[i] * bh[i] + ((double)ah[i] * bl[i] + (double)al[i] * bh[i]);
  return acc;
}

} // namespace

// kda_chunk(q, k, v, g, beta, gate, gs, oNorm, wdt, state, seq, pos, out,
// T, dk, dv, eps, os); grid (n, V), templates chunk, mma, vsplit V, threads.
// The v columns of a head are independent, so V only changes what is
// written: with V > 1 the un-normalised O. Heads are independent: one
// thread each.
void kdaChunkTwin(const Launch &l) {
  const float *q = l.ptr<const float>(0), *k = l.ptr<const float>(1),
              *v = l.ptr<const float>(2), *g = l.ptr<const float>(3),
              *beta = l.ptr<const float>(4), *gate = l.ptr<const float>(5);
  const int gs = l.i32(6);
  const void *oNorm = l.ptr<const void>(7);
  const int wdt = l.i32(8);
  float *state = l.ptr<float>(9);
  const int *seq = l.ptr<const int>(10), *pos = l.ptr<const int>(11);
  float *out = l.ptr<float>(12);
  const int T = l.i32(13), dk = l.i32(14), dv = l.i32(15);
  const float eps = l.f32(16);
  const int64_t os = l.i32(17); // out's row stride
  const int C = l.targInt("chunk"), nt = (int)l.block[0];
  const int split = l.targ("mma") == "tf32x3" ? 3 : 1;
  const int V = l.targIntOr("vsplit", 1), n = (int)l.grid[0];
  check((C == 16 || C == 32) && (V == 1 || V == 2 || V == 4) &&
            (int)l.grid[1] == V && dk >= 8 && dk <= 128 && dk % 8 == 0 &&
            dv >= 16 * V && dv % (16 * V) == 0 && dv / V <= nt / 2 &&
            l.smemBytes >=
                4u * (uint32_t)fm::kdaChunkSmemFloats(C, dk, dv / V),
        "kda_chunk twin: chunk ", C, " vsplit ", V, " dk ", dk, " dv ", dv,
        " threads ", nt, " smem ", l.smemBytes, " do not fit the kernel");
  const bool fresh = pos && pos[0] == 0;
  const int64_t slot = seq[0];
  const int64_t ldk = (int64_t)n * dk, ldv = (int64_t)n * dv;
  parallelFor(n, 1, 0, [&](int64_t hb, int64_t he, int) {
    std::vector<float> gam((size_t)C * dk), ref(dk), en(dk), bet(C);
    std::vector<float> X0((size_t)C * dk), X1((size_t)C * dk),
        X2((size_t)C * dk), D((size_t)C * dv), Akk((size_t)C * C),
        Aqk((size_t)C * C), O((size_t)C * dv);
    std::vector<double> Os((size_t)C * dv);
    Panel p0, p1, p2, pS, pD, pA;
    for (int64_t hl = hb; hl < he; ++hl) {
      float *S = state + ((slot * n + hl) * (int64_t)dk) * dv; // (dk, dv)
      std::vector<float> s((size_t)dk * dv, 0.0f);
      if (!fresh)
        std::copy(S, S + (size_t)dk * dv, s.begin());
      for (int t0 = 0; t0 < T; t0 += C) {
        const int m = std::min(C, T - t0);
        auto at = [&](int i, int c) { return (t0 + i) * ldk + hl * dk + c; };
        for (int c = 0; c < dk; ++c) {
          float acc = 0.0f;
          for (int i = 0; i < C; ++i) {
            if (i < m)
              acc = acc + g[at(i, c)];
            gam[(size_t)i * dk + c] = acc;
          }
          ref[c] = gam[(size_t)(C / 2 - 1) * dk + c];
        }
        for (int i = 0; i < C; ++i)
          for (int c = 0; c < dk; ++c) {
            const size_t x = (size_t)i * dk + c;
            X0[x] = X1[x] = X2[x] = 0.0f;
            if (i >= m)
              continue;
            const float up = fm::expF(gam[x] - ref[c]),
                        dn = fm::expF(ref[c] - gam[x]);
            X0[x] = q[at(i, c)] * up;
            X1[x] = k[at(i, c)] * up;
            X2[x] = k[at(i, c)] * dn;
          }
        for (int i = 0; i < C; ++i)
          bet[i] = i < m ? beta[(int64_t)(t0 + i) * n + hl] : 0.0f;
        // Akk, Aqk: rows of (k|q) e^{Γ−r} against rows of k e^{r−Γ}.
        p0.take(X0.data(), C, dk, dk, 1, split);
        p1.take(X1.data(), C, dk, dk, 1, split);
        p2.take(X2.data(), C, dk, dk, 1, split);
        for (int tt = 0; tt < C; ++tt)
          for (int ii = 0; ii < C; ++ii) {
            const double akk = mmaDot(p1, tt, p2, ii, dk),
                         aqk = mmaDot(p0, tt, p2, ii, dk);
            Akk[(size_t)tt * C + ii] = ii < tt ? bet[tt] * (float)akk : 0.0f;
            Aqk[(size_t)tt * C + ii] = ii <= tt ? (float)aqk : 0.0f;
          }
        for (int c = 0; c < dk; ++c) {
          const float last = gam[(size_t)(C - 1) * dk + c];
          const float er = fm::expF(ref[c]), el = fm::expF(last - ref[c]);
          for (int i = 0; i < C; ++i) {
            const size_t x = (size_t)i * dk + c;
            X0[x] = X0[x] * er;
            X1[x] = X1[x] * er;
            X2[x] = X2[x] * el;
          }
          en[c] = fm::expF(last);
        }
        // W and the state part of O: Sᵀ rows (v columns) against rows of
        // (k|q) e^{Γ}.
        pS.take(s.data(), dv, dk, 1, dv, split);
        p0.take(X0.data(), C, dk, dk, 1, split);
        p1.take(X1.data(), C, dk, dk, 1, split);
        for (int tt = 0; tt < C; ++tt)
          for (int c = 0; c < dv; ++c) {
            const double w = mmaDot(pS, c, p1, tt, dk);
            Os[(size_t)tt * dv + c] = mmaDot(pS, c, p0, tt, dk);
            D[(size_t)tt * dv + c] =
                tt < m ? bet[tt] * (v[(t0 + tt) * ldv + hl * dv + c] - (float)w)
                       : 0.0f;
          }
        for (int c = 0; c < dv; ++c)
          for (int tt = 1; tt < C; ++tt) {
            float x = D[(size_t)tt * dv + c];
            for (int i = 0; i < tt; ++i)
              x = x - Akk[(size_t)tt * C + i] * D[(size_t)i * dv + c];
            D[(size_t)tt * dv + c] = x;
          }
        // O += δ·Aqkᵀ: δᵀ rows (v columns) against Aqk rows; the state:
        // S·e^{Γm} + δᵀ rows against columns of k e^{Γm−Γ}.
        pD.take(D.data(), dv, C, 1, dv, split);
        pA.take(Aqk.data(), C, C, C, 1, split);
        p2.take(X2.data(), dk, C, 1, dk, split);
        for (int tt = 0; tt < C; ++tt)
          for (int c = 0; c < dv; ++c)
            O[(size_t)tt * dv + c] =
                (float)(Os[(size_t)tt * dv + c] + mmaDot(pD, c, pA, tt, C));
        for (int a = 0; a < dk; ++a)
          for (int c = 0; c < dv; ++c) {
            const double acc = (double)(s[(size_t)a * dv + c] * en[a]);
            s[(size_t)a * dv + c] = (float)(acc + mmaDot(pD, c, p2, a, C));
          }
        for (int tt = 0; tt < m && V > 1; ++tt)
          std::copy(O.begin() + (size_t)tt * dv, O.begin() + (size_t)(tt + 1) * dv,
                    out + (t0 + tt) * os + hl * dv);
        for (int tt = 0; tt < m && V == 1; ++tt) {
          const float *o = O.data() + (size_t)tt * dv;
          const float inv =
              1.0f / fm::sqrtF(warpSquares(o, dv) / (float)dv + eps);
          const int64_t row = t0 + tt;
          for (int c = 0; c < dv; ++c) {
            const float gv = gate[row * gs + hl * dv + c];
            out[row * os + hl * dv + c] =
                (hx::ldAny(oNorm, c, wdt) * (o[c] * inv)) * fm::sigmoidF(gv);
          }
        }
      }
      std::copy(s.begin(), s.end(), S);
    }
  });
}

// kda_gnorm(o, gate, gs, oNorm, wdt, out, n, dv, eps); grid (ceil(n /
// warps), rows): kda_chunk's step 5 (kda_decode's gated norm) on each row.
void kdaGnormTwin(const Launch &l) {
  const float *o = l.ptr<const float>(0), *gate = l.ptr<const float>(1);
  const int gs = l.i32(2);
  const void *oNorm = l.ptr<const void>(3);
  const int wdt = l.i32(4);
  float *out = l.ptr<float>(5);
  const int n = l.i32(6), dv = l.i32(7);
  const float eps = l.f32(8);
  const int64_t heads =
      std::min<int64_t>(n, (int64_t)l.grid[0] * (l.block[0] / 32));
  std::vector<float> x(dv);
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (int64_t hl = 0; hl < heads; ++hl) {
      const int64_t at = ((int64_t)b * n + hl) * dv;
      std::copy(o + at, o + at + dv, x.begin()); // o may be out
      const float inv =
          1.0f / fm::sqrtF(warpSquares(x.data(), dv) / (float)dv + eps);
      for (int c = 0; c < dv; ++c) {
        const float gv = gate[(int64_t)b * gs + hl * dv + c];
        out[at + c] =
            (hx::ldAny(oNorm, c, wdt) * (x[c] * inv)) * fm::sigmoidF(gv);
      }
    }
}

} // namespace glm::rt::twins
