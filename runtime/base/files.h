//===- files.h - best-effort atomic writes for on-disk caches -------------===//
//
// The kernel caches (glmc's NVRTC results, the runtime's CUBINs) are filled
// by concurrent processes: two compiles, or the ranks of a first multi-rank
// start. A cache entry is written under a temporary name and renamed into
// place, so a reader sees a whole file or none.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

namespace glm::rt {

/// Writes `size` bytes to `path` through a name unique to this process and
/// thread and a rename. Best effort (a cache that cannot be written is no
/// error): returns whether the file is in place; leaves no temporary behind.
inline bool writeFileAtomic(const std::string &path, const void *data,
                            size_t size) {
  std::ostringstream tmp;
  tmp << path << ".tmp." << ::getpid() << "." << std::this_thread::get_id();
  std::error_code ec;
  {
    std::ofstream f(tmp.str(), std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char *>(data), std::streamsize(size));
    if (!f) {
      std::filesystem::remove(tmp.str(), ec);
      return false;
    }
  }
  std::filesystem::rename(tmp.str(), path, ec);
  if (ec)
    std::filesystem::remove(tmp.str(), ec);
  return !ec;
}

} // namespace glm::rt
