//===- generator.cpp - the backend-independent half of generate() --------===//
#include "runtime/gen/generator.h"

#include "runtime/base/error.h"

#include <algorithm>

namespace glm::rt {

namespace {

/// The drafting half of runGeneration, after the prompt: `logits` is the
/// prompt's last row. Emits the tokens plain decoding would (see
/// DraftHooks), with the same logits rows and sample callbacks.
GenerationResult runDrafted(const ModelConfig &c, int64_t maxContext,
                            const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const Generator::TokenCallback &onToken,
                            std::vector<float> *logitsOut,
                            const Generator::SampleCallback &onSample,
                            const DraftHooks &hooks, Sampler &sampler,
                            const std::vector<float> &promptLogits,
                            GenerationResult res) {
  const int64_t V = c.vocabSize;
  // Adds a sampled token; false when generation ends with it.
  auto emit = [&](int64_t tok, const SampledToken &info) {
    if (onSample && params.topLogprobs >= 0)
      onSample(info);
    res.tokens.push_back(tok);
    const bool more = !onToken || onToken(tok);
    if (std::find(params.stopIds.begin(), params.stopIds.end(), tok) !=
        params.stopIds.end()) {
      res.finishReason = "stop";
      return false;
    }
    if (!more) {
      res.finishReason = "cancelled";
      return false;
    }
    return int64_t(res.tokens.size()) < params.maxNew;
  };
  SampledToken info;
  int64_t t = sampler.sample(promptLogits.data(), V,
                             onSample ? &info : nullptr);
  if (!emit(t, info))
    return res;
  // t is emitted and not fed yet; q is the position before it, `row` that
  // position's hidden row in the last step.
  int64_t q = int64_t(prompt.size()) - 1;
  int32_t row = -1;
  while (true) {
    // At most the tokens still allowed (a round emits up to k + 1) and the
    // positions the KV cache has left.
    const int64_t left = params.maxNew - int64_t(res.tokens.size());
    int64_t k = std::max<int64_t>(
        0, std::min<int64_t>({hooks.tokens, left - 1, maxContext - q - 2}));
    while (k > 0 && hooks.canVerify && !hooks.canVerify(k + 1))
      --k;
    std::vector<int64_t> rows = {t};
    for (int64_t i = 0; i < k; ++i) {
      const std::vector<float> l =
          i == 0 ? hooks.draft(t, q, row) : hooks.draft(rows.back(), q + i, 0);
      rows.push_back(argmax(l.data(), V));
    }
    const std::vector<float> out = hooks.verify(rows, q + 1);
    check(out.size() == rows.size() * size_t(V), "verify returned ",
          out.size() / size_t(V), " logits rows for ", rows.size(),
          " (internal)");
    ++res.verifySteps;
    res.drafted += k;
    for (int64_t i = 0; i <= k; ++i) {
      const float *r = out.data() + i * V;
      if (logitsOut)
        logitsOut->insert(logitsOut->end(), r, r + V);
      const int64_t s =
          i < k ? sampler.sampleAgainstDraft(r, V, rows[i + 1],
                                             onSample ? &info : nullptr)
                : sampler.sample(r, V, onSample ? &info : nullptr);
      if (!emit(s, info))
        return res;
      if (i < k && s == rows[i + 1]) {
        ++res.accepted;
        continue;
      }
      // s is the next round's first token: it follows row i.
      t = s;
      q = q + 1 + i;
      row = int32_t(i);
      break;
    }
  }
}

} // namespace

GenerationResult
runGeneration(const ModelConfig &c, int64_t maxContext,
              const std::vector<int64_t> &prompt, const SamplingParams &params,
              const Generator::TokenCallback &onToken,
              std::vector<float> *logitsOut,
              const std::function<std::vector<float>(int64_t)> &step,
              const Generator::SampleCallback &onSample,
              const std::function<std::vector<float>(
                  const std::vector<int64_t> &)> &prefill,
              const DraftHooks *draft) {
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
    // Every row, or without logitsOut only the last one.
    check(rows.size() == prompt.size() * V || (!logitsOut && rows.size() == V),
          "prefill returned ", rows.size() / V, " logits rows for ",
          prompt.size(), " prompt tokens (internal)");
    logits.assign(rows.end() - V, rows.end());
    if (logitsOut)
      logitsOut->insert(logitsOut->end(), rows.begin(), rows.end());
  } else {
    for (int64_t t : prompt)
      feed(t);
  }
  res.finishReason = "length";
  if (draft && draft->tokens > 0 && params.maxNew > 0)
    return runDrafted(c, maxContext, prompt, params, onToken, logitsOut,
                      onSample, *draft, sampler, logits, std::move(res));
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
