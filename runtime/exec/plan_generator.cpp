//===- plan_generator.cpp - a Generator that runs the plan ----------------===//
#include "runtime/exec/plan_generator.h"

#include "runtime/base/error.h"

#include <mutex>

namespace glm::rt::exec {

namespace {

class PlanGenerator final : public Generator {
public:
  PlanGenerator(std::unique_ptr<PlanExecutor> e, const ModelConfig &c,
                int64_t maxContext, std::string backend, bool chunked,
                int draftTokens)
      : exec_(std::move(e)), config_(c), maxContext_(maxContext),
        backend_(std::move(backend)), chunked_(chunked),
        draftTokens_(draftTokens) {
    if (draftTokens_ > 0) {
      check(draftTokens_ <= 64, "--draft-tokens ", draftTokens_,
            " is more than 64");
      check(exec_->hasDraft(), "--draft mtp: the plan has no MTP draft "
            "graph; re-plan with: ",
            plan::replanCommand(exec_->plan(), "", "", {{"--draft", "mtp"}}));
      check(!exec_->recurrentState(), "--draft mtp: this plan keeps "
            "recurrent state (GLM-5.3-Flash's KDA layers), which a rejected "
            "draft row would advance; drafting runs GLM-5.3 plans only for "
            "now: run without --draft");
      for (int n = 1; n <= draftTokens_ + 1; n += draftTokens_) {
        bool has = false;
        for (const plan::GraphDef &g : exec_->plan().ranks[0].graphs)
          has |= g.kind == plan::GraphKind::Decode && g.size == uint32_t(n);
        check(has, "--draft-tokens ", draftTokens_, " verifies ",
              draftTokens_ + 1, " rows per step and drafts 1, and the plan "
              "has no decode graph of ", n, " rows; re-plan with "
              "--decode-batches including ", n, " (or lower --draft-tokens)");
      }
    }
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
    int32_t lastRow = 0; // the last fed position's row in its graph
    auto step = [&](int64_t token) {
      std::vector<float> l = exec_->step({int32_t(token)}, {position}, {0});
      ++position;
      lastRow = 0;
      return l;
    };
    // Drafting: the prompt's pairs (hidden row of position i, token i + 1)
    // through the draft graph, so the MTP layer's caches hold the prompt
    // as they will hold each generated token (groups of the draft graphs'
    // sizes, ascending: a group's carried rows overwrite only rows earlier
    // groups already read).
    auto fillMtp = [&](const std::vector<int64_t> &next, int32_t first) {
      for (size_t j = 0; j < next.size();) {
        uint32_t n = 1;
        for (uint32_t b : draftSizes_)
          if (b <= next.size() - j)
            n = std::max(n, b);
        std::vector<int32_t> tok, pos, slot(n, 0), row;
        for (uint32_t r = 0; r < n; ++r) {
          tok.push_back(int32_t(next[j + r]));
          pos.push_back(first + int32_t(j + r));
          row.push_back(int32_t(j + r));
        }
        exec_->draft(tok, pos, slot, row);
        j += n;
      }
    };
    const bool drafting = draftTokens_ > 0 && params.maxNew > 0;
    // The prompt token after index i, if the prompt has one.
    auto nextOf = [&](size_t i, size_t n) {
      std::vector<int64_t> next;
      for (size_t j = i; j < i + n && j + 1 < prompt.size(); ++j)
        next.push_back(prompt[j + 1]);
      return next;
    };
    auto promptStep = [&](int64_t token) {
      const size_t i = size_t(position);
      std::vector<float> l = step(token);
      if (drafting && i + 1 < prompt.size())
        fillMtp(nextOf(i, 1), int32_t(i));
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
          l = promptStep(p[i]);
          ++i;
        } else {
          const std::vector<int32_t> t(p.begin() + i, p.begin() + i + n);
          const int32_t at = position;
          l = exec_->prefill(t, position, 0, logitsOut == nullptr);
          position += int32_t(n);
          lastRow = int32_t(n) - 1;
          if (drafting)
            fillMtp(nextOf(i, n), at);
          i += n;
        }
        if (logitsOut)
          rows.insert(rows.end(), l.begin(), l.end());
        else // sampling needs the prompt's last row only
          rows.assign(l.end() - config_.vocabSize, l.end());
      }
      return rows;
    };
    using PrefillFn =
        std::function<std::vector<float>(const std::vector<int64_t> &)>;
    if (!drafting)
      return runGeneration(config_, maxContext_, prompt, params, onToken,
                           logitsOut, step, onSample,
                           chunked_ ? PrefillFn(prefill) : PrefillFn());
    DraftHooks hooks;
    hooks.tokens = draftTokens_;
    hooks.canVerify = [&](int64_t rows) {
      for (const plan::GraphDef &g : exec_->plan().ranks[0].graphs)
        if (g.kind == plan::GraphKind::Decode && g.size == uint64_t(rows))
          return true;
      return false;
    };
    hooks.verify = [&](const std::vector<int64_t> &rows, int64_t at) {
      std::vector<int32_t> tok(rows.begin(), rows.end()), pos, slot;
      for (size_t r = 0; r < rows.size(); ++r) {
        pos.push_back(int32_t(at + int64_t(r)));
        slot.push_back(0);
      }
      return exec_->step(tok, pos, slot);
    };
    hooks.draft = [&](int64_t token, int64_t at, int32_t row) {
      return exec_->draft({int32_t(token)}, {int32_t(at)}, {0},
                          {row < 0 ? lastRow : row});
    };
    return runGeneration(config_, maxContext_, prompt, params, onToken,
                         logitsOut, promptStep, onSample,
                         chunked_ ? PrefillFn(prefill) : PrefillFn(), &hooks);
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
  int draftTokens_;
  std::vector<uint32_t> draftSizes_ = draftGraphSizes();
  std::vector<uint32_t> draftGraphSizes() const {
    std::vector<uint32_t> out;
    if (exec_)
      for (const plan::GraphDef &g : exec_->plan().ranks[0].graphs)
        if (g.kind == plan::GraphKind::Draft)
          out.push_back(g.size);
    return out;
  }
};

} // namespace

std::unique_ptr<Generator>
makePlanGenerator(std::unique_ptr<PlanExecutor> executor,
                  const ModelConfig &config, int64_t maxContext,
                  std::string backend, bool chunkedPrefill,
                  int draftTokens) {
  return std::make_unique<PlanGenerator>(std::move(executor), config,
                                         maxContext, std::move(backend),
                                         chunkedPrefill, draftTokens);
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
