//===- sha256.h - SHA-256 (FIPS 180-4) for release sidecar hashes ---------===//
//
// Model releases publish a SHA-256 per file (hashes/ sidecars); exlr8's
// format checksums leave norms, biases and signs uncovered, so `glmc verify`
// checks those files against the sidecars where a pack has them, and glmc
// writes sidecars for the packs it makes.
//
// Thread-safety: a Sha256 object is used by one thread.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace glm::rt {

class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t len);
  /// The 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  /// digest() as 64 lowercase hex digits.
  std::string hexDigest();

private:
  void block(const uint8_t *p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

/// Lowercase hex SHA-256 of a whole regular file; throws Error naming the
/// path when it cannot be read.
std::string sha256FileHex(const std::string &path);

} // namespace glm::rt
