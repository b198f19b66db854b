//===- forward.h - the reference GLM-5.3 forward, one token at a time -----===//
//
// GLM-5.3-Flash (glm5_next) runs here too: KDA layers (their fp64 delta-rule
// state and conv inputs live in the Session), NoPE MLA with the k-pool
// indexer (pooled keys cached once their pool completes; a query selects the
// top index_topk/index_kpool complete pools plus its own incomplete tail),
// mHC residual streams around every sublayer and clamped SwiGLU. The math is
// shared/specs/glm53-architecture.md section 3 and transformers'
// modeling_glm5_next; flash_ops.h holds its pieces.
//
// Incremental decoding over a latent KV cache (MLA in the absorbed form: per
// token and layer the cache holds [c (kv_lora) | RoPE(k_pe) (rope dim)]; full
// indexer layers also cache their index keys). Every prompt token goes
// through step(), so logits at every position are available.
//
// DSA: a query at position t attends all keys 0..t while t+1 <= index_topk,
// else the index_topk keys with the largest I(t,s) = Σ_h w_h·ReLU(q_h·k_s /
// sqrt(d)); equal scores keep the lower position (deterministic). The query's
// own token is not forced in. Shared indexer layers reuse the selection of
// the most recent full layer for the same query.
//
// Tensor parallelism: each rank's units (tp.h) are computed separately and
// the all-reduce sums per-unit fp64 contributions in a fixed global order, so
// logits are bit-identical for any rank count. Without a HostComm every rank
// runs in this process; with one (a rank process of `glm-engine launch`)
// only the comm's rank is computed and the other ranks' unit contributions
// and vocabulary slices arrive through HostComm::allGather, then are summed
// in the same order: the same bytes as TP=1.
//
// Thread-safety: a CpuForward is immutable; step() on distinct Sessions may
// run concurrently, except with a HostComm (collectives are matched by
// order: one step at a time).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/cpu/model_weights.h"
#include "runtime/cpu/tp.h"
#include "runtime/dist/comm.h"

#include <memory>
#include <vector>

namespace glm::rt::cpu {

/// One sequence's caches. Per-layer vectors run over the decoder layers,
/// then the MTP layers (index num_hidden_layers + m), whose caches fill
/// through mtpStep() and count mtpLength positions.
struct Session {
  int64_t length = 0;                        // tokens processed so far
  int64_t mtpLength = 0;                     // positions in the MTP caches
  std::vector<std::vector<float>> latent;    // per layer [T, kv_lora + dr]
  std::vector<std::vector<float>> indexKeys; // per full layer [T, hd]
  // GLM-5.3-Flash.
  std::vector<std::vector<float>> indexGates; // per full layer [T, hd]: k-pool gate
  std::vector<std::vector<float>> poolKeys;   // per full layer [T/kpool, hd]
  std::vector<std::vector<double>> kdaState;  // per KDA layer [heads, dk, dv]
  std::vector<std::vector<float>> convState;  // per KDA layer [3·qkv, K−1]
};

/// What a step decided, for tests and debugging.
struct StepTrace {
  std::vector<std::vector<int64_t>> selected; // per layer, ascending positions
  std::vector<std::vector<int64_t>> experts;  // per MoE layer, ascending
};

class CpuForward {
public:
  /// `comm` (optional, not owned): this process is comm->rank() of
  /// tp.ranks == comm->size() processes.
  CpuForward(std::shared_ptr<const ModelWeights> weights, TpLayout tp,
             dist::HostComm *comm = nullptr);

  Session newSession() const;
  /// Runs `token` at position s.length and returns logits [vocab]. Throws
  /// Error on a token id outside the vocabulary. `hidden` (optional)
  /// receives the final hidden row [d] before the final norm (Flash: the
  /// mean of the mHC streams): the h_t the MTP head takes.
  std::vector<float> step(Session &s, int64_t token, StepTrace *trace = nullptr,
                          std::vector<float> *hidden = nullptr) const;
  /// Runs a prompt chunk layer by layer (KDA layers in the chunked form)
  /// from position s.length; returns logits [tokens, vocab]. Equals
  /// step() per token up to rounding. `hidden` as step()'s, [tokens, d].
  std::vector<float> prefill(Session &s, const std::vector<int64_t> &tokens,
                             std::vector<float> *hidden = nullptr) const;

  /// Whether the weights carry the MTP head (num_nextn_predict_layers > 0
  /// and the pack stores it).
  bool hasMtp() const { return !w_->mtp.empty(); }
  /// The MTP head m at position t = s.mtpLength (glm53-architecture.md §2
  /// item 8, §3 "MTP"): x = eh_proj [enorm(embed(nextToken)) ;
  /// hnorm(hidden)], one plain pre-norm decoder layer (MLA with its own
  /// index keys and latent cache in `s`, DSA over the MTP cache's positions
  /// 0..t, MoE), then logits = LM head(shared_head.norm(x)): the draft
  /// distribution of token t+2. `hidden` [d] is the main model's hidden row
  /// at position t (step()'s `hidden`; an engine may feed the final-normed
  /// row instead, which only moves acceptance), `nextToken` token t+1.
  /// The MTP caches fill one position per call: feed (h_t, token_{t+1}) for
  /// every t in order (a prompt's pairs, then each decoded token's). For a
  /// further draft token from the same position, feed the returned
  /// `hiddenOut` (the layer's output before shared_head.norm) with the
  /// drafted token at t+1. The head's LM head is the main model's unless
  /// the checkpoint ships shared_head.head. Throws Error without an MTP
  /// head or on a token outside the vocabulary.
  std::vector<float> mtpStep(Session &s, const float *hidden, int64_t nextToken,
                             std::vector<float> *hiddenOut = nullptr,
                             StepTrace *trace = nullptr, int64_t m = 0) const;
  /// Drops MTP cache positions >= length (rejected drafts); length <=
  /// s.mtpLength.
  void truncateMtp(Session &s, int64_t length) const;

  const ModelConfig &config() const { return w_->config; }
  const TpLayout &tp() const { return tp_; }
  const ModelWeights &weights() const { return *w_; }

private:
  /// The ranks this process computes: all of them, or the comm's one.
  std::pair<int, int> myRanks() const;
  /// Layer l's weights: a decoder layer's, an MTP layer's for l >=
  /// num_hidden_layers.
  const LayerWeights &layerWeights(int64_t l) const;
  /// MLA (+ DSA selection into `sel`) of layer l on its input h at
  /// position pos (layer l's caches hold pos tokens); returns the
  /// all-reduced attention output [d].
  std::vector<float> attendMla(Session &s, int64_t l, int64_t pos,
                               const float *h, std::vector<int64_t> &sel,
                               bool &haveSel, StepTrace *trace) const;
  /// Flash's KDA layer l on T tokens H [T, d] (conv, gates, the delta rule
  /// token by token or `chunked`, gated output norm, o_proj); returns the
  /// all-reduced outputs [T, d].
  std::vector<float> attendKda(Session &s, int64_t l, const float *H,
                               int64_t T, bool chunked) const;
  /// step() and prefill(): tokens at positions s.length.. through every
  /// layer, layer by layer; logits [tokens, vocab].
  std::vector<float> runTokens(Session &s, const std::vector<int64_t> &tokens,
                               bool chunked, StepTrace *trace,
                               std::vector<float> *hidden) const;
  /// Dense MLP or MoE of layer l on h; returns the all-reduced output [d].
  std::vector<float> feedForward(int64_t l, const float *h,
                                 StepTrace *trace) const;
  /// Logits [vocab] of `head` (the LM head, or an MTP layer's own).
  std::vector<float> lmHead(const float *h, const Matrix &head) const;

  std::shared_ptr<const ModelWeights> w_;
  TpLayout tp_;
  dist::HostComm *comm_ = nullptr;
};

} // namespace glm::rt::cpu
