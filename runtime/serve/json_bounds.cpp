//===- json_bounds.cpp - JSON nesting limits for untrusted text -----------===//
#include "runtime/serve/json_bounds.h"

#include "runtime/base/error.h"

#include <algorithm>

namespace glm::rt {

int jsonNestingDepth(const std::string &text) {
  int depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == '[' || c == '{')
      deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return deepest;
}

void checkJsonDepth(const std::string &text, const std::string &what,
                    const std::string &advice) {
  const int depth = jsonNestingDepth(text);
  check(depth <= kMaxJsonDepth, what, " nests ", depth,
        " levels deep (at most ", kMaxJsonDepth, ")", advice);
}

nlohmann::ordered_json parseJsonBounded(const std::string &text,
                                        const std::string &what) {
  checkJsonDepth(text, what);
  return nlohmann::ordered_json::parse(text);
}

} // namespace glm::rt
