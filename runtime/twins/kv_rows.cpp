//===- kv_rows.cpp - the KV cache's storage forms, for the twins ----------===//
#include "runtime/twins/kv_rows.h"

#include "runtime/base/error.h"
#include "runtime/base/numeric.h"

#include <cmath>
#include <cstring>

namespace glm::rt::twins {

int Launch::kvForm() const {
  if (!templateArgs)
    return glm::kv::kF32;
  auto it = templateArgs->find("kv");
  if (it == templateArgs->end() || it->second == "f32")
    return glm::kv::kF32;
  check(it->second == "bf16" || it->second == "e4m3", "twin of ", family,
        ": kv='", it->second, "' is not f32, bf16 or e4m3");
  return it->second == "bf16" ? glm::kv::kBf16 : glm::kv::kE4m3;
}

void kvReadRow(const void *cache, int kv, int64_t r, int n, float *out) {
  const auto *p =
      static_cast<const unsigned char *>(cache) + r * kvRowBytes(kv, n);
  if (kv == glm::kv::kF32) {
    std::memcpy(out, p, size_t(n) * 4);
  } else if (kv == glm::kv::kBf16) {
    for (int i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      out[i] = bf16ToFloat(b);
    }
  } else {
    float s;
    std::memcpy(&s, p + n, 4);
    for (int i = 0; i < n; ++i)
      out[i] = e4m3ToFloat(p[i]) * s;
  }
}

void kvWriteRow(void *cache, int kv, int64_t r, const float *v, int n) {
  auto *p = static_cast<unsigned char *>(cache) + r * kvRowBytes(kv, n);
  if (kv == glm::kv::kF32) {
    std::memcpy(p, v, size_t(n) * 4);
  } else if (kv == glm::kv::kBf16) {
    for (int i = 0; i < n; ++i) {
      const uint16_t b = floatToBf16(v[i]);
      std::memcpy(p + 2 * i, &b, 2);
    }
  } else {
    // kv::store: the block's amax (a maximum: any order), fmaxf ignoring
    // NaN as the kernel's does.
    float amax = 0.0f;
    for (int i = 0; i < n; ++i)
      amax = std::fmax(amax, std::fabs(v[i]));
    const float s = glm::kv::e4m3Scale(amax);
    for (int i = 0; i < n; ++i)
      p[i] = floatToE4m3(v[i] / s);
    std::memcpy(p + n, &s, 4);
  }
}

const float *KvRows::row(int64_t r) {
  if (kv_ == glm::kv::kF32)
    return reinterpret_cast<const float *>(
        static_cast<const unsigned char *>(cache_) + r * kvRowBytes(kv_, n_));
  auto [it, fresh] = decoded_.try_emplace(r);
  if (fresh) {
    it->second.resize(size_t(n_));
    kvReadRow(cache_, kv_, r, n_, it->second.data());
  }
  return it->second.data();
}

} // namespace glm::rt::twins
