//===- twin.cpp - finding a family's twin ---------------------------------===//
#include "runtime/twins/twin.h"

#include "runtime/base/error.h"

#include <cstdlib>

namespace glm::rt::twins {

const std::string &Launch::targ(const std::string &key) const {
  check(templateArgs != nullptr, "twin of ", family,
        ": launch carries no template arguments");
  auto it = templateArgs->find(key);
  check(it != templateArgs->end(), "twin of ", family,
        ": kernel has no template argument '", key, "'");
  return it->second;
}

int Launch::targInt(const std::string &key) const {
  const std::string &v = targ(key);
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  check(!v.empty() && end && *end == '\0', "twin of ", family,
        ": template argument ", key, "='", v, "' is not an integer");
  return static_cast<int>(n);
}

int Launch::targIntOr(const std::string &key, int dflt) const {
  if (!templateArgs || !templateArgs->count(key))
    return dflt;
  return targInt(key);
}

int Launch::sumMode() const {
  if (!templateArgs)
    return 0;
  auto it = templateArgs->find("sum");
  if (it == templateArgs->end() || it->second == "f32")
    return 0;
  check(it->second == "fixed" || it->second == "fixed_out", "twin of ",
        family, ": sum='", it->second, "' is not f32, fixed or fixed_out");
  return it->second == "fixed" ? 1 : 2;
}

TwinFn findTwin(const std::string &family) {
  for (const TwinEntry *table : {kCodegenTwins, kHelperTwins})
    for (const TwinEntry *e = table; e->family; ++e)
      if (family == e->family)
        return e->fn;
  return nullptr;
}

} // namespace glm::rt::twins
