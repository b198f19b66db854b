//===- progress.cpp -------------------------------------------------------===//
#include "runtime/base/progress.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace glm::rt {

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  const char *env = std::getenv("GLM_PROGRESS");
  enabled_ = env ? env[0] == '1' : isatty(2);
  start_ = lastDraw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t n) {
  done_ += n;
  if (!enabled_)
    return;
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (now - lastDraw_ > std::chrono::milliseconds(100)) {
    lastDraw_ = now;
    draw(false);
  }
}

void Progress::update(uint64_t done) {
  uint64_t cur = done_.load();
  if (done > cur)
    advance(done - cur);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_)
    return;
  finished_ = true;
  if (enabled_)
    draw(true);
}

void Progress::draw(bool final) {
  uint64_t d = done_.load();
  double frac = total_ ? (double)d / (double)total_ : 1.0;
  if (frac > 1)
    frac = 1;
  int width = 30, filled = (int)(frac * width);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start_)
                    .count();
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::fprintf(stderr, "\r%s [%s] %llu/%llu%s%s %.1fs%s", label_.c_str(),
               bar.c_str(), (unsigned long long)d, (unsigned long long)total_,
               unit_.empty() ? "" : " ", unit_.c_str(), secs,
               final ? "\n" : "");
  std::fflush(stderr);
}

} // namespace glm::rt
