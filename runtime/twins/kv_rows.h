//===- kv_rows.h - the KV cache's storage forms, for the twins (private) --===//
//
// The twins' side of codegen/templates/kv_cache.cuh: rows of n values
// stored as f32, bf16 (round to nearest even) or E4M3 with one fp32 scale
// per row (amax / 448, 1 where that is not positive), written and read with
// runtime/base/numeric.h's conversions, which round as the kernels' do
// (tests/unit/runtime/kv_rows_test.cpp; tests/gpu for the kernels).
//
// Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/twins/twin.h"

#include "codegen/templates/kv_cache.cuh"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace glm::rt::twins {

/// Bytes of one stored row of n values in form `kv` (kv::rowBytes).
inline int64_t kvRowBytes(int kv, int64_t n) {
  return glm::kv::rowBytes(kv, n);
}

/// Row r of a cache of n-value rows in form kv, as the kernels read it
/// (f32 as stored, bf16 widened, E4M3 value * the row's scale in fp32).
void kvReadRow(const void *cache, int kv, int64_t r, int n, float *out);

/// Stores the fp32 row v (n values) as row r of a cache in form kv,
/// rounding as kv::store does.
void kvWriteRow(void *cache, int kv, int64_t r, const float *v, int n);

/// The rows a reader twin visits: row(r) is the fp32 values of row r of
/// the cache, the stored floats themselves in form f32, else a copy decoded
/// at its first use (valid while this object lives).
class KvRows {
public:
  KvRows(const void *cache, int kv, int n) : cache_(cache), kv_(kv), n_(n) {}
  const float *row(int64_t r);

private:
  const void *cache_;
  int kv_, n_;
  std::unordered_map<int64_t, std::vector<float>> decoded_;
};

/// Where the rows of KV slot `slot` are (kv::SlotRows), from the family's
/// (pages, pageShift) arguments at k and k + 1: the slot's own block of
/// maxCtx rows without pages, else its page table in io.pages.
inline glm::kv::SlotRows slotRowsOf(const Launch &l, size_t k, int slot,
                                    int maxCtx) {
  return glm::kv::slotRows(l.ptr<const int>(k), l.i32(k + 1), slot, maxCtx);
}

} // namespace glm::rt::twins
