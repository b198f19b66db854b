//===- progress.h - a terminal progress bar for long work -----------------===//
//
// Thread-safe: workers call advance(). Draws on stderr only when it is a
// terminal (or GLM_PROGRESS=1), so logs and CI output stay clean.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace glm::rt {

class Progress {
public:
  Progress(std::string label, uint64_t total, std::string unit = "");
  ~Progress();
  void advance(uint64_t n = 1);
  /// Sets the absolute count (for callbacks that report done/total).
  void update(uint64_t done);
  void finish();

private:
  void draw(bool final);
  std::string label_, unit_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool enabled_, finished_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, lastDraw_;
};

} // namespace glm::rt
