//===- progress.cpp - progress of long work, on a terminal or piped -------===//
//
// A bar redrawn with '\r' on a terminal; plain, rate-limited lines with an
// ETA when stderr is a file or a pipe (progress.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/base/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace glm::rt {

static double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

/// "4.0 s", "2 min 5 s", "1 h 3 min".
static std::string duration(double s) {
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%d min %d s", int(s / 60), int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%d h %d min", int(s / 3600),
                  int(s / 60) % 60);
  return buf;
}

bool progressLineDue(double elapsedS, double sinceLastS, bool printedAny,
                     double firstAfterS, int decile, int lastDecile,
                     bool stageChanged) {
  if (elapsedS < firstAfterS)
    return false;
  if (!printedAny)
    return true;
  if (sinceLastS >= 5.0)
    return true;
  return sinceLastS >= 1.0 && (decile > lastDecile || stageChanged);
}

std::string progressLine(const std::string &label, const std::string &unit,
                         const std::string &stage, uint64_t done,
                         uint64_t total, double elapsedS, bool final) {
  std::string out = label + ": ";
  if (final)
    out += "done, ";
  out += std::to_string(done) + "/" + std::to_string(total);
  if (!unit.empty())
    out += " " + unit;
  if (final)
    return out + " in " + duration(elapsedS);
  if (!stage.empty())
    out += " (" + stage + ")";
  out += ", " + duration(elapsedS);
  if (done > 0 && done < total)
    out += ", about " +
           duration(elapsedS * double(total - done) / double(done)) + " left";
  return out;
}

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  const char *env = std::getenv("GLM_PROGRESS");
  if (env && std::strcmp(env, "lines") == 0) {
    mode_ = Mode::Lines;
    firstLineAfterS_ = 0;
  } else if (env && env[0]) {
    mode_ = env[0] == '1' ? Mode::Bar : Mode::Off;
  } else {
    mode_ = isatty(2) ? Mode::Bar : Mode::Lines;
  }
  start_ = lastDraw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t n) {
  done_ += n;
  if (mode_ == Mode::Off)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_)
    return;
  if (mode_ == Mode::Lines) {
    maybeLine(false);
    return;
  }
  auto now = std::chrono::steady_clock::now();
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

void Progress::stage(const std::string &name) {
  if (mode_ == Mode::Off)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  if (name == stage_ || finished_)
    return;
  stage_ = name;
  stageChanged_ = true;
  if (mode_ == Mode::Lines)
    maybeLine(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_)
    return;
  finished_ = true;
  if (mode_ == Mode::Bar)
    draw(true);
  else if (mode_ == Mode::Lines)
    maybeLine(true);
}

void Progress::maybeLine(bool final) {
  const double elapsed = secondsSince(start_);
  const uint64_t d = done_.load();
  if (final) {
    // A run too short to have printed anything stays silent.
    if (printedLine_)
      std::fprintf(stderr, "%s\n",
                   progressLine(label_, unit_, stage_, d, total_, elapsed, true)
                       .c_str());
    return;
  }
  if (total_ && d >= total_)
    return; // the "done" line follows
  const int decile = total_ ? int(10 * d / total_) : 10;
  if (!progressLineDue(elapsed, secondsSince(lastDraw_), printedLine_,
                       firstLineAfterS_, decile, lastDecile_, stageChanged_))
    return;
  std::fprintf(
      stderr, "%s\n",
      progressLine(label_, unit_, stage_, d, total_, elapsed, false).c_str());
  std::fflush(stderr);
  printedLine_ = true;
  stageChanged_ = false;
  lastDecile_ = decile;
  lastDraw_ = std::chrono::steady_clock::now();
}

void Progress::draw(bool final) {
  uint64_t d = done_.load();
  double frac = total_ ? (double)d / (double)total_ : 1.0;
  if (frac > 1)
    frac = 1;
  int width = 30, filled = (int)(frac * width);
  double secs = secondsSince(start_);
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  std::string stage = final || stage_.empty() ? "" : " " + stage_;
  // \033[K clears what a longer stage name left on the line.
  std::fprintf(stderr, "\r%s [%s] %llu/%llu%s%s%s %.1fs\033[K%s",
               label_.c_str(), bar.c_str(), (unsigned long long)d,
               (unsigned long long)total_, unit_.empty() ? "" : " ",
               unit_.c_str(), stage.c_str(), secs, final ? "\n" : "");
  std::fflush(stderr);
}

} // namespace glm::rt
