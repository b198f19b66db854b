//===- twin_moe.cpp - twins of routing, MLP and expert glue families ------===//
//
// gemv_any, reduce_units, sum_parts, route, swiglu, hf_expert_act,
// hf_expert_down, exl3_expert_in and moe_exl3_in. The fp64 sums and the
// warp butterflies follow the kernels; route's sigmoid, swiglu's and
// hf_expert_act's SiLU call exp (fp64), whose last bit may differ from
// CUDA's.
//
//===----------------------------------------------------------------------===//
#include "runtime/twins/helper_twins.h"
#include "runtime/twins/twin_common.h"

#include "runtime/base/parallel.h"

#include <algorithm>
#include <cmath>

namespace glm::rt::twins {

namespace {
int64_t coveredX(const Launch &l) { return (int64_t)l.grid[0] * l.block[0]; }
} // namespace

// gemv_any(x, xs, w, dt, scale, sk, y, ys, in, out); grid
// (ceil(out / warps), B), a warp per row.
void gemvAnyTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0);
  const int xs = l.i32(1);
  const void *w = l.ptr<const void>(2);
  const int dt = l.i32(3);
  const void *scale = l.ptr<const void>(4);
  const int sk = l.i32(5);
  float *y = l.ptr<float>(6);
  const int ys = l.i32(7), in = l.i32(8), out = l.i32(9);
  const int sum = l.sumMode();
  const int64_t rows =
      std::min<int64_t>(out, (int64_t)l.grid[0] * (l.block[0] / 32));
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const float *xb = x + (int64_t)b * xs;
    parallelFor(rows, 64, 0, [&](int64_t o0, int64_t o1, int) {
      for (int64_t o = o0; o < o1; ++o) {
        if (sum) { // each product to fixed point, summed exactly
          long long s = 0;
          for (int i = 0; i < in; ++i)
            s += toFixed(hx::ldWT(w, dt, scale, sk, o, i, in) * xb[i]);
          storeFixedSum(sum, y, (int64_t)b * ys + o, s, false);
          continue;
        }
        float acc[32];
        for (int lane = 0; lane < 32; ++lane) {
          acc[lane] = 0.0f;
          for (int i = lane; i < in; i += 32)
            acc[lane] += hx::ldWT(w, dt, scale, sk, o, i, in) * xb[i];
        }
        y[(int64_t)b * ys + o] = hx::warpSumF(acc);
      }
    });
  }
}

// reduce_units(part, units, n, out); grid (ceil(n/T), B).
void reduceUnitsTwin(const Launch &l) {
  const double *part = l.ptr<const double>(0);
  const int units = l.i32(1), n = l.i32(2);
  float *out = l.ptr<float>(3);
  const int64_t m = std::min<int64_t>(n, coveredX(l));
  const int sum = l.sumMode();
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (int64_t i = 0; i < m; ++i) {
      if (sum) {
        long long s = 0;
        for (int u = 0; u < units; ++u)
          s += toFixed(part[((int64_t)b * units + u) * n + i]);
        storeFixedSum(sum, out, (int64_t)b * n + i, s, false);
        continue;
      }
      double s = 0;
      for (int u = 0; u < units; ++u)
        s += part[((int64_t)b * units + u) * n + i];
      out[(int64_t)b * n + i] = (float)s;
    }
}

// sum_parts(parts, np, n, out); grid (ceil(n/T)).
void sumPartsTwin(const Launch &l) {
  const float *parts = l.ptr<const float>(0);
  const int np = l.i32(1), n = l.i32(2);
  float *out = l.ptr<float>(3);
  const int64_t m = std::min<int64_t>(n, coveredX(l));
  for (int64_t i = 0; i < m; ++i) {
    float s = 0.0f;
    for (int p = 0; p < np; ++p)
      s += parts[(int64_t)p * n + i];
    out[i] = s;
  }
}

// route(logitsAll, bias, E, k, normalize, scale, expertsAll, weightsAll);
// grid (1, B): the k best of sigmoid + bias (ties: lower id), by id.
void routeTwin(const Launch &l) {
  const float *logitsAll = l.ptr<const float>(0), *bias = l.ptr<const float>(1);
  const int E = l.i32(2), kk0 = l.i32(3), normalize = l.i32(4);
  const double scale = l.args.at(5).f;
  int *expertsAll = l.ptr<int>(6);
  float *weightsAll = l.ptr<float>(7);
  const int k = std::min(kk0, E);
  std::vector<double> s(E), ch(E);
  for (uint32_t b = 0; b < l.grid[1]; ++b) {
    const float *logits = logitsAll + (int64_t)b * E;
    for (int t = 0; t < E; ++t) {
      s[t] = 1.0 / (1.0 + std::exp(-(double)logits[t]));
      ch[t] = s[t] + (bias ? (double)bias[t] : 0.0);
      if (std::isnan(ch[t])) // route.cuh: a NaN score ranks last
        ch[t] = -1e300;
    }
    std::vector<int> picks; // ascending id
    for (int t = 0; t < E; ++t) {
      int before = 0;
      for (int e = 0; e < E; ++e)
        before += ch[e] > ch[t] || (ch[e] == ch[t] && e < t);
      if (before < k)
        picks.push_back(t);
    }
    double sum = 0;
    for (int kk = 0; kk < k; ++kk)
      sum += s[picks[kk]];
    for (int kk = 0; kk < kk0; ++kk) {
      const bool ok = kk < k;
      const int e = ok ? picks[kk] : 0;
      expertsAll[b * kk0 + kk] = ok ? e : -1;
      weightsAll[b * kk0 + kk] =
          ok ? (float)((normalize ? s[e] / (sum + 1e-20) : s[e]) * scale)
             : 0.0f;
    }
  }
}

// swiglu(g, u, gs, act, n, own, limit); grid (ceil(n/T), B).
void swigluTwin(const Launch &l) {
  const float *g = l.ptr<const float>(0), *u = l.ptr<const float>(1);
  const int gs = l.i32(2);
  float *act = l.ptr<float>(3);
  const int n = l.i32(4);
  const uint8_t *own = l.ptr<const uint8_t>(5);
  const double limit = l.args.at(6).f;
  const int64_t m = std::min<int64_t>(n, coveredX(l));
  for (uint32_t b = 0; b < l.grid[1]; ++b)
    for (int64_t j = 0; j < m; ++j) {
      float v = 0.0f;
      if (!own || own[j >> 7]) {
        double gg = g[(int64_t)b * gs + j], uu = u[(int64_t)b * gs + j];
        if (limit > 0) {
          gg = std::min(gg, limit);
          uu = std::clamp(uu, -limit, limit);
        }
        v = (float)(gg / (1.0 + std::exp(-gg)) * uu);
      }
      act[(int64_t)b * n + j] = v;
    }
}

// hf_expert_act(gate, up, dt, x, ids, stride, I, d, own, halves, ownE, act,
// limit);
// grid (ceil(I/T), U, B).
void hfExpertActTwin(const Launch &l) {
  const void *gate = l.ptr<const void>(0), *up = l.ptr<const void>(1);
  const int dt = l.i32(2);
  const float *x = l.ptr<const float>(3);
  const int *ids = l.ptr<const int>(4);
  const int64_t stride = l.i64(5);
  const int I = l.i32(6), d = l.i32(7);
  const uint8_t *own = l.ptr<const uint8_t>(8);
  const int halves = l.i32(9), ownE = l.i32(10);
  double *act = l.ptr<double>(11);
  const double limit = l.args.at(12).f;
  const int U = (int)l.grid[1];
  const int64_t m = std::min<int64_t>(I, coveredX(l));
  for (uint32_t b = 0; b < l.grid[2]; ++b)
    for (int u = 0; u < U; ++u) {
      const int e = ids ? ids[b * U + u] : ownE;
      parallelFor(m, 16, 0, [&](int64_t j0, int64_t j1, int) {
        for (int64_t j = j0; j < j1; ++j) {
          double r = 0;
          if (e >= 0 && (!own || own[(int64_t)e * halves + (j >> 7)])) {
            const int64_t base = (ids ? (int64_t)e : 0) * stride + j * d;
            const float *xb = x + (int64_t)b * d;
            double g = 0, v = 0;
            for (int i = 0; i < d; ++i)
              g += (double)hx::ldAny(gate, base + i, dt) * (double)xb[i];
            for (int i = 0; i < d; ++i)
              v += (double)hx::ldAny(up, base + i, dt) * (double)xb[i];
            if (limit > 0) {
              g = std::min(g, limit);
              v = std::clamp(v, -limit, limit);
            }
            r = g / (1.0 + std::exp(-g)) * v;
          }
          act[((int64_t)b * U + u) * I + j] = r;
        }
      });
    }
}

// hf_expert_down(down, dt, act, ids, wts, stride, I, d, U, part, slots,
// slotBase); grid (ceil(d/T), U*chunks, B).
void hfExpertDownTwin(const Launch &l) {
  const void *down = l.ptr<const void>(0);
  const int dt = l.i32(1);
  const double *act = l.ptr<const double>(2);
  const int *ids = l.ptr<const int>(3);
  const float *wts = l.ptr<const float>(4);
  const int64_t stride = l.i64(5);
  const int I = l.i32(6), d = l.i32(7), U = l.i32(8);
  double *part = l.ptr<double>(9);
  const int slots = l.i32(10), slotBase = l.i32(11);
  const int chunks = (I + 127) / 128;
  const int64_t m = std::min<int64_t>(d, coveredX(l));
  for (uint32_t b = 0; b < l.grid[2]; ++b)
    for (uint32_t y = 0; y < l.grid[1]; ++y) {
      const int u = (int)y / chunks, ch = (int)y % chunks;
      const int e = ids ? ids[b * U + u] : 0;
      parallelFor(m, 64, 0, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
          double s = 0;
          if (e >= 0) {
            const int begin = ch * 128, count = std::min(I - begin, 128);
            const int64_t row = (ids ? (int64_t)e : 0) * stride + r * I + begin;
            const double *a = act + ((int64_t)b * U + u) * I + begin;
            for (int j = 0; j < count; ++j)
              s += (double)hx::ldAny(down, row + j, dt) * a[j];
            s *= wts ? (double)wts[b * U + u] : 1.0;
          }
          part[((int64_t)b * slots + slotBase + (int64_t)u * chunks + ch) * d +
               r] = s;
        }
      });
    }
}

// exl3_expert_in(x, suh, ids, xh, d, E, B); grid (ceil(d/T), K, 2B).
void exl3ExpertInTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0), *suh = l.ptr<const float>(1);
  const int *ids = l.ptr<const int>(2);
  float *xh = l.ptr<float>(3);
  const int d = l.i32(4), E = l.i32(5), B = l.i32(6);
  const int K = (int)l.grid[1];
  const int64_t m = std::min<int64_t>(d, coveredX(l));
  for (uint32_t z = 0; z < l.grid[2]; ++z) {
    const int b = (int)z % B, p = (int)z / B;
    for (int k = 0; k < K; ++k) {
      const int e = ids[b * K + k];
      for (int64_t i = 0; i < m; ++i) {
        const float s = e >= 0 ? suh[((int64_t)p * E + e) * d + i] : 0.0f;
        xh[(((int64_t)p * B + b) * K + k) * d + i] = x[(int64_t)b * d + i] * s;
      }
    }
  }
}

// moe_exl3_in(x, suh, ids, xh, d, eTot, nRouted, topk, B); grid
// (ceil(d/T), slots, 2B).
void moeExl3InTwin(const Launch &l) {
  const float *x = l.ptr<const float>(0), *suh = l.ptr<const float>(1);
  const int *ids = l.ptr<const int>(2);
  float *xh = l.ptr<float>(3);
  const int d = l.i32(4), eTot = l.i32(5), nRouted = l.i32(6), topk = l.i32(7),
            B = l.i32(8);
  const int slots = (int)l.grid[1];
  const int64_t m = std::min<int64_t>(d, coveredX(l));
  for (uint32_t z = 0; z < l.grid[2]; ++z) {
    const int b = (int)z % B, p = (int)z / B;
    for (int k = 0; k < slots; ++k) {
      const int e = k < topk ? ids[b * topk + k] : nRouted + (k - topk);
      for (int64_t i = 0; i < m; ++i) {
        const float s = e >= 0 ? suh[((int64_t)p * eTot + e) * d + i] : 0.0f;
        xh[(((int64_t)b * slots + k) * 2 + p) * d + i] =
            x[(int64_t)b * d + i] * s;
      }
    }
  }
}

} // namespace glm::rt::twins
