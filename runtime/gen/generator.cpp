//===- generator.cpp - the backend-independent half of generate() --------===//
#include "runtime/gen/generator.h"

#include "runtime/base/error.h"

#include <algorithm>

namespace glm::rt {

GenerationResult
runGeneration(const ModelConfig &c, int64_t maxContext,
              const std::vector<int64_t> &prompt, const SamplingParams &params,
              const Generator::TokenCallback &onToken,
              std::vector<float> *logitsOut,
              const std::function<std::vector<float>(int64_t)> &step,
              const Generator::SampleCallback &onSample,
              const std::function<std::vector<float>(
                  const std::vector<int64_t> &)> &prefill) {
  check(!prompt.empty(), "the prompt is empty: give at least one token");
  check(params.maxNew >= 0, "--max-new must be >= 0");
  // Written as a difference: prompt + maxNew overflows for a huge maxNew.
  check((int64_t)prompt.size() <= maxContext &&
            params.maxNew <= maxContext - (int64_t)prompt.size(),
        "prompt (",
        prompt.size(), " tokens) + max new tokens (", params.maxNew,
        ") exceeds the context of ", maxContext, " tokens; lower --max-new, "
        "shorten the prompt or compile the plan with a larger --max-context");
  for (int64_t t : prompt)
    check(t >= 0 && t < c.vocabSize, "prompt token id ", t,
          " is outside the vocabulary [0, ", c.vocabSize, ")");
  Sampler sampler(params);
  sampler.setPrompt(prompt);
  GenerationResult res;
  res.promptTokens = (int64_t)prompt.size();
  std::vector<float> logits;
  auto feed = [&](int64_t token) {
    logits = step(token);
    if (logitsOut)
      logitsOut->insert(logitsOut->end(), logits.begin(), logits.end());
  };
  if (prefill) {
    std::vector<float> rows = prefill(prompt);
    const size_t V = size_t(c.vocabSize);
    check(rows.size() == prompt.size() * V, "prefill returned ",
          rows.size() / V, " logits rows for ", prompt.size(),
          " prompt tokens (internal)");
    logits.assign(rows.end() - V, rows.end());
    if (logitsOut)
      logitsOut->insert(logitsOut->end(), rows.begin(), rows.end());
  } else {
    for (int64_t t : prompt)
      feed(t);
  }
  res.finishReason = "length";
  for (int64_t i = 0; i < params.maxNew; ++i) {
    SampledToken info;
    int64_t tok =
        sampler.sample(logits.data(), c.vocabSize, onSample ? &info : nullptr);
    if (onSample && params.topLogprobs >= 0)
      onSample(info);
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

} // namespace glm::rt
