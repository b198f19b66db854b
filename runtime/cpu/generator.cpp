//===- generator.cpp - the reference forward as a Generator ---------------===//
#include "runtime/cpu/generator.h"

#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"

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
                            std::vector<float> *logitsOut,
                            const SampleCallback &onSample) override {
    cpu::Session s = fwd_.newSession();
    // Flash's prompt goes through the chunked KDA form (layer by layer), its
    // generated tokens through the recurrent step: the two paths a serving
    // engine takes. GLM-5.3 prompts run token by token as before.
    std::function<std::vector<float>(const std::vector<int64_t> &)> prefill;
    if (fwd_.config().isFlash())
      prefill = [&](const std::vector<int64_t> &p) {
        return fwd_.prefill(s, p);
      };
    return runGeneration(
        fwd_.config(), maxContext_, prompt, params, onToken, logitsOut,
        [&](int64_t token) { return fwd_.step(s, token); }, onSample,
        prefill);
  }

  const ModelConfig &config() const override { return fwd_.config(); }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return "cpu"; }

private:
  cpu::CpuForward fwd_;
  int64_t maxContext_;
};

} // namespace

std::unique_ptr<Generator>
makeCpuGenerator(std::shared_ptr<const cpu::ModelWeights> weights,
                 cpu::TpLayout tp, int64_t maxContext,
                 dist::HostComm *comm) {
  return std::make_unique<CpuGenerator>(std::move(weights), std::move(tp),
                                        maxContext, comm);
}

} // namespace glm::rt
