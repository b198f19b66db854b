//===- hash.cpp - xxh64 through libxxhash (header-only inline build) ------===//
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "runtime/base/error.h"
#include "runtime/base/hash.h"

#include <cstdio>
#include <filesystem>
#include <vector>

namespace glm::rt {

Xxh64::Xxh64(uint64_t seed) {
  auto *s = XXH64_createState();
  XXH64_reset(s, seed);
  state_ = s;
}
Xxh64::~Xxh64() { XXH64_freeState(static_cast<XXH64_state_t *>(state_)); }
void Xxh64::update(const void *data, size_t len) {
  XXH64_update(static_cast<XXH64_state_t *>(state_), data, len);
}
uint64_t Xxh64::digest() const {
  return XXH64_digest(static_cast<XXH64_state_t *>(state_));
}
uint64_t xxh64(const void *data, size_t len, uint64_t seed) {
  return XXH64(data, len, seed);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

std::string hashFileHex(const std::string &path) {
  // A device or pipe (/dev/zero) would be hashed forever.
  std::error_code ec;
  check(std::filesystem::is_regular_file(path, ec), path,
        ": not a regular file (cannot hash it; give the file itself)");
  FILE *f = std::fopen(path.c_str(), "rb");
  check(f != nullptr, path, ": cannot open for hashing");
  Xxh64 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    h.update(buf.data(), n);
  std::fclose(f);
  return hex64(h.digest());
}

} // namespace glm::rt
