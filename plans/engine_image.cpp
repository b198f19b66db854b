//===- engine_image.cpp - glm-engine executables that carry their plan ---===//
#include "plans/engine_image.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/hash.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace glm::plan {

namespace {

uint64_t loadU64(const char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | uint8_t(p[i]);
  return v;
}

void storeU64(char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = char(uint8_t(v >> (8 * i)));
}

bool hasMagic(const char *trailer) {
  return std::memcmp(trailer, kEngineTrailerMagic, 8) == 0;
}

} // namespace

std::optional<EmbeddedPlan> findEmbeddedPlan(std::string_view file,
                                             const std::string &source) {
  if (file.size() < kEngineTrailerBytes)
    return std::nullopt;
  const char *t = file.data() + file.size() - kEngineTrailerBytes;
  if (!hasMagic(t))
    return std::nullopt;
  EmbeddedPlan e;
  e.offset = loadU64(t + 8);
  e.size = loadU64(t + 16);
  const uint64_t want = loadU64(t + 24);
  const uint64_t end = file.size() - kEngineTrailerBytes;
  rt::check(e.offset <= end && e.size <= end - e.offset && e.size > 0,
            source, ": the engine's plan trailer names bytes ", e.offset,
            "..+", e.size, " of a ", end,
            "-byte image: the executable is truncated or damaged; write it "
            "again with glmc compile ... --emit engine");
  const uint64_t got = rt::xxh64(file.data() + e.offset, e.size);
  rt::check(got == want, source,
            ": the plan embedded in this engine fails its checksum (xxh64 ",
            rt::hex64(got), ", the trailer says ", rt::hex64(want),
            "): the executable is damaged; write it again with glmc compile "
            "... --emit engine");
  return e;
}

bool hasEmbeddedPlan(const std::string &path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f)
    return false;
  const std::streamoff size = f.tellg();
  if (size < std::streamoff(kEngineTrailerBytes))
    return false;
  char t[kEngineTrailerBytes];
  f.seekg(size - std::streamoff(kEngineTrailerBytes));
  if (!f.read(t, sizeof t))
    return false;
  return hasMagic(t);
}

std::string selfEmbeddedPlanPath() {
  static const std::string self = [] {
    std::error_code ec;
    const std::string exe =
        std::filesystem::read_symlink("/proc/self/exe", ec).string();
    return !ec && hasEmbeddedPlan(exe) ? exe : std::string();
  }();
  return self;
}

void writeEngineImage(const std::string &runtime,
                      const std::vector<uint8_t> &plan,
                      const std::string &out) {
  const std::string exe =
      rt::readFileBounded(runtime, 4ull << 30, "the glm-engine runtime");
  rt::check(!hasMagic(exe.size() >= kEngineTrailerBytes
                          ? exe.data() + exe.size() - kEngineTrailerBytes
                          : "........"),
            runtime,
            " already carries a plan: use the glm-engine installed beside "
            "glmc, not an engine glmc wrote");
  rt::check(!plan.empty(), "glmc compile --emit engine: empty plan");
  char trailer[kEngineTrailerBytes];
  std::memcpy(trailer, kEngineTrailerMagic, 8);
  storeU64(trailer + 8, exe.size());
  storeU64(trailer + 16, plan.size());
  storeU64(trailer + 24, rt::xxh64(plan.data(), plan.size()));
  const std::string tmp = out + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(exe.data(), std::streamsize(exe.size()));
    f.write(reinterpret_cast<const char *>(plan.data()),
            std::streamsize(plan.size()));
    f.write(trailer, sizeof trailer);
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      rt::check(false, "glmc compile: cannot write the engine ", out,
                " (disk full or no permission?)");
    }
  }
  ::chmod(tmp.c_str(), 0755);
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    rt::check(false, "glmc compile: cannot write the engine ", out, ": ",
              ec.message());
  }
}

} // namespace glm::plan
