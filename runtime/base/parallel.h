//===- parallel.h - the one fork/join helper (codec, NVRTC builds) -------===//
//
// The codec splits tiles and matrix blocks over std::thread, the compiler and
// the GPU tools build kernels with NVRTC on every core; this is the one place
// that decides how many threads a job gets, so small jobs stay serial.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace glm::rt {

inline int hardwareThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? (int)n : 1;
}

/// Runs fn(begin, end, worker) over [0, n) in chunks of `grain`, on up to
/// `threads` threads (0 = hardware concurrency). The first exception thrown by
/// any worker is rethrown on the caller's thread.
template <class Fn>
void parallelFor(int64_t n, int64_t grain, int threads, Fn &&fn) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = (n + grain - 1) / grain;
  int want = threads > 0 ? threads : hardwareThreads();
  int nt = (int)std::min<int64_t>(want, chunks);
  if (nt <= 1) {
    fn((int64_t)0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr err;
  std::mutex errMu;
  auto work = [&](int worker) {
    try {
      for (;;) {
        int64_t c = next.fetch_add(1);
        if (c >= chunks)
          return;
        int64_t b = c * grain;
        fn(b, std::min(n, b + grain), worker);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(errMu);
      if (!err)
        err = std::current_exception();
      next.store(chunks);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < nt; ++i)
    pool.emplace_back(work, i);
  work(0);
  for (auto &t : pool)
    t.join();
  if (err)
    std::rethrow_exception(err);
}

} // namespace glm::rt
