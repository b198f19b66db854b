//===- progress.h - progress of long work, on a terminal or piped ---------===//
//
// Thread-safe: workers call advance(). On a terminal stderr gets a bar
// redrawn in place; piped (logs, CI, `2> file`) it gets plain lines
// instead, never carriage returns: the stage running, the count and an ETA,
// once the work has run 2 s and then at most every 10 % (and 1 s) or every
// 5 s, plus a last "done" line. GLM_PROGRESS=1 forces the bar,
// GLM_PROGRESS=lines the lines from the start, GLM_PROGRESS=0 silences both.
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
  /// Names the stage now running ("import", "glm-fuse"); shown with the
  /// count, and a new stage is a reason for a piped line.
  void stage(const std::string &name);
  void finish();

  enum class Mode { Off, Bar, Lines };

private:
  void draw(bool final);
  void maybeLine(bool final);
  std::string label_, unit_, stage_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  Mode mode_;
  bool finished_ = false, stageChanged_ = false, printedLine_ = false;
  double firstLineAfterS_ = 2.0;
  int lastDecile_ = 0;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, lastDraw_;
};

/// When a piped progress line is due: after `firstAfterS` of work, at most
/// once a second, and then for a new tenth of the work, a new stage, or 5 s
/// without a line.
bool progressLineDue(double elapsedS, double sinceLastS, bool printedAny,
                     double firstAfterS, int decile, int lastDecile,
                     bool stageChanged);

/// One piped line: "compile: 3/7 stages (glm-fuse), 2.1 s, about 3 s
/// left"; the final one "compile: done, 7/7 stages in 4.0 s".
std::string progressLine(const std::string &label, const std::string &unit,
                         const std::string &stage, uint64_t done,
                         uint64_t total, double elapsedS, bool final);

} // namespace glm::rt
