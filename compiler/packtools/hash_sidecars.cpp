//===- hash_sidecars.cpp - SHA-256 sidecars of the packs glmc writes ------===//
//
// A release publishes a SHA-256 per file; exlr8's own checksums leave norms,
// biases and signs uncovered, and HF/EXL3 have none. glmc writes the same
// sidecars for its packs (hashes/<path>.sha256, sha256sum's "HEX  NAME"
// line) so that `glmc verify` covers every byte of them.
//
//===----------------------------------------------------------------------===//
#include "compiler/packtools/packtools.h"

#include "runtime/base/error.h"
#include "runtime/base/parallel.h"
#include "runtime/base/sha256.h"

#include "runtime/formats/exlr8_layout.h"
#include "runtime/formats/pack.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace glmc {

void writeHashSidecars(const std::string &dir) {
  const fs::path root(dir), hashes = root / "hashes";
  // Sidecars of files a previous run wrote and this one did not would name
  // missing files: start from none.
  fs::remove_all(hashes);
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(root);
       it != fs::recursive_directory_iterator(); ++it) {
    const fs::path &p = it->path();
    if (it->is_directory() &&
        (p == hashes || p.filename().string().rfind('.', 0) == 0)) {
      it.disable_recursion_pending();
      continue;
    }
    const std::string rel = p.lexically_relative(root).string();
    if (it->is_regular_file() && p.filename().string()[0] != '.' &&
        rel != glm::rt::exlr8::setIdFile())
      files.push_back(rel);
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> digests(files.size());
  glm::rt::parallelFor((int64_t)files.size(), 1, 0,
                       [&](int64_t b, int64_t e, int) {
                         for (int64_t i = b; i < e; ++i)
                           digests[(size_t)i] = glm::rt::sha256FileHex(
                               (root / files[(size_t)i]).string());
                       });
  for (size_t i = 0; i < files.size(); ++i) {
    fs::path side = hashes / (files[i] + ".sha256");
    fs::create_directories(side.parent_path());
    std::ofstream out(side, std::ios::binary | std::ios::trunc);
    out << digests[i] << "  " << fs::path(files[i]).filename().string()
        << "\n";
    glm::rt::check(out.good(), side.string(), ": cannot write");
  }
  // exlr8 releases name their weight set by these hashes (set_id).
  if (glm::rt::Pack::detect(dir) != glm::rt::PackLayout::Exlr8)
    return;
  std::vector<glm::rt::exlr8::SetIdEntry> set;
  for (size_t i = 0; i < files.size(); ++i)
    set.push_back({files[i], (uint64_t)fs::file_size(root / files[i]),
                   digests[i]});
  std::ofstream out(root / glm::rt::exlr8::setIdFile(),
                    std::ios::binary | std::ios::trunc);
  out << glm::rt::exlr8::setIdOf(set) << "\n";
  glm::rt::check(out.good(), (root / glm::rt::exlr8::setIdFile()).string(),
                 ": cannot write");
}

} // namespace glmc
