//===- files.h - bounded whole-file reads and atomic writes ---------------===//
//
// Every text or small binary file glmc and glm-engine read whole (plans,
// config.json, manifests, tokenizer.json, chat templates, safetensors index
// JSON) goes through readFileBounded: a path that names a device, a pipe or
// a directory (`glm-engine run /dev/zero`) or a file larger than its format
// allows would otherwise grow a buffer without end or end in a bare
// std::bad_alloc. The limits below are far above any real file of the kind
// and far below what would exhaust a machine.
//
// The kernel caches (glmc's NVRTC results, the runtime's CUBINs) are filled
// by concurrent processes: two compiles, or the ranks of a first multi-rank
// start. A cache entry is written under a temporary name and renamed into
// place, so a reader sees a whole file or none.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

namespace glm::rt {

/// Upper bounds of what a file of each kind may hold, in bytes.
/// A flatbuffer addresses its tables with 32-bit signed offsets.
inline constexpr uint64_t kMaxPlanBytes = (1ull << 31) - 1;
/// config.json, generation_config.json: a few KB in every release.
inline constexpr uint64_t kMaxConfigBytes = 16ull << 20;
/// An EXL3 quantization_config.json lists every stored tensor under
/// tensor_storage (name, dtype, bytes, shape): about 35 MB for
/// GLM-5.3-Flash's 288 experts x 3 projections x 42 layers.
inline constexpr uint64_t kMaxQuantConfigBytes = 512ull << 20;
/// An exlr8 manifest lists 3 x 16 widths per expert per layer: about 3 MB
/// for GLM-5.3 (256 experts, 76 layers).
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
/// tokenizer.json: GLM-5.3's is about 20 MB.
inline constexpr uint64_t kMaxTokenizerBytes = 512ull << 20;
/// A chat template: GLM-5.3's is a few KB.
inline constexpr uint64_t kMaxTemplateBytes = 16ull << 20;
/// model.safetensors.index.json: one line per tensor (~2 MB for 100k).
inline constexpr uint64_t kMaxIndexJsonBytes = 256ull << 20;

/// Reads the whole regular file `path`, of at most `maxBytes` bytes; `what`
/// names the kind of file in errors ("the plan", "the manifest"). Throws
/// glm::rt::Error naming the path when it cannot be opened, is not a regular
/// file (a device, pipe or directory), is larger than `maxBytes` (naming the
/// limit) or cannot be read whole.
std::string readFileBounded(const std::string &path, uint64_t maxBytes,
                            const std::string &what);

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
