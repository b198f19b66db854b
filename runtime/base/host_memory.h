//===- host_memory.h - how much host memory is left to allocate -----------===//
//
// A DGX Spark that runs out of memory freezes instead of failing, so work
// that knows its size up front checks it against this and refuses early.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace glm::rt {

/// Bytes that can still be allocated without swapping: MemAvailable of
/// /proc/meminfo, or GLM_HOST_MEMORY_GIB when set (tests; containers whose
/// /proc shows the host's memory). 0 when unknown.
uint64_t availableHostMemory();
/// Where availableHostMemory() got its figure, for messages.
std::string availableHostMemorySource();

/// "12.3 GiB" (or "45.6 MiB" below 1 GiB).
std::string gibText(uint64_t bytes);

} // namespace glm::rt
