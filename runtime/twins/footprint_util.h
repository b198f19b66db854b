//===- footprint_util.h - arithmetic the footprints share (private) -------===//
//
// Footprints compute in 128-bit integers, so a damaged int argument cannot
// wrap a size around into something that fits a buffer; every integer that
// is a size, stride or count is required non-negative before it is used.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/twins/footprint.h"

#include <algorithm>
#include <initializer_list>
#include <sstream>

namespace glm::rt::twins::fp {

using Wide = __int128;

/// (count - 1) * stride + width: the elements `count` rows of `width`
/// elements `stride` apart span; 0 when there is no row or no element.
inline Wide span(Wide count, Wide stride, Wide width) {
  return count <= 0 || width <= 0 ? 0 : (count - 1) * stride + width;
}
inline Wide ceilDiv(Wide a, Wide b) { return b <= 0 ? 0 : (a + b - 1) / b; }

/// 1 + the largest tile index (TileStrides of glm_common.cuh: (i>>3)*sI8 +
/// (i&7)*sI + (j>>3)*sJ8 + (j&7)) over i < nI, j < nJ; strides >= 0.
inline Wide tileSpan(Wide nI, Wide nJ, Wide sI, Wide sI8, Wide sJ8) {
  if (nI <= 0 || nJ <= 0)
    return 0;
  // Along one axis the largest index is at the last i, or at the last
  // i & 7 == 7 of the group before it.
  auto axis = [](Wide n, Wide s1, Wide s8) {
    const Wide last = n - 1;
    Wide a = (last >> 3) * s8 + (last & 7) * s1;
    if (last >= 8)
      a = std::max(a, ((last >> 3) - 1) * s8 + 7 * s1);
    return a;
  };
  return axis(nI, sI, sI8) + axis(nJ, 1, sJ8) + 1;
}

/// Builds one launch's Footprint.
class Reach {
public:
  Reach(const Launch &l, Footprint &f) : l(l), f_(f) {}

  template <class... Parts>
  [[noreturn]] void bad(size_t k, Parts &&...parts) const {
    std::ostringstream os;
    (os << ... << std::forward<Parts>(parts));
    throw BadLaunchArg(k, os.str());
  }
  template <class... Parts>
  void require(bool cond, size_t k, Parts &&...parts) const {
    if (!cond)
      bad(k, std::forward<Parts>(parts)...);
  }
  /// Integer argument k, required >= lo.
  Wide at(size_t k, int64_t lo = 0) const {
    const int64_t v = l.args.at(k).i;
    if (v < lo)
      bad(k, "is ", v, "; it must be at least ", lo);
    return v;
  }
  /// Integer arguments that must be >= 0 (strides the footprint itself
  /// does not need, still read by the kernel).
  void nonneg(std::initializer_list<size_t> ks) const {
    for (size_t k : ks)
      at(k);
  }
  /// Integer argument k as given (signed flags, offsets the kernel checks).
  Wide raw(size_t k) const { return l.args.at(k).i; }
  bool null(size_t k) const { return l.args.at(k).p == nullptr; }
  Wide grid(int d) const { return l.grid[d]; }
  Wide block(int d) const { return l.block[d]; }
  /// Elements a 1-D grid covers in x (one thread each).
  Wide coveredX() const { return grid(0) * block(0); }
  int targ(const char *key) const { return l.targInt(key); }

  /// Pointer k touches `elems` elements of `size` bytes; it must not be
  /// null.
  void need(size_t k, Wide elems, int size) { set(k, elems, size, false); }
  /// The same for a pointer the kernel tests for null.
  void opt(size_t k, Wide elems, int size) { set(k, elems, size, true); }

  /// Pointer k is also indexed by data past its footprint (Footprint::
  /// indexed); call after need/opt.
  void indexed(size_t k) { f_.indexed.at(k) = true; }

  const Launch &l;

private:
  void set(size_t k, Wide elems, int size, bool nullable) {
    const Wide b = std::max<Wide>(elems, 0) * size;
    // 2^62 bytes: more than any arena; also keeps b + offset in range.
    if (b > (Wide(1) << 62))
      bad(k, "makes the kernel reach more than 2^62 bytes");
    f_.bytes.at(k) = uint64_t(b);
    f_.nullable.at(k) = nullable;
  }
  Footprint &f_;
};

/// Bytes of a side-vector storage id (0 f32, 1 f16, 2 bf16).
inline int storageBytes(int id) { return id == 0 ? 4 : 2; }
/// Storage id of the template argument `key` ("f32" | "f16" | "bf16").
inline int storageArg(const Reach &r, const char *key) {
  const std::string &v = r.l.targ(key);
  return v == "f16" ? 1 : v == "bf16" ? 2 : 0;
}

} // namespace glm::rt::twins::fp
