//===- host_memory.cpp - how much host memory is left to allocate ---------===//
#include "runtime/base/host_memory.h"
#include "runtime/base/numbers.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace glm::rt {

static const char *overrideText() {
  const char *v = std::getenv("GLM_HOST_MEMORY_GIB");
  return v && *v ? v : nullptr;
}

uint64_t availableHostMemory() {
  // Through the bounded parser: "inf" or 1e30 GiB overflowed the uint64_t
  // conversion (undefined), "nan" or "12x" were ignored or cut short.
  if (const char *v = overrideText())
    return uint64_t(parseNumberIn(v, 0, double(1 << 20),
                                  "GLM_HOST_MEMORY_GIB (GiB of host memory)") *
                    double(1ull << 30));
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:")
      return kib * 1024;
  }
  return 0;
}

std::string availableHostMemorySource() {
  return overrideText() ? "GLM_HOST_MEMORY_GIB" : "MemAvailable in /proc/meminfo";
}

std::string gibText(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1ull << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1ull << 20));
  return buf;
}

} // namespace glm::rt
