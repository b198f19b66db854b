//===- KernelBuilds.cpp - NVRTC builds that overlap the serial passes -----===//
//
// See KernelBuilds.h. A small job queue: workers take the next index under
// a lock, run it without the lock, and count it finished.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/KernelBuilds.h"

#include <algorithm>
#include <exception>

namespace glmc {

void KernelBuilds::start(
    std::vector<KernelBuildResult> results,
    std::vector<std::function<void(KernelBuildResult &)>> jobs, int threads) {
  state = std::make_shared<State>();
  state->results = std::move(results);
  state->jobs = std::move(jobs);
  state->results.resize(state->jobs.size());
  int n = std::max(1, std::min<int>(threads, int(state->jobs.size())));
  for (int t = 0; t < n && !state->jobs.empty(); ++t)
    pool.emplace_back([s = state] {
      for (;;) {
        size_t i;
        {
          std::lock_guard<std::mutex> lock(s->mu);
          if (s->cancel || s->next >= s->jobs.size())
            return;
          i = s->next++;
        }
        try {
          s->jobs[i](s->results[i]);
        } catch (const std::exception &e) {
          s->results[i].error = e.what();
        } catch (...) {
          s->results[i].error = "unknown error while building the kernel";
        }
        std::lock_guard<std::mutex> lock(s->mu);
        ++s->finished;
        s->done.notify_all();
      }
    });
}

void KernelBuilds::wait(const std::function<void(size_t, size_t)> &progress) {
  if (!state)
    return;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    const size_t total = state->jobs.size();
    size_t shown = size_t(-1);
    while (state->finished != total) {
      if (progress && state->finished != shown) {
        shown = state->finished;
        lock.unlock();
        progress(shown, total);
        lock.lock();
        continue;
      }
      state->done.wait(lock);
    }
    if (progress)
      progress(total, total);
  }
  for (std::thread &t : pool)
    t.join();
  pool.clear();
}

const std::vector<KernelBuildResult> &KernelBuilds::results() const {
  static const std::vector<KernelBuildResult> none;
  return state ? state->results : none;
}

KernelBuilds::~KernelBuilds() {
  if (state) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->cancel = true;
  }
  for (std::thread &t : pool)
    t.join();
}

} // namespace glmc
