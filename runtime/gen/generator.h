//===- generator.h - the generation interface the engine and server use --===//
//
// A Generator turns prompt token ids into generated ids with a sampling
// configuration, calling back once per generated token. The plan executor
// (runtime/exec/plan_generator.h, cpu and cuda backends) and the reference
// forward (runtime/cpu/generator.h) implement it; glm-engine run and the
// server (runtime/serve) only see this interface. It depends on no backend.
//
// Thread-safety: see each implementation (the reference generator allows
// concurrent generate() calls; the plan generator serialises them).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/sampler.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace glm::rt {

struct GenerationResult {
  std::vector<int64_t> tokens; // generated ids; a stop id is included
  std::string finishReason;    // "stop" | "length" | "cancelled"
  int64_t promptTokens = 0;
  // Drafting (--draft mtp): verify steps run, draft tokens proposed and
  // accepted. Tokens per verify step = generated tokens / verifySteps.
  int64_t verifySteps = 0, drafted = 0, accepted = 0;
};

/// Drafting for runGeneration: each round drafts up to `tokens` tokens with
/// the MTP head and verifies them in one step of tokens + 1 rows; a draft is
/// accepted when the token sampled at its position equals it (greedy) or by
/// speculative sampling, so the output is plain decoding's (greedy: token
/// for token).
struct DraftHooks {
  int tokens = 0; // drafts per round (--draft-tokens), >= 1
  /// Whether `verify` takes this many rows (the plan's decode batches);
  /// a round drafts fewer tokens where it must. Unset: any.
  std::function<bool(int64_t rows)> canVerify;
  /// Feeds `rows` at positions position, position + 1, ... as one step;
  /// returns their logits rows.
  std::function<std::vector<float>(const std::vector<int64_t> &rows,
                                   int64_t position)>
      verify;
  /// The MTP head's logits for `token` after hidden row `row` of the last
  /// step (-1: the prompt's last position) at MTP position `position` (the
  /// position of that row); row 0 after a draft continues from the draft.
  std::function<std::vector<float>(int64_t token, int64_t position,
                                   int32_t row)>
      draft;
};

class Generator {
public:
  virtual ~Generator() = default;
  /// Called after each generated token; return false to stop generating
  /// (finishReason "cancelled", e.g. a client that disconnected).
  using TokenCallback = std::function<bool(int64_t token)>;
  /// Called before onToken with the token's logprobs when
  /// params.topLogprobs >= 0 (see SampledToken: the raw distribution).
  using SampleCallback = std::function<void(const SampledToken &)>;

  /// Runs the prompt, then samples up to params.maxNew tokens, stopping
  /// after a token in params.stopIds. When `logits` is given it receives
  /// rows [positions, vocab] flattened: one per prompt position, then one
  /// per generated token that was fed back (every generated token except
  /// the last), i.e. the distribution each token was drawn from, in order.
  /// Throws Error on an empty prompt, an id outside the vocabulary or a
  /// prompt + maxNew longer than maxContext().
  virtual GenerationResult generate(const std::vector<int64_t> &prompt,
                                    const SamplingParams &params,
                                    const TokenCallback &onToken = {},
                                    std::vector<float> *logits = nullptr,
                                    const SampleCallback &onSample = {}) = 0;
  virtual const ModelConfig &config() const = 0;
  virtual int64_t maxContext() const = 0;
  virtual std::string backendName() const = 0;
  /// Prometheus lines of the generator's own counters (the batching
  /// generator: steps, batch sizes, prefix hits), "" when it keeps none.
  virtual std::string metricsText() const { return {}; }
};

/// The backend-independent part of Generator::generate: validates the
/// request against `config` and `maxContext`, feeds the prompt through
/// `step` (one decode position -> its logits [vocab]), then samples and feeds
/// back, with the stop, cancel and logits-row rules documented above.
/// `prefill`, when given, feeds the whole prompt instead (its logits rows
/// [prompt, vocab]: chunked prefill; without `logitsOut` it may return the
/// last row only).
GenerationResult
runGeneration(const ModelConfig &config, int64_t maxContext,
              const std::vector<int64_t> &prompt, const SamplingParams &params,
              const Generator::TokenCallback &onToken,
              std::vector<float> *logitsOut,
              const std::function<std::vector<float>(int64_t)> &step,
              const Generator::SampleCallback &onSample = {},
              const std::function<std::vector<float>(
                  const std::vector<int64_t> &)> &prefill = {},
              const DraftHooks *draft = nullptr);

} // namespace glm::rt
