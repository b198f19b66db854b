//===- hash.h - xxh64 (pack checksums) and content hashes of files --------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace glm::rt {

/// Streaming xxHash64, seed 0 unless given: exlr8 checksums hash the
/// concatenation of several stored byte ranges without copying them.
class Xxh64 {
public:
  explicit Xxh64(uint64_t seed = 0);
  ~Xxh64();
  Xxh64(const Xxh64 &) = delete;
  Xxh64 &operator=(const Xxh64 &) = delete;
  void update(const void *data, size_t len);
  uint64_t digest() const;

private:
  void *state_;
};

uint64_t xxh64(const void *data, size_t len, uint64_t seed = 0);

/// xxh64 of a whole file's bytes, as 16 lowercase hex digits; throws Error.
std::string hashFileHex(const std::string &path);
std::string hex64(uint64_t v);

} // namespace glm::rt
