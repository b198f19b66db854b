//===- batching_generator.cpp - concurrent generations in shared steps ---===//
#include "runtime/exec/batching_generator.h"

#include "runtime/base/error.h"
#include "runtime/exec/kv_pages.h"
#include "runtime/exec/plan_generator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

namespace glm::rt::exec {

namespace {

namespace gp = glm::plan;

/// How long the scheduler waits for the rows of the other running
/// sequences after the first one arrives (host work between two tokens is
/// microseconds; a client reading slowly must not hold the others).
constexpr auto kGatherMs = std::chrono::milliseconds(5);

class BatchingGenerator final : public Generator {
public:
  BatchingGenerator(std::unique_ptr<PlanExecutor> e, const ModelConfig &c,
                    int64_t maxContext, std::string backend, int maxBatch,
                    bool chunked)
      : exec_(std::move(e)), config_(c), maxContext_(maxContext),
        backend_(std::move(backend)), chunked_(chunked),
        recurrent_(exec_->recurrentState()) {
    const gp::Plan &plan = exec_->plan();
    check(maxContext_ <= plan.model.maxContext, "--max-context ", maxContext_,
          " exceeds the ", plan.model.maxContext,
          " tokens the plan's KV cache holds; re-plan with: ",
          gp::replanCommand(plan, "", "",
                            {{"--max-context", std::to_string(maxContext_)}}));
    for (const gp::GraphDef &g : plan.ranks[0].graphs)
      if (g.kind == gp::GraphKind::Decode)
        decodeSizes_.push_back(g.size);
    std::sort(decodeSizes_.begin(), decodeSizes_.end());
    check(!decodeSizes_.empty() && decodeSizes_[0] == 1,
          "--max-batch: the plan has no decode graph of 1 row; re-plan with "
          "--decode-batches starting at 1");
    const int64_t planSlots = ioBounds(plan).slots;
    // Spare rows of a recurrent plan run in the last slot.
    const int64_t usable =
        recurrent_ && planSlots > 1 ? planSlots - 1 : planSlots;
    spareSlot_ = int32_t(planSlots - 1);
    maxBatch_ = int(std::min<int64_t>(
        {int64_t(maxBatch), usable, int64_t(decodeSizes_.back())}));
    if (maxBatch_ < maxBatch)
      std::cerr << "glm serve: --max-batch " << maxBatch << " runs as "
                << maxBatch_ << ": the plan holds " << planSlots
                << " KV slot(s)"
                << (recurrent_ && planSlots > 1
                        ? " (one kept for the spare rows of its recurrent "
                          "state)"
                        : "")
                << " and decode graphs of up to " << decodeSizes_.back()
                << " rows; re-plan with --kv-slots "
                << maxBatch + (recurrent_ ? 1 : 0)
                << " --decode-batches up to " << std::min(maxBatch, 8)
                << " for more" << std::endl;
    slots_.resize(size_t(usable));
    if (exec_->pageTokens() > 0)
      pool_ = std::make_unique<KvPagePool>(
          exec_->kvPages(), exec_->pageTokens(),
          plan.model.maxContext / exec_->pageTokens());
    scheduler_ = std::thread([this] { schedule(); });
  }

  ~BatchingGenerator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    scheduler_.join();
  }

  GenerationResult generate(const std::vector<int64_t> &prompt,
                            const SamplingParams &params,
                            const TokenCallback &onToken,
                            std::vector<float> *logitsOut,
                            const SampleCallback &onSample) override {
    // Every logits row of the prompt is only there when it runs whole.
    const int32_t slot = admit(prompt, logitsOut == nullptr, params.maxNew);
    struct Release {
      BatchingGenerator &g;
      int32_t slot;
      bool ok = false;
      ~Release() { g.release(slot, ok); }
    } release{*this, slot};
    int32_t position;
    {
      std::lock_guard<std::mutex> lock(mu_);
      position = int32_t(slots_[size_t(slot)].tokens.size());
    }
    const size_t V = size_t(config_.vocabSize);
    auto run = [&](bool prefill, std::vector<int32_t> tokens) {
      Job j;
      j.prefill = prefill;
      j.lastRowOnly = logitsOut == nullptr;
      j.tokens = std::move(tokens);
      j.position = position;
      j.slot = slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        std::vector<int64_t> &held = slots_[size_t(slot)].tokens;
        held.insert(held.end(), j.tokens.begin(), j.tokens.end());
        pending_.push_back(&j);
        work_.notify_all();
        done_.wait(lock, [&] { return j.done; });
      }
      if (j.error)
        std::rethrow_exception(j.error);
      position += int32_t(j.tokens.size());
      return std::move(j.logits);
    };
    auto step = [&](int64_t token) { return run(false, {int32_t(token)}); };
    // The prompt past the reused prefix: chunk after chunk, what no chunk
    // takes row by row in the shared decode steps.
    auto prefill = [&](const std::vector<int64_t> &p) {
      const std::vector<uint32_t> chunks =
          chunked_ ? exec_->prefillChunks() : std::vector<uint32_t>();
      std::vector<float> rows;
      for (size_t i = size_t(position); i < p.size();) {
        const uint32_t n =
            choosePrefillChunk(chunks, position, int64_t(p.size() - i),
                               exec_->plan().model.maxContext, recurrent_);
        const size_t take = n ? n : 1;
        std::vector<float> l =
            run(n > 0, std::vector<int32_t>(p.begin() + i,
                                            p.begin() + i + take));
        if (logitsOut)
          rows.insert(rows.end(), l.begin(), l.end());
        else
          rows.assign(l.end() - V, l.end());
        i += take;
      }
      return rows;
    };
    GenerationResult r = runGeneration(config_, maxContext_, prompt, params,
                                       onToken, logitsOut, step, onSample,
                                       prefill);
    release.ok = true;
    return r;
  }

  const ModelConfig &config() const override { return config_; }
  int64_t maxContext() const override { return maxContext_; }
  std::string backendName() const override { return backend_; }

  std::string metricsText() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream o;
    o << "# HELP glm_batch_running_sequences Sequences holding a KV slot "
         "now (serve --max-batch).\n# TYPE glm_batch_running_sequences "
         "gauge\nglm_batch_running_sequences "
      << active_
      << "\n# HELP glm_batch_last_step_rows Sequences in the last decode "
         "step.\n# TYPE glm_batch_last_step_rows gauge\n"
         "glm_batch_last_step_rows "
      << lastRows_
      << "\n# HELP glm_batch_step_rows Sequences per decode step.\n"
         "# TYPE glm_batch_step_rows histogram\n";
    uint64_t below = 0;
    for (size_t b = 0; b < kRowBuckets.size(); ++b) {
      below += rowsHist_[b];
      o << "glm_batch_step_rows_bucket{le=\"" << kRowBuckets[b] << "\"} "
        << below << "\n";
    }
    o << "glm_batch_step_rows_bucket{le=\"+Inf\"} " << steps_
      << "\nglm_batch_step_rows_sum " << stepRows_
      << "\nglm_batch_step_rows_count " << steps_
      << "\n# HELP glm_batch_step_seconds_total Time in decode steps (the "
         "plan's graph, its Io rows and logits), beside the requests' own "
         "work.\n# TYPE glm_batch_step_seconds_total counter\n"
         "glm_batch_step_seconds_total "
      << stepSeconds_
      << "\n# HELP glm_prefill_chunks_total Prefill chunks run.\n"
         "# TYPE glm_prefill_chunks_total counter\nglm_prefill_chunks_total "
      << chunks_
      << "\n# HELP glm_prefix_hit_tokens_total Prompt tokens whose KV a slot "
         "already held (prefix reuse).\n# TYPE glm_prefix_hit_tokens_total "
         "counter\nglm_prefix_hit_tokens_total "
      << prefixHits_
      << "\n# HELP glm_prefix_hit_requests_total Requests that reused a "
         "prefix.\n# TYPE glm_prefix_hit_requests_total counter\n"
         "glm_prefix_hit_requests_total "
      << prefixRequests_ << "\n";
    if (pool_)
      o << "# HELP glm_kv_pages_total KV pages sequences can hold (glmc "
           "compile --kv-pages, less the sink).\n# TYPE glm_kv_pages_total "
           "gauge\nglm_kv_pages_total "
        << pool_->capacity()
        << "\n# HELP glm_kv_pages_in_use KV pages a running sequence "
           "references.\n# TYPE glm_kv_pages_in_use gauge\n"
           "glm_kv_pages_in_use "
        << pool_->inUse()
        << "\n# HELP glm_kv_pages_cached KV pages of finished sequences kept "
           "for prefix reuse (evicted least recently used first).\n"
           "# TYPE glm_kv_pages_cached gauge\nglm_kv_pages_cached "
        << pool_->cached()
        << "\n# HELP glm_kv_page_waits_total Requests that waited for KV "
           "pages.\n# TYPE glm_kv_page_waits_total counter\n"
           "glm_kv_page_waits_total "
        << pageWaits_ << "\n";
    return o.str();
  }

private:
  /// One unit of a sequence's work: a decode row or a prefill chunk.
  struct Job {
    bool prefill = false;
    bool lastRowOnly = false; // a chunk's logits: only its last row
    std::vector<int32_t> tokens;
    int32_t position = 0, slot = 0;
    std::vector<float> logits;
    std::exception_ptr error;
    bool done = false;
  };
  struct Slot {
    std::vector<int64_t> tokens; // whose KV (and state) the slot holds
    bool busy = false;
    uint64_t lastUse = 0;
    // Paged plans: the sequence's page table, its pages, and how many of
    // them it has published (KvPagePool).
    std::vector<int32_t> table;
    int64_t pages = 0, published = 0;
  };

  /// Waits for a free slot (and room under --max-batch); takes the one
  /// sharing the longest prefix with `prompt` (or, without `reuse`, none)
  /// and keeps that prefix in it. Paged plans: admitPaged.
  int32_t admit(const std::vector<int64_t> &prompt, bool reuse,
                int64_t maxNew) {
    if (pool_)
      return admitPaged(prompt, reuse, maxNew);
    std::unique_lock<std::mutex> lock(mu_);
    free_.wait(lock, [&] {
      if (active_ >= maxBatch_)
        return false;
      for (const Slot &s : slots_)
        if (!s.busy)
          return true;
      return false;
    });
    size_t best = slots_.size(), bestLen = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot &s = slots_[i];
      if (s.busy)
        continue;
      size_t len = 0;
      if (reuse) {
        // At least the prompt's last token runs: its logits come from it.
        const size_t most = std::min(s.tokens.size(), prompt.size() - 1);
        while (len < most && s.tokens[len] == prompt[len])
          ++len;
        if (recurrent_ && len != s.tokens.size())
          len = 0; // the state holds all of s.tokens: no rewinding it
      }
      if (best == slots_.size() || len > bestLen ||
          (len == bestLen && s.lastUse < slots_[best].lastUse)) {
        best = i;
        bestLen = len;
      }
    }
    Slot &s = slots_[best];
    s.busy = true;
    s.tokens.resize(bestLen);
    ++active_;
    if (bestLen > 0) {
      prefixHits_ += bestLen;
      ++prefixRequests_;
    }
    return int32_t(best);
  }

  /// Paged plans: waits for a free slot, room under --max-batch and the
  /// pages of prompt + maxNew tokens; takes the cached pages that begin the
  /// prompt (shared with whoever else holds them) and new ones for the
  /// rest. The slot's table reaches the plan before its first job runs.
  int32_t admitPaged(const std::vector<int64_t> &prompt, bool reuse,
                     int64_t maxNew) {
    const int64_t tokens =
        std::min<int64_t>(int64_t(prompt.size()) + std::max<int64_t>(maxNew, 0),
                          exec_->plan().model.maxContext);
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t total = pool_->pagesFor(tokens);
    check(total <= pool_->capacity(), "this request's ", tokens,
          " tokens need ", total, " KV pages of ", pool_->pageTokens(),
          " tokens; the plan has ", pool_->capacity(),
          " (glmc compile --kv-pages): re-plan with more, or send fewer "
          "tokens");
    std::vector<int32_t> matched;
    bool waited = false;
    free_.wait(lock, [&] {
      matched = reuse ? pool_->match(prompt) : std::vector<int32_t>();
      bool slot = false;
      for (const Slot &s : slots_)
        slot |= !s.busy;
      const bool ok =
          active_ < maxBatch_ && slot && pool_->fits(matched, total);
      waited |= !ok;
      return ok;
    });
    pageWaits_ += waited;
    size_t best = 0;
    while (slots_[best].busy)
      ++best;
    Slot &s = slots_[best];
    s.busy = true;
    s.table = pool_->acquire(matched, total);
    s.pages = total;
    s.published = int64_t(matched.size());
    const size_t reused = matched.size() * size_t(pool_->pageTokens());
    s.tokens.assign(prompt.begin(), prompt.begin() + reused);
    tables_.emplace_back(int32_t(best), s.table);
    ++active_;
    if (reused > 0) {
      prefixHits_ += reused;
      ++prefixRequests_;
    }
    return int32_t(best);
  }

  /// Paged plans: files the pages of `slot` its written tokens complete
  /// (under mu_), for the prompts that begin with them.
  void publishPages(int32_t slot, int64_t written) {
    Slot &s = slots_[size_t(slot)];
    const int64_t full = std::min(written / pool_->pageTokens(), s.pages);
    for (; s.published < full; ++s.published)
      pool_->publish(s.table, s.published, s.tokens);
  }

  /// The sequence in `slot` ended; its tokens stay for prefix reuse when
  /// it ended cleanly (`ok`), else the slot is emptied. Paged: its pages'
  /// references go (the published ones stay cached).
  void release(int32_t slot, bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Slot &s = slots_[size_t(slot)];
      s.busy = false;
      s.lastUse = ++clock_;
      if (!ok || pool_)
        s.tokens.clear();
      if (pool_) {
        pool_->release(s.table, s.pages);
        s.pages = s.published = 0;
      }
      --active_;
    }
    free_.notify_all();
    work_.notify_all(); // one fewer row to wait for
  }

  /// The scheduler thread: gathers rows, runs a decode step and at most
  /// one prefill chunk, hands back the logits; until the destructor.
  void schedule() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty())
        return; // stop_
      work_.wait_for(lock, kGatherMs, [&] {
        return stop_ || int(pending_.size()) >= active_;
      });
      std::vector<std::pair<int32_t, std::vector<int32_t>>> tables;
      tables.swap(tables_);
      std::vector<Job *> rows;
      Job *chunk = nullptr;
      for (auto it = pending_.begin(); it != pending_.end();) {
        Job *j = *it;
        if (!j->prefill && int(rows.size()) < maxBatch_) {
          rows.push_back(j);
          it = pending_.erase(it);
        } else if (j->prefill && !chunk) {
          chunk = j;
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      // Page tables of the sequences admitted since: before their jobs.
      for (const auto &[slot, table] : tables)
        exec_->setPageTable(slot, table);
      const auto t0 = std::chrono::steady_clock::now();
      runRows(rows);
      const auto t1 = std::chrono::steady_clock::now();
      if (chunk)
        runChunk(*chunk);
      lock.lock();
      stepSeconds_ += std::chrono::duration<double>(t1 - t0).count();
      for (Job *j : rows)
        j->done = true;
      if (chunk) {
        chunk->done = true;
        ++chunks_;
      }
      if (pool_) // what the jobs wrote, for the prompts that follow
        for (Job *j : rows)
          if (!j->error)
            publishPages(j->slot, j->position + int64_t(j->tokens.size()));
      if (pool_ && chunk && !chunk->error)
        publishPages(chunk->slot,
                     chunk->position + int64_t(chunk->tokens.size()));
      if (!rows.empty()) {
        ++steps_;
        stepRows_ += rows.size();
        lastRows_ = int(rows.size());
        for (size_t b = 0; b < kRowBuckets.size(); ++b)
          if (int(rows.size()) <= kRowBuckets[b]) {
            ++rowsHist_[b];
            break;
          }
      }
      done_.notify_all();
    }
  }
  /// One decode step of `rows` (one row each), padded to the smallest
  /// decode graph that holds them.
  void runRows(const std::vector<Job *> &rows) {
    if (rows.empty())
      return;
    try {
      uint32_t B = 0;
      for (uint32_t s : decodeSizes_)
        if (s >= rows.size()) {
          B = s;
          break;
        }
      check(B > 0, "no decode graph holds ", rows.size(), " rows (internal)");
      std::vector<int32_t> tok, pos, slot;
      for (const Job *j : rows) {
        tok.push_back(j->tokens[0]);
        pos.push_back(j->position);
        slot.push_back(j->slot);
      }
      while (tok.size() < B) {
        if (recurrent_) { // the spare slot, a fresh sequence at 0
          tok.push_back(0);
          pos.push_back(0);
          slot.push_back(spareSlot_);
        } else { // row 0 again: the same KV bits written twice
          tok.push_back(tok[0]);
          pos.push_back(pos[0]);
          slot.push_back(slot[0]);
        }
      }
      const std::vector<float> l = exec_->step(tok, pos, slot);
      const size_t V = size_t(config_.vocabSize);
      for (size_t r = 0; r < rows.size(); ++r)
        rows[r]->logits.assign(l.begin() + r * V, l.begin() + (r + 1) * V);
    } catch (...) {
      for (Job *j : rows)
        j->error = std::current_exception();
    }
  }

  void runChunk(Job &j) {
    try {
      j.logits = exec_->prefill(j.tokens, j.position, j.slot, j.lastRowOnly);
    } catch (...) {
      j.error = std::current_exception();
    }
  }

  static constexpr std::array<int, 7> kRowBuckets = {1, 2, 4, 8, 16, 32, 64};

  std::unique_ptr<PlanExecutor> exec_;
  ModelConfig config_;
  int64_t maxContext_;
  std::string backend_;
  bool chunked_, recurrent_;
  std::vector<uint32_t> decodeSizes_;
  int maxBatch_ = 1;
  int32_t spareSlot_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_, done_, free_;
  std::vector<Slot> slots_;
  std::deque<Job *> pending_;
  std::unique_ptr<KvPagePool> pool_; // paged plans (--kv-page-tokens)
  // Page tables of admitted sequences, for the scheduler to set.
  std::vector<std::pair<int32_t, std::vector<int32_t>>> tables_;
  int active_ = 0;
  uint64_t clock_ = 0;
  bool stop_ = false;
  // Counters for /metrics.
  uint64_t steps_ = 0, stepRows_ = 0, chunks_ = 0, prefixHits_ = 0,
           prefixRequests_ = 0, pageWaits_ = 0;
  std::array<uint64_t, 7> rowsHist_{};
  int lastRows_ = 0;
  double stepSeconds_ = 0;

  std::thread scheduler_; // last: starts after every member above
};

} // namespace

std::unique_ptr<Generator>
makeBatchingGenerator(std::unique_ptr<PlanExecutor> executor,
                      const ModelConfig &config, int64_t maxContext,
                      std::string backend, int maxBatch, bool chunkedPrefill) {
  check(maxBatch >= 1, "--max-batch must be at least 1");
  return std::make_unique<BatchingGenerator>(std::move(executor), config,
                                             maxContext, std::move(backend),
                                             maxBatch, chunkedPrefill);
}

} // namespace glm::rt::exec
