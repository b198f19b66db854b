//===- kernel_cache.cpp - the on-disk NVRTC cache glmc and glm-engine share ===//
#include "codegen/codegen.h"

#include "runtime/base/error.h"
#include "runtime/base/files.h"

#include <cstdlib>
#include <filesystem>

namespace glm::codegen {

/// PTX or CUBIN of one kernel: a few MB at most.
static constexpr uint64_t kMaxKernelBytes = 256ull << 20;

std::string kernelCacheDir() {
  namespace fs = std::filesystem;
  std::string dir;
  if (const char *c = std::getenv("GLMC_KERNEL_CACHE"))
    dir = c;
  else if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = std::string(x) + "/glmc/kernels";
  else if (const char *h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache/glmc/kernels";
  if (dir.empty() || dir == "off")
    return "";
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec ? "" : dir;
}

/// A cache entry, through the bounded reader: a FIFO or device named like
/// an entry would block or never end. Anything it refuses is a miss (the
/// kernel is compiled again and the entry rewritten).
static bool readWhole(const std::string &path, std::string &out) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return false;
  try {
    out = glm::rt::readFileBounded(path, kMaxKernelBytes,
                                   "a kernel cache entry");
  } catch (const glm::rt::Error &) {
    return false;
  }
  return true;
}

CompiledKernel compileCached(const std::string &source,
                             const std::string &name, const std::string &arch,
                             bool cubin, bool *hit) {
  const std::string cache = kernelCacheDir();
  std::string base;
  if (hit)
    *hit = false;
  if (!cache.empty()) {
    // A PTX-only entry is keyed apart ("+ptx"): its PTX targets the
    // virtual arch.
    base = cache + "/" +
           cacheKey(source, nvrtcOptionsFor(source),
                    cubin ? arch : arch + "+ptx", nvrtcVersion());
    std::string ptx, bytes;
    // The PTX is written last: its presence means the entry is complete.
    if (readWhole(base + ".ptx", ptx) &&
        (!cubin || readWhole(base + ".cubin", bytes))) {
      CompiledKernel k;
      k.arch = arch;
      k.ptx = std::move(ptx);
      k.cubin.assign(bytes.begin(), bytes.end());
      if (hit)
        *hit = true;
      return k;
    }
  }
  CompileOptions opt;
  opt.cubin = cubin;
  CompiledKernel k = compileWithNvrtc(source, name, arch, opt);
  if (!base.empty()) {
    if (cubin)
      rt::writeFileAtomic(base + ".cubin", k.cubin.data(), k.cubin.size());
    rt::writeFileAtomic(base + ".ptx", k.ptx.data(), k.ptx.size());
  }
  return k;
}

} // namespace glm::codegen
