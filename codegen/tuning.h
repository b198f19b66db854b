//===- tuning.h - launch tunings as `glmc compile` options read and write -===//
//
// The text forms of the moe_trellis and dense_trellis launch tunings
// (moe_trellis_abi.h, dense_trellis_abi.h): what `glmc compile
// --moe-trellis-tuning / --dense-trellis-tuning` take, what a plan records
// in its compile options and `glmc inspect` shows. Colon-separated fields
// in the structs' order; a malformed or out-of-range field throws Error.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/dense_trellis_abi.h"
#include "codegen/moe_trellis_abi.h"
#include "runtime/base/error.h"
#include "runtime/base/numbers.h"

#include <sstream>
#include <string>
#include <vector>

namespace glm::codegen {

inline std::vector<std::string> tuningFields(const std::string &text,
                                             size_t n, const char *what,
                                             const char *form) {
  std::vector<std::string> f;
  std::stringstream ss(text);
  for (std::string x; std::getline(ss, x, ':');)
    f.push_back(x);
  rt::check(f.size() == n, what, " \"", text, "\": expected ", n,
            " colon-separated fields ", form);
  return f;
}

/// "guSplit:downGroup:threads:pipe:minBlocks", e.g. the GLM-5.3 default
/// "24:2:128:4:4".
inline MoeTrellisTuning parseMoeTrellisTuning(const std::string &text) {
  const char *what = "--moe-trellis-tuning";
  auto f = tuningFields(text, 5, what, "guSplit:downGroup:threads:pipe:minBlocks");
  MoeTrellisTuning t;
  t.guSplit = int(rt::parseIntIn(f[0], 1, 384, std::string(what) + " guSplit"));
  t.downGroup = int(rt::parseIntIn(f[1], 1, 16, std::string(what) + " downGroup"));
  rt::check(16 % t.downGroup == 0, what, " downGroup ", t.downGroup,
            ": must divide the 16 halves of an expert (1, 2, 4, 8, 16)");
  t.threads = int(rt::parseIntIn(f[2], 32, 256, std::string(what) + " threads"));
  rt::check(t.threads % 32 == 0, what, " threads ", t.threads,
            ": a whole number of warps");
  t.pipe = int(rt::parseIntIn(f[3], 0, 6, std::string(what) + " pipe"));
  rt::check(t.pipe != 1 && t.pipe != 5, what, " pipe ", t.pipe,
            ": the family has 0, 2, 3, 4 and 6");
  t.minBlocks = int(rt::parseIntIn(f[4], 0, 32, std::string(what) + " minBlocks"));
  return t;
}

inline std::string formatMoeTrellisTuning(const MoeTrellisTuning &t) {
  std::ostringstream o;
  o << t.guSplit << ':' << t.downGroup << ':' << t.threads << ':' << t.pipe
    << ':' << t.minBlocks;
  return o.str();
}

/// "warpsPerSm:minRows:maxSplit:threads:pipe:pipeBatched:minBlocks", the
/// default "16:2:128:128:2:2:4".
inline DenseTrellisTuning parseDenseTrellisTuning(const std::string &text) {
  const char *what = "--dense-trellis-tuning";
  auto f = tuningFields(text, 7, what,
                        "warpsPerSm:minRows:maxSplit:threads:pipe:pipeBatched:"
                        "minBlocks");
  auto field = [&](size_t i, int64_t lo, int64_t hi, const char *name) {
    return int(rt::parseIntIn(f[i], lo, hi, std::string(what) + " " + name));
  };
  DenseTrellisTuning t;
  t.warpsPerSm = field(0, 1, 64, "warpsPerSm");
  t.minRows = field(1, 1, 1024, "minRows");
  t.maxSplit = field(2, 1, 4096, "maxSplit");
  t.threads = field(3, 32, 256, "threads");
  rt::check(t.threads % 32 == 0, what, " threads ", t.threads,
            ": a whole number of warps");
  for (size_t i : {4u, 5u}) {
    const int p = field(i, 0, 6, i == 4 ? "pipe" : "pipeBatched");
    rt::check(p != 1 && p != 5, what, " ", i == 4 ? "pipe" : "pipeBatched",
              " ", p, ": the family has 0 (registers), 2, 3, 4 and 6");
    (i == 4 ? t.pipe : t.pipeBatched) = p;
  }
  t.minBlocks = field(6, 0, 32, "minBlocks");
  return t;
}

inline std::string formatDenseTrellisTuning(const DenseTrellisTuning &t) {
  std::ostringstream o;
  o << t.warpsPerSm << ':' << t.minRows << ':' << t.maxSplit << ':'
    << t.threads << ':' << t.pipe << ':' << t.pipeBatched << ':'
    << t.minBlocks;
  return o.str();
}

} // namespace glm::codegen
