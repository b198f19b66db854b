//===- forward.cpp - the reference GLM-5.3 forward, one token at a time ---===//
#include "runtime/cpu/forward.h"

#include "runtime/base/error.h"
#include "runtime/cpu/flash_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace glm::rt::cpu {
namespace {

/// Tokens per chunk of the chunked KDA form in prefill (any value gives the
/// same result up to rounding; 64 is what prefill kernels use).
constexpr int64_t kKdaChunk = 64;

/// SwiGLU over intermediate channels [begin, begin+count) of `m`, scaled by
/// `weight`: out[r] = weight · Σ_j down[r, j]·SiLU(gate_j·x)·(up_j·x).
/// `limit` > 0 clamps (GLM-5.3-Flash): gate <= limit, up in [−limit, limit].
void swigluPart(const MlpWeights &m, const float *x, int64_t begin,
                int64_t count, double weight, double limit, double *out) {
  std::vector<double> act(count);
  for (int64_t j = 0; j < count; ++j) {
    double g = dot(m.gate.row(begin + j), x, m.gate.cols);
    double u = dot(m.up.row(begin + j), x, m.up.cols);
    if (limit > 0) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    act[j] = silu(g) * u;
  }
  for (int64_t r = 0; r < m.down.rows; ++r) {
    const float *row = m.down.row(r) + begin;
    double s = 0;
    for (int64_t j = 0; j < count; ++j)
      s += (double)row[j] * act[j];
    out[r] = weight * s;
  }
}

/// The all-reduce: sums unit contributions [units, n] in unit order.
std::vector<float> reduceInOrder(const std::vector<double> &contrib,
                                 int64_t units, int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t u = 0; u < units; ++u)
      s += contrib[u * n + i];
    out[i] = (float)s;
  }
  return out;
}

/// Across processes: fills the rows [units, n] of `contrib` that other
/// ranks own (owner[u]) with theirs. Each rank sends its own rows packed in
/// unit order, padded to the largest share.
void gatherUnits(dist::HostComm &comm, const std::vector<int> &owner,
                 int64_t n, std::vector<double> &contrib) {
  const int N = comm.size(), me = comm.rank();
  std::vector<std::vector<int64_t>> owned(N);
  for (size_t u = 0; u < owner.size(); ++u)
    owned[owner[u]].push_back((int64_t)u);
  size_t most = 0;
  for (const auto &o : owned)
    most = std::max(most, o.size());
  if (most == 0)
    return;
  std::vector<double> send(most * n, 0.0), recv(N * most * n);
  for (size_t i = 0; i < owned[me].size(); ++i)
    std::copy_n(contrib.data() + owned[me][i] * n, n, send.data() + i * n);
  comm.allGather(send.data(), recv.data(), send.size() * sizeof(double));
  for (int r = 0; r < N; ++r)
    if (r != me)
      for (size_t i = 0; i < owned[r].size(); ++i)
        std::copy_n(recv.data() + (r * most + i) * n, n,
                    contrib.data() + owned[r][i] * n);
}

} // namespace

CpuForward::CpuForward(std::shared_ptr<const ModelWeights> weights,
                       TpLayout tp, dist::HostComm *comm)
    : w_(std::move(weights)), tp_(std::move(tp)), comm_(comm) {
  check((int64_t)tp_.layers.size() == w_->config.numLayers,
        "tensor-parallel layout has ", tp_.layers.size(),
        " layers, the model has ", w_->config.numLayers);
  check(tp_.mtpLayers.size() >= w_->mtp.size(), "tensor-parallel layout has ",
        tp_.mtpLayers.size(), " MTP layers, the weights have ", w_->mtp.size());
  if (comm_ && comm_->size() == 1)
    comm_ = nullptr; // one process computes everything
  check(!comm_ || comm_->size() == tp_.ranks, "the plan has ", tp_.ranks,
        " ranks but ", comm ? comm->size() : 0,
        " processes joined (--world); start one process per rank");
}

const LayerWeights &CpuForward::layerWeights(int64_t l) const {
  const int64_t n = w_->config.numLayers;
  return l < n ? w_->layers[l] : w_->mtp.at(l - n).layer;
}

Session CpuForward::newSession() const {
  const ModelConfig &c = w_->config;
  Session s;
  const size_t layers = c.numLayers + w_->mtp.size();
  s.latent.resize(layers);
  s.indexKeys.resize(layers);
  s.indexGates.resize(layers);
  s.poolKeys.resize(layers);
  s.kdaState.resize(c.numLayers);
  s.convState.resize(c.numLayers);
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (c.isKdaLayer(l)) {
      const int64_t qkv = c.linearNumHeads * c.linearHeadDim;
      s.kdaState[l].assign(c.linearNumHeads * c.linearHeadDim *
                               c.linearHeadDim,
                           0.0);
      s.convState[l].assign(3 * qkv * (c.linearConvKernel - 1), 0.0f);
    }
  return s;
}

std::pair<int, int> CpuForward::myRanks() const {
  return comm_ ? std::pair{comm_->rank(), comm_->rank() + 1}
               : std::pair{0, tp_.ranks};
}

std::vector<float> CpuForward::attendMla(Session &s, int64_t l, int64_t pos,
                                         const float *hIn,
                                         std::vector<int64_t> &sel,
                                         bool &haveSel,
                                         StepTrace *trace) const {
  const ModelConfig &c = w_->config;
  const int64_t d = c.hiddenSize, H = c.numHeads, dn = c.qkNopeHeadDim,
                dr = c.qkRopeHeadDim, dv = c.vHeadDim, kvr = c.kvLoraRank,
                lat = kvr + dr, T = pos + 1;
  const double eps = c.rmsNormEps, theta = c.ropeTheta;
  const double scale = 1.0 / std::sqrt((double)(dn + dr));
  const auto [rBegin, rEnd] = myRanks();
  const LayerWeights &L = layerWeights(l);
  const TpLayerLayout &TL = tp_.layer(l);
  const float *h = hIn;
  std::vector<float> qa(c.qLoraRank), q(H * (dn + dr)), kva(kvr + dr);

  // Replicated projections (each output row is computed identically on
  // whichever rank needs it).
  gemv(L.qA, h, qa.data());
  rmsNorm(qa.data(), L.qANorm.data(), qa.data(), c.qLoraRank, eps);
  gemv(L.qB, qa.data(), q.data());
  gemv(L.kvA, h, kva.data());
  std::vector<float> &cache = s.latent[l];
  cache.resize(T * lat);
  float *cur = cache.data() + pos * lat;
  rmsNorm(kva.data(), L.kvANorm.data(), cur, kvr, eps);
  std::copy(kva.begin() + kvr, kva.end(), cur + kvr);
  ropeInterleave(cur + kvr, dr, pos, theta);

  // DSA selection.
  if (L.fullIndexer) {
    const IndexerWeights &I = L.indexer;
    const int64_t nh = c.indexNHeads, hd = c.indexHeadDim, P = c.indexKpool;
    std::vector<float> qi(nh * hd);
    gemv(I.wqB, qa.data(), qi.data());
    for (int64_t hh = 0; hh < nh; ++hh)
      ropeInterleave(qi.data() + hh * hd, dr, pos, theta);
    std::vector<float> k(hd);
    gemv(I.wk, h, k.data());
    layerNorm(k.data(), I.kNormW.data(), I.kNormB.data(), k.data(), hd, 1e-6);
    ropeInterleave(k.data(), dr, pos, theta);
    std::vector<float> &keys = s.indexKeys[l];
    keys.insert(keys.end(), k.begin(), k.end());
    // Candidates: single tokens, or (k-pool) the complete pools, whose
    // pooled key is made once, when the pool's last token arrives.
    const float *candKeys = keys.data();
    int64_t cands = T;
    if (P > 1) {
      std::vector<float> gate(hd);
      gemv(I.kpoolGate, h, gate.data());
      std::vector<float> &gates = s.indexGates[l];
      gates.insert(gates.end(), gate.begin(), gate.end());
      if (T % P == 0) {
        std::vector<float> pk =
            kpoolKey(keys.data() + (T - P) * hd, gates.data() + (T - P) * hd,
                     I.kpoolApe.data.data(), P, hd);
        s.poolKeys[l].insert(s.poolKeys[l].end(), pk.begin(), pk.end());
      }
      candKeys = s.poolKeys[l].data();
      cands = T / P;
    }
    const int64_t want = c.indexTopk / P;
    std::vector<int64_t> chosen;
    if (cands <= want) {
      chosen.resize(cands);
      std::iota(chosen.begin(), chosen.end(), 0);
    } else {
      std::vector<double> wts(nh);
      gemvD(I.weightsProj, h, wts.data());
      const double headScale = 1.0 / std::sqrt((double)nh);
      const double dotScale = 1.0 / std::sqrt((double)hd);
      std::vector<double> score(cands, 0.0);
      for (int64_t t = 0; t < cands; ++t) {
        const float *kt = candKeys + t * hd;
        double acc = 0;
        for (int64_t hh = 0; hh < nh; ++hh) {
          double v = dot(qi.data() + hh * hd, kt, hd) * dotScale;
          acc += wts[hh] * headScale * std::max(v, 0.0);
        }
        score[t] = acc;
      }
      chosen = topkIndices(score, want);
      std::sort(chosen.begin(), chosen.end());
    }
    sel.clear();
    for (int64_t p : chosen) // pools expand to their tokens
      for (int64_t j = 0; j < P; ++j)
        sel.push_back(p * P + j);
    for (int64_t t = (T / P) * P; t < T; ++t) // the incomplete tail
      sel.push_back(t);
    haveSel = true;
  } else if (c.indexNHeads == 0) {
    sel.resize(T); // no indexer in this model: dense attention
    std::iota(sel.begin(), sel.end(), 0);
    haveSel = true;
  }
  check(haveSel, "layer ", l,
        " is a shared indexer layer with no full layer before it");
  if (trace)
    trace->selected[l] = sel;

  // Attention: each rank computes its heads' o_proj contributions.
  std::vector<double> contrib(H * d, 0.0);
  for (int r = rBegin; r < rEnd; ++r) {
    for (int64_t hh = 0; hh < H; ++hh) {
      if (TL.headRank[hh] != r)
        continue;
      const float *qn = q.data() + hh * (dn + dr);
      std::vector<float> qp(qn + dn, qn + dn + dr);
      ropeInterleave(qp.data(), dr, pos, theta);
      // Absorb W_UK into the query: qabs = W_UK_hᵀ q_nope.
      std::vector<double> qabs(kvr, 0.0);
      for (int64_t i = 0; i < dn; ++i) {
        const float *wr = L.kvB.row(hh * (dn + dv) + i);
        double qv = qn[i];
        for (int64_t cc = 0; cc < kvr; ++cc)
          qabs[cc] += (double)wr[cc] * qv;
      }
      std::vector<double> p(sel.size());
      for (size_t j = 0; j < sel.size(); ++j) {
        const float *ent = cache.data() + sel[j] * lat;
        p[j] = (dot(ent, qabs.data(), kvr) + dot(ent + kvr, qp.data(), dr)) *
               scale;
      }
      softmax(p);
      std::vector<double> ctx(kvr, 0.0);
      for (size_t j = 0; j < sel.size(); ++j) {
        const float *ent = cache.data() + sel[j] * lat;
        for (int64_t cc = 0; cc < kvr; ++cc)
          ctx[cc] += p[j] * (double)ent[cc];
      }
      std::vector<float> ov(dv);
      for (int64_t j = 0; j < dv; ++j)
        ov[j] =
            (float)dot(L.kvB.row(hh * (dn + dv) + dn + j), ctx.data(), kvr);
      double *out = contrib.data() + hh * d;
      for (int64_t rr = 0; rr < d; ++rr)
        out[rr] = dot(L.o.row(rr) + hh * dv, ov.data(), dv);
    }
  }
  if (comm_)
    gatherUnits(*comm_, TL.headRank, d, contrib);
  return reduceInOrder(contrib, H, d);
}

std::vector<float> CpuForward::attendKda(Session &s, int64_t l,
                                         const float *H, int64_t T,
                                         bool chunked) const {
  const ModelConfig &c = w_->config;
  const KdaWeights &W = w_->layers[l].linear;
  const TpLayerLayout &TL = tp_.layers[l];
  const int64_t d = c.hiddenSize, nh = c.linearNumHeads, hd = c.linearHeadDim,
                qkv = nh * hd, K = c.linearConvKernel;
  const auto [rBegin, rEnd] = myRanks();
  // The low-rank gate inputs are shared by all heads (replicated).
  std::vector<float> fa(T * hd), ga(T * hd);
  for (int64_t t = 0; t < T; ++t) {
    gemv(W.fA, H + t * d, fa.data() + t * hd);
    gemv(W.gA, H + t * d, ga.data() + t * hd);
  }
  std::vector<double> contrib(T * nh * d, 0.0); // [token][head][d]
  float *conv = s.convState[l].data();
  const double qScale = 1.0 / std::sqrt((double)hd);
  for (int r = rBegin; r < rEnd; ++r)
    for (int64_t hh = 0; hh < nh; ++hh) {
      if (TL.headRank[hh] != r)
        continue;
      // Per token: projections, conv and SiLU of this head's channels,
      // l2-normalised q and k, the forget gate and beta.
      std::vector<double> q(T * hd), k(T * hd), v(T * hd), g(T * hd),
          beta(T);
      const Matrix *proj[3] = {&W.q, &W.k, &W.v};
      const std::vector<float> *taps[3] = {&W.convQ, &W.convK, &W.convV};
      for (int64_t t = 0; t < T; ++t) {
        const float *h = H + t * d;
        double *dst[3] = {&q[t * hd], &k[t * hd], &v[t * hd]};
        for (int x = 0; x < 3; ++x)
          for (int64_t j = 0; j < hd; ++j) {
            const int64_t ch = hh * hd + j;
            const float raw = (float)dot(proj[x]->row(ch), h, d);
            dst[x][j] =
                causalConvStep(taps[x]->data() + ch * K,
                               conv + (x * qkv + ch) * (K - 1), K, raw);
          }
        kdaL2Norm(&q[t * hd], hd);
        kdaL2Norm(&k[t * hd], hd);
        for (int64_t j = 0; j < hd; ++j) {
          q[t * hd + j] *= qScale;
          const int64_t ch = hh * hd + j;
          const double pre =
              dot(W.fB.row(ch), fa.data() + t * hd, hd) + W.dtBias[ch];
          g[t * hd + j] = kdaForgetGate(pre, W.aLog[hh], c.hasLinearLowerBound,
                                        c.linearLowerBound);
        }
        beta[t] = sigmoid(dot(W.b.row(hh), h, d));
      }
      // The delta rule: token by token, or the chunked form of a prompt.
      std::vector<double> S(s.kdaState[l].begin() + hh * hd * hd,
                            s.kdaState[l].begin() + (hh + 1) * hd * hd);
      std::vector<double> o(T * hd);
      if (chunked)
        kdaChunked(S, q, k, v, g, beta, T, hd, hd, kKdaChunk, o);
      else
        for (int64_t t = 0; t < T; ++t)
          kdaRecurrentStep(S, &q[t * hd], &k[t * hd], &v[t * hd], &g[t * hd],
                           beta[t], hd, hd, &o[t * hd]);
      std::copy(S.begin(), S.end(), s.kdaState[l].begin() + hh * hd * hd);
      // Gated RMS norm over the head's dv channels, then o_proj's columns.
      for (int64_t t = 0; t < T; ++t) {
        const double *ot = &o[t * hd];
        double ss = 0;
        for (int64_t j = 0; j < hd; ++j)
          ss += ot[j] * ot[j];
        const double inv = 1.0 / std::sqrt(ss / (double)hd + c.rmsNormEps);
        std::vector<float> on(hd);
        for (int64_t j = 0; j < hd; ++j) {
          const double gate =
              dot(W.gB.row(hh * hd + j), ga.data() + t * hd, hd);
          on[j] = (float)(W.oNorm[j] * (ot[j] * inv) * sigmoid(gate));
        }
        double *out = contrib.data() + (t * nh + hh) * d;
        for (int64_t rr = 0; rr < d; ++rr)
          out[rr] = dot(W.o.row(rr) + hh * hd, on.data(), hd);
      }
    }
  std::vector<float> y(T * d);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> part(contrib.begin() + t * nh * d,
                             contrib.begin() + (t + 1) * nh * d);
    if (comm_)
      gatherUnits(*comm_, TL.headRank, d, part);
    std::vector<float> yt = reduceInOrder(part, nh, d);
    std::copy(yt.begin(), yt.end(), y.begin() + t * d);
  }
  return y;
}

std::vector<float> CpuForward::feedForward(int64_t l, const float *h,
                                           StepTrace *trace) const {
  const ModelConfig &c = w_->config;
  const LayerWeights &L = layerWeights(l);
  const TpLayerLayout &TL = tp_.layer(l);
  const int64_t d = c.hiddenSize;
  const int N = tp_.ranks;
  const double limit = c.swigluLimit;
  const auto [rBegin, rEnd] = myRanks();
  if (L.moe) {
    std::vector<double> logits(c.numRoutedExperts);
    gemvD(L.router, h, logits.data());
    RouterChoice rc =
        routeExperts(logits, L.routerBias.data(), c.numExpertsPerTok,
                     c.normTopkProb, c.routedScalingFactor);
    if (trace)
      trace->experts[l] = rc.experts;
    // Units in global order: routed experts ascending, then shared.
    struct Unit {
      const MlpWeights *m;
      int64_t expert;
      double weight;
    };
    std::vector<Unit> units;
    for (size_t k = 0; k < rc.experts.size(); ++k)
      units.push_back(
          {&L.experts[rc.experts[k]], rc.experts[k], rc.weights[k]});
    if (c.numSharedExperts > 0)
      units.push_back({&L.shared, c.numRoutedExperts, 1.0});
    // Slots: one per 128-channel chunk of each unit, in global order.
    // A shared expert wider than a routed one (n_shared > 1) has extra
    // chunks; they follow the rule's formula past the plan's halves.
    const int64_t halves = tp_.expertHalves;
    std::vector<int64_t> slot0(units.size() + 1, 0);
    for (size_t u = 0; u < units.size(); ++u)
      slot0[u + 1] = slot0[u] + numChunks(units[u].m->gate.rows);
    std::vector<double> part(slot0.back() * d, 0.0);
    std::vector<int> slotRank(slot0.back());
    for (size_t u = 0; u < units.size(); ++u)
      for (int64_t ch = 0; ch < numChunks(units[u].m->gate.rows); ++ch)
        slotRank[slot0[u] + ch] =
            ch < halves ? tp_.expertHalfRank(l, units[u].expert, ch)
                        : (int)((halves * units[u].expert + ch + l) % N);
    for (int r = rBegin; r < rEnd; ++r)
      for (size_t u = 0; u < units.size(); ++u) {
        const int64_t width = units[u].m->gate.rows;
        for (int64_t ch = 0; ch < numChunks(width); ++ch) {
          if (slotRank[slot0[u] + ch] != r)
            continue;
          int64_t begin = ch * kHalfWidth;
          int64_t count = std::min(kHalfWidth, width - begin);
          swigluPart(*units[u].m, h, begin, count, units[u].weight, limit,
                     part.data() + (slot0[u] + ch) * d);
        }
      }
    if (comm_)
      gatherUnits(*comm_, slotRank, d, part);
    return reduceInOrder(part, slot0.back(), d);
  }
  const int64_t chunks = numChunks(c.intermediateSize);
  std::vector<double> part(chunks * d, 0.0);
  for (int r = rBegin; r < rEnd; ++r)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      if (TL.denseChunkRank[ch] != r)
        continue;
      int64_t begin = ch * kHalfWidth;
      int64_t count = std::min(kHalfWidth, c.intermediateSize - begin);
      swigluPart(L.dense, h, begin, count, 1.0, limit, part.data() + ch * d);
    }
  if (comm_)
    gatherUnits(*comm_, TL.denseChunkRank, d, part);
  return reduceInOrder(part, chunks, d);
}

std::vector<float> CpuForward::lmHead(const float *h,
                                      const Matrix &head) const {
  const ModelConfig &c = w_->config;
  const int N = tp_.ranks;
  const auto [rBegin, rEnd] = myRanks();
  std::vector<float> logits(c.vocabSize);
  for (int r = rBegin; r < rEnd; ++r) // LM head split by vocabulary
    gemv(head, h, logits.data() + tp_.vocabBegin[r], tp_.vocabBegin[r],
         tp_.vocabBegin[r + 1] - tp_.vocabBegin[r]);
  if (comm_) { // gather = concatenation of the slices (padded to the widest)
    int64_t most = 0;
    for (int r = 0; r < N; ++r)
      most = std::max(most, tp_.vocabBegin[r + 1] - tp_.vocabBegin[r]);
    std::vector<float> send(most, 0.0f), recv(N * most);
    std::copy(logits.begin() + tp_.vocabBegin[rBegin],
              logits.begin() + tp_.vocabBegin[rBegin + 1], send.begin());
    comm_->allGather(send.data(), recv.data(), most * sizeof(float));
    for (int r = 0; r < N; ++r)
      std::copy_n(recv.begin() + r * most,
                  tp_.vocabBegin[r + 1] - tp_.vocabBegin[r],
                  logits.begin() + tp_.vocabBegin[r]);
  }
  return logits;
}

std::vector<float> CpuForward::step(Session &s, int64_t token, StepTrace *trace,
                                    std::vector<float> *hidden) const {
  return runTokens(s, {token}, false, trace, hidden);
}

std::vector<float> CpuForward::prefill(Session &s,
                                       const std::vector<int64_t> &tokens,
                                       std::vector<float> *hidden) const {
  return runTokens(s, tokens, true, nullptr, hidden);
}

std::vector<float> CpuForward::mtpStep(Session &s, const float *hidden,
                                       int64_t nextToken,
                                       std::vector<float> *hiddenOut,
                                       StepTrace *trace, int64_t m) const {
  const ModelConfig &c = w_->config;
  check(m >= 0 && m < (int64_t)w_->mtp.size(), "MTP head ", m,
        " is not loaded (num_nextn_predict_layers ", c.numNextnPredictLayers,
        ", the pack stores ", w_->mtp.size(), ")");
  check(nextToken >= 0 && nextToken < c.vocabSize, "token id ", nextToken,
        " is outside the vocabulary [0, ", c.vocabSize, ")");
  check((int64_t)s.latent.size() == c.numLayers + (int64_t)w_->mtp.size(),
        "session was not made by this forward's newSession()");
  const MtpWeights &M = w_->mtp[m];
  const LayerWeights &L = M.layer;
  const int64_t d = c.hiddenSize, l = c.numLayers + m, pos = s.mtpLength;
  const double eps = c.rmsNormEps;
  if (comm_)
    comm_->setStep(pos);
  if (trace) {
    trace->selected.assign(l + 1, {});
    trace->experts.assign(l + 1, {});
  }
  // x = eh_proj [enorm(embed(token)) ; hnorm(h)]: the embedding half first.
  const Matrix &embed = M.embed.empty() ? w_->embed : M.embed;
  std::vector<float> eh(2 * d), x(d);
  rmsNorm(embed.row(nextToken), M.enorm.data(), eh.data(), d, eps);
  rmsNorm(hidden, M.hnorm.data(), eh.data() + d, d, eps);
  gemv(M.ehProj, eh.data(), x.data());
  // One plain pre-norm decoder layer (no mHC, also on Flash).
  std::vector<float> h(d);
  rmsNorm(x.data(), L.inputNorm.data(), h.data(), d, eps);
  std::vector<int64_t> sel;
  bool haveSel = false;
  std::vector<float> attn = attendMla(s, l, pos, h.data(), sel, haveSel, trace);
  for (int64_t i = 0; i < d; ++i)
    x[i] += attn[i];
  rmsNorm(x.data(), L.postNorm.data(), h.data(), d, eps);
  std::vector<float> mlp = feedForward(l, h.data(), trace);
  for (int64_t i = 0; i < d; ++i)
    x[i] += mlp[i];
  s.mtpLength = pos + 1;
  if (hiddenOut)
    *hiddenOut = x;
  rmsNorm(x.data(), M.headNorm.data(), h.data(), d, eps);
  return lmHead(h.data(), M.head.empty() ? w_->lmHead : M.head);
}

void CpuForward::truncateMtp(Session &s, int64_t length) const {
  const ModelConfig &c = w_->config;
  check(length >= 0 && length <= s.mtpLength, "truncateMtp: length ", length,
        " outside [0, ", s.mtpLength, "]");
  const int64_t lat = c.kvLoraRank + c.qkRopeHeadDim, hd = c.indexHeadDim,
                P = c.indexKpool;
  for (size_t m = 0; m < w_->mtp.size(); ++m) {
    const size_t l = c.numLayers + m;
    s.latent[l].resize(std::min<size_t>(s.latent[l].size(), length * lat));
    s.indexKeys[l].resize(std::min<size_t>(s.indexKeys[l].size(), length * hd));
    s.indexGates[l].resize(
        std::min<size_t>(s.indexGates[l].size(), length * hd));
    // A pool's key exists once its last token arrived.
    s.poolKeys[l].resize(
        std::min<size_t>(s.poolKeys[l].size(), (length / P) * hd));
  }
  s.mtpLength = length;
}

std::vector<float> CpuForward::runTokens(Session &s,
                                         const std::vector<int64_t> &tokens,
                                         bool chunked, StepTrace *trace,
                                         std::vector<float> *hidden) const {
  const ModelConfig &c = w_->config;
  for (int64_t token : tokens)
    check(token >= 0 && token < c.vocabSize, "token id ", token,
          " is outside the vocabulary [0, ", c.vocabSize, ")");
  const int64_t d = c.hiddenSize, base = s.length, T = (int64_t)tokens.size();
  const double eps = c.rmsNormEps;
  if (comm_)
    comm_->setStep(base);
  if (trace) {
    trace->selected.assign(c.numLayers, {});
    trace->experts.assign(c.numLayers, {});
  }
  // Layer by layer over all tokens (what a prefill chunk does); each token's
  // DSA selection carries from a full indexer layer to the shared ones.
  std::vector<std::vector<int64_t>> sel(T);
  std::vector<char> haveSel(T, 0);
  auto attend = [&](int64_t l, const std::vector<float> &Hin) {
    if (w_->layers[l].kda)
      return attendKda(s, l, Hin.data(), T, chunked);
    std::vector<float> y(T * d);
    for (int64_t t = 0; t < T; ++t) {
      s.length = base + t; // the MLA caches of layer l hold base + t tokens
      bool have = haveSel[t];
      std::vector<float> yt =
          attendMla(s, l, base + t, Hin.data() + t * d, sel[t], have, trace);
      haveSel[t] = have;
      std::copy(yt.begin(), yt.end(), y.begin() + t * d);
    }
    return y;
  };
  std::vector<float> Hin(T * d), finalIn(T * d);

  if (c.hcMult == 0) { // plain pre-norm residual (GLM-5.3)
    std::vector<float> x(T * d);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(w_->embed.row(tokens[t]), d, x.begin() + t * d);
    for (int64_t l = 0; l < c.numLayers; ++l) {
      const LayerWeights &L = w_->layers[l];
      for (int64_t t = 0; t < T; ++t)
        rmsNorm(x.data() + t * d, L.inputNorm.data(), Hin.data() + t * d, d,
                eps);
      std::vector<float> attn = attend(l, Hin);
      for (int64_t i = 0; i < T * d; ++i)
        x[i] += attn[i];
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> h(d);
        rmsNorm(x.data() + t * d, L.postNorm.data(), h.data(), d, eps);
        std::vector<float> mlp = feedForward(l, h.data(), trace);
        for (int64_t i = 0; i < d; ++i)
          x[t * d + i] += mlp[i];
      }
    }
    finalIn = std::move(x);
  } else {
    // mHC (GLM-5.3-Flash): S residual streams per token, each starting as
    // the embedding; every sublayer reads a pre-weighted sum of them and
    // writes back through post and the Sinkhorn-normalised comb.
    const int64_t S = c.hcMult;
    std::vector<std::vector<float>> X(T, std::vector<float>(S * d));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < S; ++j)
        std::copy_n(w_->embed.row(tokens[t]), d, X[t].begin() + j * d);
    std::vector<HyperMix> mix(T);
    for (int64_t l = 0; l < c.numLayers; ++l) {
      const LayerWeights &L = w_->layers[l];
      for (int64_t t = 0; t < T; ++t) {
        mix[t] = hyperConnMix(L.attnHc, X[t], S, eps, c.hcEps,
                              c.hcSinkhornIters);
        std::vector<float> u = hyperConnCollapse(mix[t], X[t], S);
        rmsNorm(u.data(), L.inputNorm.data(), Hin.data() + t * d, d, eps);
      }
      std::vector<float> y = attend(l, Hin);
      for (int64_t t = 0; t < T; ++t) {
        hyperConnExpand(mix[t],
                        std::vector<float>(y.begin() + t * d,
                                           y.begin() + (t + 1) * d),
                        X[t], S);
        HyperMix m = hyperConnMix(L.ffnHc, X[t], S, eps, c.hcEps,
                                  c.hcSinkhornIters);
        std::vector<float> u = hyperConnCollapse(m, X[t], S), h(d);
        rmsNorm(u.data(), L.postNorm.data(), h.data(), d, eps);
        hyperConnExpand(m, feedForward(l, h.data(), trace), X[t], S);
      }
    }
    for (int64_t t = 0; t < T; ++t) // the unweighted mean of the streams
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j)
          acc += X[t][j * d + i];
        finalIn[t * d + i] = (float)(acc / (double)S);
      }
  }
  s.length = base + T;
  if (hidden)
    *hidden = finalIn;
  std::vector<float> logits;
  logits.reserve(T * c.vocabSize);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> h(d);
    rmsNorm(finalIn.data() + t * d, w_->finalNorm.data(), h.data(), d, eps);
    std::vector<float> row = lmHead(h.data(), w_->lmHead);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

} // namespace glm::rt::cpu
