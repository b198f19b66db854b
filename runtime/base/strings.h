//===- strings.h - small string helpers shared by readers and writers -----===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt {

inline bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// "[2048, 6144]": shapes in error messages.
inline std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

} // namespace glm::rt
