//===- engine_image.h - glm-engine executables that carry their plan -----===//
//
// `glmc compile ... --emit engine -o NAME` writes the glm-engine executable
// it ships with, then the plan bytes, then a 32-byte trailer:
//   "GLMENGN1", u64 plan offset, u64 plan size, u64 xxh64 of the plan bytes
// (little endian). The program ignores what follows its ELF image, so NAME
// runs as glm-engine; readPlan and glm-engine find the plan by the trailer,
// verify its checksum, then read it as any plan file (identifier, schema,
// runtime ABI).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm::plan {

inline constexpr char kEngineTrailerMagic[9] = "GLMENGN1";
inline constexpr size_t kEngineTrailerBytes = 32;

/// Where a plan sits inside an engine executable.
struct EmbeddedPlan {
  uint64_t offset = 0, size = 0;
};

/// The plan embedded in `file` (a whole file's bytes), or nullopt when it
/// ends with no engine trailer. Throws glm::rt::Error naming `source` when
/// the trailer's range lies outside the file or the plan bytes do not match
/// its checksum (a damaged or truncated engine).
std::optional<EmbeddedPlan> findEmbeddedPlan(std::string_view file,
                                             const std::string &source);

/// Whether the file at `path` ends with an engine trailer (reads its last 32
/// bytes; false when it cannot be read).
bool hasEmbeddedPlan(const std::string &path);

/// This process's executable when it carries a plan, else "".
std::string selfEmbeddedPlanPath();

/// Writes the executable `runtime` (glm-engine, which must carry no plan)
/// with `plan` appended and the trailer to `out`, mode 0755, through a
/// temporary name and a rename. Throws Error naming the file.
void writeEngineImage(const std::string &runtime,
                      const std::vector<uint8_t> &plan,
                      const std::string &out);

} // namespace glm::plan
