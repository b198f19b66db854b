//===- flash_ops.cpp - GLM-5.3-Flash building blocks of the reference -----===//
#include "runtime/cpu/flash_ops.h"

#include "runtime/base/error.h"
#include "runtime/cpu/ops.h"

#include <algorithm>
#include <cmath>

namespace glm::rt::cpu {

HyperMix hyperConnMix(const HyperConnWeights &w, const std::vector<float> &X,
                      int64_t S, double rmsEps, double hcEps, int64_t iters) {
  const int64_t n = (int64_t)X.size(), mix = (2 + S) * S;
  check(w.fn.rows == mix && w.fn.cols == n && (int64_t)w.base.size() == mix &&
            w.scale.size() == 3,
        "hyperConnMix: weights do not match ", S, " streams of ", n / S);
  double ss = 0;
  for (float v : X)
    ss += (double)v * v;
  const double inv = 1.0 / std::sqrt(ss / (double)n + rmsEps);
  std::vector<double> m(mix);
  for (int64_t i = 0; i < mix; ++i)
    m[i] = dot(w.fn.row(i), X.data(), n) * inv;
  HyperMix h;
  h.pre.resize(S);
  h.post.resize(S);
  h.comb.resize(S * S);
  for (int64_t j = 0; j < S; ++j) {
    h.pre[j] = sigmoid(m[j] * w.scale[0] + w.base[j]) + hcEps;
    h.post[j] = 2.0 * sigmoid(m[S + j] * w.scale[1] + w.base[S + j]);
  }
  for (int64_t i = 0; i < S; ++i) { // softmax along each row, + eps
    double *row = h.comb.data() + i * S, most = -INFINITY, sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      row[j] = m[2 * S + i * S + j] * w.scale[2] + w.base[2 * S + i * S + j];
      most = std::max(most, row[j]);
    }
    for (int64_t j = 0; j < S; ++j)
      sum += (row[j] = std::exp(row[j] - most));
    for (int64_t j = 0; j < S; ++j)
      row[j] = row[j] / sum + hcEps;
  }
  auto columns = [&] {
    for (int64_t j = 0; j < S; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < S; ++i)
        sum += h.comb[i * S + j];
      for (int64_t i = 0; i < S; ++i)
        h.comb[i * S + j] /= sum + hcEps;
    }
  };
  auto rows = [&] {
    for (int64_t i = 0; i < S; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < S; ++j)
        sum += h.comb[i * S + j];
      for (int64_t j = 0; j < S; ++j)
        h.comb[i * S + j] /= sum + hcEps;
    }
  };
  columns();
  for (int64_t it = 1; it < iters; ++it) {
    rows();
    columns();
  }
  return h;
}

std::vector<float> hyperConnCollapse(const HyperMix &m,
                                     const std::vector<float> &X, int64_t S) {
  const int64_t d = (int64_t)X.size() / S;
  std::vector<float> u(d);
  for (int64_t c = 0; c < d; ++c) {
    double acc = 0;
    for (int64_t j = 0; j < S; ++j)
      acc += m.pre[j] * X[j * d + c];
    u[c] = (float)acc;
  }
  return u;
}

void hyperConnExpand(const HyperMix &m, const std::vector<float> &y,
                     std::vector<float> &X, int64_t S) {
  const int64_t d = (int64_t)y.size();
  std::vector<float> out(X.size());
  for (int64_t i = 0; i < S; ++i)
    for (int64_t c = 0; c < d; ++c) {
      double acc = m.post[i] * y[c];
      for (int64_t j = 0; j < S; ++j)
        acc += m.comb[j * S + i] * X[j * d + c];
      out[i * d + c] = (float)acc;
    }
  X = std::move(out);
}

double causalConvStep(const float *taps, float *state, int64_t K, float x) {
  double acc = (double)taps[K - 1] * x;
  for (int64_t j = 0; j + 1 < K; ++j)
    acc += (double)taps[j] * state[j];
  for (int64_t j = 0; j + 2 < K; ++j)
    state[j] = state[j + 1];
  if (K > 1)
    state[K - 2] = x;
  return silu(acc);
}

double kdaForgetGate(double x, double aLog, bool hasLower, double lower) {
  const double rate = std::exp(aLog);
  if (hasLower)
    return lower * sigmoid(rate * x);
  const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
  return -rate * softplus;
}

void kdaL2Norm(double *x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss + 1e-6);
  for (int64_t i = 0; i < n; ++i)
    x[i] *= inv;
}

void kdaRecurrentStep(std::vector<double> &S, const double *q,
                      const double *k, const double *v, const double *g,
                      double beta, int64_t dk, int64_t dv, double *out) {
  for (int64_t a = 0; a < dk; ++a) {
    const double decay = std::exp(g[a]);
    for (int64_t b = 0; b < dv; ++b)
      S[a * dv + b] *= decay;
  }
  std::vector<double> delta(dv);
  for (int64_t b = 0; b < dv; ++b) {
    double mem = 0;
    for (int64_t a = 0; a < dk; ++a)
      mem += S[a * dv + b] * k[a];
    delta[b] = beta * (v[b] - mem);
  }
  for (int64_t a = 0; a < dk; ++a)
    for (int64_t b = 0; b < dv; ++b)
      S[a * dv + b] += k[a] * delta[b];
  for (int64_t b = 0; b < dv; ++b) {
    double o = 0;
    for (int64_t a = 0; a < dk; ++a)
      o += S[a * dv + b] * q[a];
    out[b] = o;
  }
}

// Within a chunk starting from state S0, with Γ_t the running sum of g:
//   S_t = diag(e^Γ_t) S0 + Σ_{i≤t} diag(e^{Γ_t−Γ_i}) k_i δ_iᵀ, so
//   δ_t + Σ_{i<t} A[t,i] δ_i = β_t (v_t − S0ᵀ(e^Γ_t ⊙ k_t)),
//   A[t,i] = β_t Σ_c k_t[c] k_i[c] e^{Γ_t[c]−Γ_i[c]}  (unit lower-triangular
//   system, solved forward), and
//   o_t = S0ᵀ(e^Γ_t ⊙ q_t) + Σ_{i≤t} (q_t · (e^{Γ_t−Γ_i} ⊙ k_i)) δ_i.
void kdaChunked(std::vector<double> &S, const std::vector<double> &q,
                const std::vector<double> &k, const std::vector<double> &v,
                const std::vector<double> &g, const std::vector<double> &beta,
                int64_t T, int64_t dk, int64_t dv, int64_t C,
                std::vector<double> &out) {
  check(C >= 1, "kdaChunked: chunk must be positive");
  out.assign(T * dv, 0.0);
  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int64_t n = std::min(C, T - t0);
    std::vector<double> gam(n * dk); // Γ_t per channel
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < dk; ++c)
        gam[t * dk + c] =
            g[(t0 + t) * dk + c] + (t ? gam[(t - 1) * dk + c] : 0.0);
    // Right-hand side, then forward substitution for δ.
    std::vector<double> delta(n * dv);
    for (int64_t t = 0; t < n; ++t) {
      const double *kt = &k[(t0 + t) * dk];
      for (int64_t b = 0; b < dv; ++b) {
        double mem = 0;
        for (int64_t c = 0; c < dk; ++c)
          mem += S[c * dv + b] * std::exp(gam[t * dk + c]) * kt[c];
        delta[t * dv + b] = beta[t0 + t] * (v[(t0 + t) * dv + b] - mem);
      }
      for (int64_t i = 0; i < t; ++i) {
        const double *ki = &k[(t0 + i) * dk];
        double a = 0;
        for (int64_t c = 0; c < dk; ++c)
          a += kt[c] * ki[c] * std::exp(gam[t * dk + c] - gam[i * dk + c]);
        a *= beta[t0 + t];
        for (int64_t b = 0; b < dv; ++b)
          delta[t * dv + b] -= a * delta[i * dv + b];
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      const double *qt = &q[(t0 + t) * dk];
      double *o = &out[(t0 + t) * dv];
      for (int64_t b = 0; b < dv; ++b) {
        double acc = 0;
        for (int64_t c = 0; c < dk; ++c)
          acc += S[c * dv + b] * std::exp(gam[t * dk + c]) * qt[c];
        o[b] = acc;
      }
      for (int64_t i = 0; i <= t; ++i) {
        const double *ki = &k[(t0 + i) * dk];
        double a = 0;
        for (int64_t c = 0; c < dk; ++c)
          a += qt[c] * ki[c] * std::exp(gam[t * dk + c] - gam[i * dk + c]);
        for (int64_t b = 0; b < dv; ++b)
          o[b] += a * delta[i * dv + b];
      }
    }
    // State at the chunk's end.
    const double *last = &gam[(n - 1) * dk];
    for (int64_t c = 0; c < dk; ++c) {
      const double decay = std::exp(last[c]);
      for (int64_t b = 0; b < dv; ++b)
        S[c * dv + b] *= decay;
    }
    for (int64_t i = 0; i < n; ++i) {
      const double *ki = &k[(t0 + i) * dk];
      for (int64_t c = 0; c < dk; ++c) {
        const double w = ki[c] * std::exp(last[c] - gam[i * dk + c]);
        for (int64_t b = 0; b < dv; ++b)
          S[c * dv + b] += w * delta[i * dv + b];
      }
    }
  }
}

std::vector<float> kpoolKey(const float *keys, const float *gates,
                            const float *ape, int64_t P, int64_t hd) {
  std::vector<float> out(hd);
  for (int64_t c = 0; c < hd; ++c) {
    double most = -INFINITY;
    for (int64_t j = 0; j < P; ++j)
      most = std::max(most, (double)gates[j * hd + c] + ape[j * hd + c]);
    double sum = 0, acc = 0;
    for (int64_t j = 0; j < P; ++j) {
      const double e =
          std::exp((double)gates[j * hd + c] + ape[j * hd + c] - most);
      sum += e;
      acc += e * keys[j * hd + c];
    }
    out[c] = (float)(acc / sum);
  }
  return out;
}

} // namespace glm::rt::cpu
