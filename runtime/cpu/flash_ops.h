//===- flash_ops.h - GLM-5.3-Flash building blocks of the reference -------===//
//
// The pieces of shared/specs/glm53-architecture.md section 3, one function
// each, in fp64 like ops.h: the mHC map of one site, the KDA causal short
// conv, forget gate and delta-rule step (and its chunked prompt form, which
// must agree with the step), and the k-pool of the indexer.
//
// Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/model_weights.h"

#include <cstdint>
#include <vector>

namespace glm::rt::cpu {

/// One mHC site's mixing of S streams: sublayer input u = Σ_j pre_j X[j];
/// after the sublayer, X'[i] = post_i·y + Σ_j comb[j·S + i]·X[j].
struct HyperMix {
  std::vector<double> pre, post; // [S]
  std::vector<double> comb;      // [S, S], Sinkhorn-normalised
};

/// pre, post and comb from the streams X [S, d] (row-major): the unweighted
/// RMS norm of the flattened streams (eps = rms_norm_eps), the fn map, the
/// per-map scales and biases, then `iters` Sinkhorn rounds (columns once,
/// then rows and columns iters−1 times), each normaliser + hc_eps.
HyperMix hyperConnMix(const HyperConnWeights &w, const std::vector<float> &X,
                      int64_t S, double rmsEps, double hcEps, int64_t iters);
/// u = Σ_j pre_j X[j] [d].
std::vector<float> hyperConnCollapse(const HyperMix &m,
                                     const std::vector<float> &X, int64_t S);
/// X ← post ⊗ y + combᵀ X, in place.
void hyperConnExpand(const HyperMix &m, const std::vector<float> &y,
                     std::vector<float> &X, int64_t S);

/// Causal depthwise conv of one channel with K taps over its last K−1 raw
/// inputs `state` (oldest first) and the new input x, then SiLU; shifts x
/// into the state.
double causalConvStep(const float *taps, float *state, int64_t K, float x);

/// Per-channel log-decay g of one head's dk channels from the forget-gate
/// pre-activation x = f_b(f_a h) + dt_bias: lower·sigmoid(exp(aLog)·x) with
/// a lower bound, else −exp(aLog)·softplus(x).
double kdaForgetGate(double x, double aLog, bool hasLower, double lower);

/// q or k of one head: x / sqrt(Σx² + 1e−6) (transformers' and FLA's l2norm).
void kdaL2Norm(double *x, int64_t n);

/// One token of the delta rule on state S [dk, dv]:
///   S ← diag(exp g) S;  δ = β (v − Sᵀk);  S ← S + k δᵀ;  out = Sᵀq.
/// q and k are l2-normalised (q also scaled by dk^−½).
void kdaRecurrentStep(std::vector<double> &S, const double *q,
                      const double *k, const double *v, const double *g,
                      double beta, int64_t dk, int64_t dv, double *out);

/// The chunked (WY) form over T tokens of one head, chunk C: what prefill
/// kernels compute. Inputs [T, dk] / [T, dv] / [T]; S is the state before
/// the first token and after the last; out [T, dv]. Equal to T recurrent
/// steps up to rounding.
void kdaChunked(std::vector<double> &S, const std::vector<double> &q,
                const std::vector<double> &k, const std::vector<double> &v,
                const std::vector<double> &g, const std::vector<double> &beta,
                int64_t T, int64_t dk, int64_t dv, int64_t C,
                std::vector<double> &out);

/// The k-pool key of P consecutive tokens: per channel c, the softmax over
/// members j of gate[j][c] + ape[j][c] weights key[j][c]. Rows [P, hd].
std::vector<float> kpoolKey(const float *keys, const float *gates,
                            const float *ape, int64_t P, int64_t hd);

} // namespace glm::rt::cpu
