//===- plan_generator.cpp - a Generator that runs the plan ----------------===//
#include "runtime/exec/plan_generator.h"

#include "runtime/base/error.h"

#include <mutex>

namespace glm::rt::exec {

namespace {

class PlanGenerator final : public Generator {
public:
  PlanGenerator(std::unique_ptr<PlanExecutor> e, const ModelConfig &c,
                int64_t maxContext, std::string backend, bool chunked)
      : exec_(std::move(e)), config_(c), maxContext_(maxContext),
        backend_(std::move(backend)), chunked_(chunked) {
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
    auto step = [&](int64_t token) {
      std::vector<float> l = exec_->step({int32_t(token)}, {position}, {0});
      ++position;
      return l;
    };
    // Chunk after chunk; what no chunk takes goes token by token.
    auto prefill = [&](const std::vector<int64_t> &p) {
      const std::vector<uint32_t> chunks = exec_->prefillChunks();
      const int64_t ctx = exec_->plan().model.maxContext;
      std::vector<float> rows;
      for (size_t i = 0; i < p.size();) {
        const uint32_t n =
            choosePrefillChunk(chunks, position, int64_t(p.size() - i), ctx,
                               exec_->recurrentState());
        std::vector<float> l;
        if (n == 0) {
          l = step(p[i]);
          ++i;
        } else {
          const std::vector<int32_t> t(p.begin() + i, p.begin() + i + n);
          l = exec_->prefill(t, position, 0);
          position += int32_t(n);
          i += n;
        }
        rows.insert(rows.end(), l.begin(), l.end());
      }
      return rows;
    };
    using PrefillFn =
        std::function<std::vector<float>(const std::vector<int64_t> &)>;
    return runGeneration(config_, maxContext_, prompt, params, onToken,
                         logitsOut, step, onSample,
                         chunked_ ? PrefillFn(prefill) : PrefillFn());
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
  bool chunked_;
};

} // namespace

std::unique_ptr<Generator>
makePlanGenerator(std::unique_ptr<PlanExecutor> executor,
                  const ModelConfig &config, int64_t maxContext,
                  std::string backend, bool chunkedPrefill) {
  return std::make_unique<PlanGenerator>(std::move(executor), config,
                                         maxContext, std::move(backend),
                                         chunkedPrefill);
}

uint32_t choosePrefillChunk(const std::vector<uint32_t> &chunks,
                            int64_t position, int64_t remaining,
                            int64_t maxContext, bool exact) {
  uint32_t largest = 0;
  for (uint32_t c : chunks) {
    if (position + int64_t(c) > maxContext)
      break; // ascending: the larger ones pass the cache too
    if (exact && int64_t(c) > remaining)
      break;
    if (int64_t(c) >= remaining) // the smallest graph that holds the rest
      return remaining * 2 >= int64_t(c) ? uint32_t(remaining) : largest;
    largest = c;
  }
  return largest; // a whole chunk of the largest graph that fits (or 0)
}

} // namespace glm::rt::exec
