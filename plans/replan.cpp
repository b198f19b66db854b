//===- replan.cpp - the glmc compile command that makes a plan again ------===//
//
// Refusals at load (another pack, another ABI, another rank count, a longer
// context) print the command that re-plans. It starts from the command the
// plan records, so what the user chose (--manifest, --arch, --width, the
// tunings) survives, and changes only PACK, -o and what the refusal names.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "runtime/base/command_line.h"

#include <cstring>

namespace glm::plan {

namespace {

/// glmc compile's options that take no value (every other option does).
constexpr const char *kCompileFlags[] = {"--no-nvrtc", "--timing",
                                         "--allow-context-beyond-model"};

bool isFlag(const std::string &w) {
  for (const char *f : kCompileFlags)
    if (w == f)
      return true;
  return false;
}

/// Index of PACK (the one positional of `glmc compile`) in `words`, or -1.
long packIndex(const std::vector<std::string> &words) {
  size_t i = 1;
  while (i < words.size() && words[i] != "compile")
    ++i;
  for (++i; i < words.size(); ++i) {
    const std::string &w = words[i];
    if (w == "--")
      return i + 1 < words.size() ? long(i + 1) : -1;
    if (w.size() > 1 && w[0] == '-') {
      if (!isFlag(w) && w.find('=') == std::string::npos &&
          !(w.size() > 2 && w[1] != '-')) // -oFILE carries its value
        ++i;
      continue;
    }
    return long(i);
  }
  return -1;
}

} // namespace

std::string replanCommand(const KeyValues &opts,
                          const std::vector<std::string> &archs,
                          uint32_t sparks, const std::string &packDir,
                          const std::string &planPath,
                          const OptionOverrides &overrides) {
  std::vector<std::string> words;
  auto recorded = opts.find("command");
  if (recorded != opts.end())
    words = rt::shellSplit(recorded->second);
  const long pack = words.empty() ? -1 : packIndex(words);
  if (pack < 0) {
    // A plan from before the command was recorded: its options.
    words = {"glmc", "compile", packDir.empty() ? "PACK" : packDir};
    auto opt = [&](const char *key, const char *flag, const char *dflt) {
      auto it = opts.find(key);
      if (it != opts.end() && !it->second.empty() && it->second != dflt) {
        words.push_back(flag);
        words.push_back(it->second);
      }
    };
    words.push_back("--sparks");
    words.push_back(sparks ? std::to_string(sparks) : "N");
    opt("manifest", "--manifest", "");
    opt("max_context", "--max-context", "8192");
    opt("kv_dtype", "--kv-dtype", "bf16");
    std::string a;
    for (const std::string &s : archs)
      a += (a.empty() ? "" : ",") + s;
    if (!a.empty() && a != "sm_121") {
      words.push_back("--arch");
      words.push_back(a);
    }
    words.push_back("-o");
    words.push_back(planPath.empty() ? "PLAN" : planPath);
  } else if (!packDir.empty()) {
    words[size_t(pack)] = packDir;
  }
  if (!planPath.empty())
    words = rt::withOption(std::move(words), {"-o", "--output"}, planPath);
  for (const auto &[flag, value] : overrides)
    words =
        rt::withOption(std::move(words), {flag.c_str()}, value, !isFlag(flag));
  return rt::shellJoin(words);
}

std::string replanCommand(const Plan &plan, const std::string &packDir,
                          const std::string &planPath,
                          const OptionOverrides &overrides) {
  return replanCommand(plan.compileOptions, plan.targetArchs, plan.numRanks,
                       packDir, planPath, overrides);
}

} // namespace glm::plan
