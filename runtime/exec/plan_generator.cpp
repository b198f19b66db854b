//===- plan_generator.cpp - a Generator that runs the plan ----------------===//
#include "runtime/exec/plan_generator.h"

#include "runtime/base/error.h"

#include <mutex>

namespace glm::rt::exec {

namespace {

class PlanGenerator final : public Generator {
public:
  PlanGenerator(std::unique_ptr<PlanExecutor> e, const ModelConfig &c,
                int64_t maxContext, std::string backend)
      : exec_(std::move(e)), config_(c), maxContext_(maxContext),
        backend_(std::move(backend)) {
    const auto it = exec_->plan().compileOptions.find("kv_slots");
    check(it != exec_->plan().compileOptions.end(),
          "the plan records no KV slots (kv_slots): it was compiled by a "
          "glmc whose graphs this runtime cannot run; re-plan with this glmc");
    const int64_t planContext = exec_->plan().model.maxContext;
    check(maxContext_ <= planContext, "--max-context ", maxContext_,
          " exceeds the ", planContext, " tokens the plan's KV cache holds; "
          "re-plan with: ",
          plan::replanCommand(exec_->plan(), "", "",
                              {{"--max-context",
                                std::to_string(maxContext_)}}));
  }

  GenerationResult generate(const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const TokenCallback &onToken,
                            std::vector<float> *logitsOut,
                            const SampleCallback &onSample) override {
    std::lock_guard<std::mutex> lock(mu_);
    int32_t position = 0;
    return runGeneration(
        config_, maxContext_, prompt, params, onToken, logitsOut,
        [&](int64_t token) {
          std::vector<float> l =
              exec_->step({int32_t(token)}, {position}, {0});
          ++position;
          return l;
        },
        onSample);
  }
  const ModelConfig &config() const override { return config_; }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return backend_; }

private:
  std::mutex mu_;
  std::unique_ptr<PlanExecutor> exec_;
  ModelConfig config_;
  int64_t maxContext_;
  std::string backend_;
};

} // namespace

std::unique_ptr<Generator>
makePlanGenerator(std::unique_ptr<PlanExecutor> executor,
                  const ModelConfig &config, int64_t maxContext,
                  std::string backend) {
  return std::make_unique<PlanGenerator>(std::move(executor), config,
                                         maxContext, std::move(backend));
}

} // namespace glm::rt::exec
