//===- sampler.h - seeded sampling: penalties, top-k/p, min-p, logprobs ---===//
//
// Sampling is deterministic for a given seed on every machine: the PRNG is
// xoshiro256** seeded through splitmix64 (both written out here, no <random>
// distributions whose results differ between standard libraries), and the
// probabilities are computed in double. Greedy and temperature 0 pick the
// largest (penalised) logit, lower token id on ties.
//
// One step, in this order (vLLM's and transformers' order):
//   1. penalties on the logits: repetition (prompt + generated tokens),
//      presence and frequency (generated tokens only);
//   2. greedy / temperature 0 / top-k 1: argmax, done;
//   3. divide by the temperature, softmax;
//   4. keep the top-k most likely, then the smallest prefix whose mass
//      reaches top-p (of what top-k kept), then drop every token whose
//      probability is below min-p times the most likely one's;
//   5. draw from what is left, renormalised.
// A TokenConstraint (grammar-constrained decoding), when the params carry
// one, first sets the logits of the tokens it forbids to -inf, so steps 1-5
// only see allowed tokens, greedy and sampled alike.
// Logprobs, when asked for, are of the model's raw distribution: the
// log-softmax of the logits before penalties, temperature and filtering
// (vLLM's default "raw_logprobs"), so they do not depend on the sampling
// settings of the request.
//
// Thread-safety: a Sampler holds PRNG state and the token counts the
// penalties need; one per sequence.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace glm::rt {

/// Which tokens may come next (runtime/serve/grammar.h implements it for
/// JSON and tool calls). One per sequence, owned by its Sampler.
class TokenConstraint {
public:
  virtual ~TokenConstraint() = default;
  /// Sets logits[t] to -inf for every token t that may not come next when
  /// `left` tokens (this one included) may still be generated.
  virtual void mask(float *logits, int64_t n, int64_t left) = 0;
  /// The token that was sampled from the masked logits.
  virtual void accept(int64_t token) = 0;
};
using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

struct SamplingParams {
  bool greedy = true;       // overrides temperature/top-p
  double temperature = 1.0; // 0 = greedy
  double topP = 1.0;        // nucleus mass in (0, 1]
  int64_t topK = 0;         // keep the k most likely; 0 = all
  double minP = 0;          // in [0, 1]; 0 = off
  double repetitionPenalty = 1; // > 0; 1 = off (transformers' formula)
  double presencePenalty = 0;   // OpenAI's formula; 0 = off
  double frequencyPenalty = 0;  // OpenAI's formula; 0 = off
  uint64_t seed = 0;
  int64_t maxNew = 16;      // tokens to generate at most
  std::vector<int64_t> stopIds; // stop when one is generated (kept in output)
  /// -1: no logprobs; k >= 0: the sampled token's logprob and the k most
  /// likely tokens' (see SampledToken).
  int topLogprobs = -1;
  /// Makes the sequence's TokenConstraint; empty: unconstrained. (Ranks of
  /// a multi-process plan each build theirs from the same request.)
  ConstraintFactory constraint;
};

struct TokenLogprob {
  int64_t token;
  double logprob; // natural log, of the raw distribution
};

/// What a sampling step reports when logprobs are asked for.
struct SampledToken {
  int64_t token = -1;
  double logprob = 0;            // of `token`
  std::vector<TokenLogprob> top; // the k most likely, descending, ties by id
};

/// In-place softmax in double over v.
void softmax(std::vector<double> &v);
/// Index of the largest value; ties → lower index (greedy decoding).
int64_t argmax(const float *v, int64_t n);
/// log-softmax of logits[token] and the k most likely tokens (k may be 0).
SampledToken rawLogprobs(const float *logits, int64_t n, int64_t token, int k);

/// xoshiro256** (Blackman & Vigna), seeded by splitmix64.
class Xoshiro256 {
public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();

private:
  uint64_t s_[4];
};

class Sampler {
public:
  /// Throws Error on an out-of-range parameter.
  explicit Sampler(const SamplingParams &p);
  /// The prompt's tokens, which the repetition penalty also counts.
  void setPrompt(const std::vector<int64_t> &prompt);
  /// Picks a token from logits [n] and counts it as generated (for the
  /// penalties); fills `info` when given and params.topLogprobs >= 0.
  /// Throws Error on non-finite logits.
  int64_t sample(const float *logits, int64_t n, SampledToken *info = nullptr);
  /// Speculative sampling against a draft token proposed with certainty
  /// (the MTP head's argmax): accepts `draft` with the probability the
  /// sampling distribution above gives it, else draws from that
  /// distribution without it, renormalised. Either way the token follows
  /// sample()'s distribution (Leviathan et al. 2023, Chen et al. 2023, with
  /// q = a point mass). Greedy: exactly sample(). Counts the token as
  /// generated; `info` as sample()'s.
  int64_t sampleAgainstDraft(const float *logits, int64_t n, int64_t draft,
                             SampledToken *info = nullptr);
  /// The logits after the penalties (step 1 above), for tests.
  std::vector<double> penalised(const float *logits, int64_t n) const;

private:
  /// Steps 1, 3 and 4: the probabilities, the ids by decreasing
  /// probability, how many of them are kept and their mass.
  struct Kept {
    std::vector<double> prob;
    std::vector<int64_t> order;
    int64_t keep = 0;
    double mass = 0;
  };
  Kept kept(const float *logits, int64_t n) const;
  /// Checks the logits are finite; what the pick sees (the constraint's
  /// masked copy, or the logits).
  const float *forPick(const float *logits, int64_t n);
  /// Counts `tok` as generated (steps, constraint, penalties) and fills
  /// `info` from the raw logits; returns tok.
  int64_t taken(int64_t tok, const float *raw, int64_t n, SampledToken *info);
  bool isGreedy() const;
  bool hasPenalties() const;
  int64_t pick(const float *logits, int64_t n);
  SamplingParams p_;
  Xoshiro256 rng_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::vector<float> masked_; // the logits after the constraint
  int64_t steps_ = 0;         // tokens sampled so far
  std::unordered_set<int64_t> prompt_;
  std::unordered_map<int64_t, int64_t> generated_; // token -> count
};

} // namespace glm::rt
