//===- generator.cpp - the cpu backend's Generator ------------------------===//
#include "runtime/cpu/generator.h"

#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"

#include <algorithm>

namespace glm::rt {
namespace {

class CpuGenerator : public Generator {
public:
  CpuGenerator(std::shared_ptr<const cpu::ModelWeights> w, cpu::TpLayout tp,
               int64_t maxContext, dist::HostComm *comm)
      : fwd_(std::move(w), std::move(tp), comm), maxContext_(maxContext) {}

  GenerationResult generate(const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const TokenCallback &onToken,
                            std::vector<float> *logitsOut) override {
    cpu::Session s = fwd_.newSession();
    return runGeneration(fwd_.config(), maxContext_, prompt, params, onToken,
                         logitsOut,
                         [&](int64_t token) { return fwd_.step(s, token); });
  }

  const ModelConfig &config() const override { return fwd_.config(); }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return "cpu"; }

private:
  cpu::CpuForward fwd_;
  int64_t maxContext_;
};

} // namespace

GenerationResult
runGeneration(const ModelConfig &c, int64_t maxContext,
              const std::vector<int64_t> &prompt, const SamplingParams &params,
              const Generator::TokenCallback &onToken,
              std::vector<float> *logitsOut,
              const std::function<std::vector<float>(int64_t)> &step) {
  check(!prompt.empty(), "the prompt is empty: give at least one token");
  check(params.maxNew >= 0, "--max-new must be >= 0");
  // Written as a difference: prompt + maxNew overflows for a huge maxNew.
  check((int64_t)prompt.size() <= maxContext &&
            params.maxNew <= maxContext - (int64_t)prompt.size(),
        "prompt (",
        prompt.size(), " tokens) + max new tokens (", params.maxNew,
        ") exceeds the context of ", maxContext, " tokens");
  for (int64_t t : prompt)
    check(t >= 0 && t < c.vocabSize, "prompt token id ", t,
          " is outside the vocabulary [0, ", c.vocabSize, ")");
  cpu::Sampler sampler(params);
  GenerationResult res;
  res.promptTokens = (int64_t)prompt.size();
  std::vector<float> logits;
  auto feed = [&](int64_t token) {
    logits = step(token);
    if (logitsOut)
      logitsOut->insert(logitsOut->end(), logits.begin(), logits.end());
  };
  for (int64_t t : prompt)
    feed(t);
  res.finishReason = "length";
  for (int64_t i = 0; i < params.maxNew; ++i) {
    int64_t tok = sampler.sample(logits.data(), c.vocabSize);
    res.tokens.push_back(tok);
    bool more = !onToken || onToken(tok);
    if (std::find(params.stopIds.begin(), params.stopIds.end(), tok) !=
        params.stopIds.end()) {
      res.finishReason = "stop";
      break;
    }
    if (!more) {
      res.finishReason = "cancelled";
      break;
    }
    if (i + 1 == params.maxNew)
      break;
    feed(tok);
  }
  return res;
}

std::unique_ptr<Generator>
makeCpuGenerator(std::shared_ptr<const cpu::ModelWeights> weights,
                 cpu::TpLayout tp, int64_t maxContext,
                 dist::HostComm *comm) {
  return std::make_unique<CpuGenerator>(std::move(weights), std::move(tp),
                                        maxContext, comm);
}

} // namespace glm::rt
