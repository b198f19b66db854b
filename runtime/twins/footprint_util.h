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
#include <cstdint>
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
  /// Pointer k holds KV cache rows in the launch's `kv` storage form
  /// (Footprint::kvForm).
  void kvRows(size_t k) { f_.kvForm.at(k) = int8_t(l.kvForm()); }

  // ---- indices the runtime writes (footprint.h IoIndex).

  /// Pointer k holds `what` indices the runtime writes before each step:
  /// the bound they stay below (with a checker, which refuses any other
  /// buffer there: its bytes could index anywhere); 1 without one (a twin
  /// or a test asking for the footprint of index 0).
  Wide ioIndex(size_t k, IoIndex what) {
    if (!checking() || null(k))
      return 1;
    const int64_t bound = f_.tables->ioBound(k, what);
    if (bound <= 0)
      bad(k, "points into ", f_.tables->name(k), ", but the kernel indexes ",
          "memory by its values: it must be the runtime's ", ioIndexName(what));
    f_.io.at(k) = true;
    return bound;
  }
  /// Pointer k, whose footprint (need/opt) is one slot's, is indexed by
  /// the KV slots in pointer `seq`: it reaches every slot.
  void perSlot(size_t k, size_t seq) {
    const Wide b = Wide(f_.bytes.at(k)) * ioIndex(seq, IoIndex::Slot);
    if (b > (Wide(1) << 62))
      bad(k, "makes the kernel reach more than 2^62 bytes");
    f_.bytes.at(k) = uint64_t(b);
    indexed(k);
  }
  /// Pointer `cache` holds `rows` rows of `rowBytes` a KV slot, which the
  /// kernel finds through kv::SlotRows: the slot in pointer `seq`, the
  /// page table in pointer `pages` (null: unpaged) and the page shift in
  /// integer `shift`. Unpaged it reaches every slot's rows (perSlot); paged
  /// every page's 2^shift rows, and the table's rows of every slot.
  void slotRows(size_t cache, size_t seq, size_t pages, size_t shift, Wide rows,
                Wide rowBytes) {
    need(cache, rows * rowBytes, 1);
    if (null(pages)) {
      opt(pages, 0, 4);
      perSlot(cache, seq);
      return;
    }
    const Wide s = at(shift);
    require(s <= 30 && rows % (Wide(1) << s) == 0, shift, "is ", int64_t(s),
            "; pages of 2^shift rows must split the slot's ", int64_t(rows));
    opt(pages, (rows >> s) * ioIndex(seq, IoIndex::Slot), 4);
    const Wide b = (ioIndex(pages, IoIndex::Page) << s) * rowBytes;
    if (b > (Wide(1) << 62))
      bad(cache, "makes the kernel reach more than 2^62 bytes");
    f_.bytes.at(cache) = uint64_t(b);
    indexed(cache);
  }
  /// Pointer `pos` holds the runtime's positions, which a kernel sized for
  /// `ctx` tokens (integer argument ctxArg) must hold all of.
  void positionsIn(size_t pos, size_t ctxArg, Wide ctx) {
    const Wide p = ioIndex(pos, IoIndex::Position);
    require(p <= ctx, ctxArg, "is ", int64_t(ctx), ", under the ", int64_t(p),
            " positions of the plan's context the runtime writes");
  }

  /// Pointer k reaches at least `elems` elements of `size` bytes (what
  /// a plan table's entries index); call after need/opt.
  void grow(size_t k, Wide elems, int size) {
    const Wide b = std::max<Wide>(elems, 0) * size;
    if (b > (Wide(1) << 62))
      bad(k, "makes the kernel reach more than 2^62 bytes");
    f_.bytes.at(k) = std::max<uint64_t>(f_.bytes.at(k), uint64_t(b));
  }

  // ---- plan tables (footprint.h Tables): entries the kernel indexes by.

  /// Whether the checker supplies table contents at all (not when a test
  /// or a twin asks for the bare footprint).
  bool checking() const { return f_.tables != nullptr; }
  /// Pointer k's first `n` entries of `size` bytes, read by the kernel as
  /// indices, are the plan's data: true when they can be checked. A
  /// `required` table (heads, tile pointers, widths, slice bounds) that
  /// is no plan data is refused; an optional one (expert ids, written by
  /// a router in one plan and a table of zeros in another) is then data.
  bool table(size_t k, Wide n, int size, bool required) {
    if (!checking() || null(k))
      return false;
    if (!f_.tables->known(k)) {
      if (required && n > 0)
        bad(k, "points into ", f_.tables->name(k),
            ", which holds no table of the plan (no init bytes, or bytes "
            "written at run time); the kernel indexes by its contents");
      return false;
    }
    f_.table.at(k) = true;
    if (n <= 0)
      return false;
    const uint64_t have = f_.tables->size(k);
    if (Wide(have) < n * size)
      bad(k, "reads ", int64_t(n), " entries of ", size, " bytes from ",
          f_.tables->name(k), ", which holds ", have, " init bytes from there");
    return true;
  }
  template <class... Parts>
  [[noreturn]] void badEntry(size_t k, Wide e, Parts &&...parts) const {
    bad(k, "entry ", int64_t(e), " of table ", f_.tables->name(k), " ",
        std::forward<Parts>(parts)...);
  }
  /// Bytes [at, at + n) of table k, as entry e.
  void bytesAt(size_t k, Wide e, Wide at, void *dst, size_t n) const {
    if (at < 0 || Wide(f_.tables->size(k)) < at + Wide(n))
      badEntry(k, e, "lies past the table's ", f_.tables->size(k),
               " init bytes");
    if (!f_.tables->read(k, uint64_t(at), dst, n))
      badEntry(k, e,
               "holds a device address (a relocation) where the "
               "kernel reads a number");
  }
  /// Entry e of an int32 / int64 / uint8 table k.
  Wide i32At(size_t k, Wide e) const {
    int32_t v;
    bytesAt(k, e, e * 4, &v, 4);
    return v;
  }
  Wide i64At(size_t k, Wide e) const {
    int64_t v;
    bytesAt(k, e, e * 8, &v, 8);
    return v;
  }
  Wide u8At(size_t k, Wide e) const {
    uint8_t v;
    bytesAt(k, e, e, &v, 1);
    return v;
  }
  /// Entry e of table k of entries `stride` bytes apart, an int32 at byte
  /// `field` of the entry.
  Wide i32Field(size_t k, Wide e, Wide stride, Wide field) const {
    int32_t v;
    bytesAt(k, e, e * stride + field, &v, 4);
    return v;
  }
  Wide i64Field(size_t k, Wide e, Wide stride, Wide field) const {
    int64_t v;
    bytesAt(k, e, e * stride + field, &v, 8);
    return v;
  }
  /// Entry e of table k of entries `stride` bytes apart, an int32 index
  /// at byte `field`, required in [lo, hi) (what the footprint assumed).
  Wide indexAt(size_t k, Wide e, Wide lo, Wide hi, const char *what,
               Wide stride = 4, Wide field = 0) const {
    const Wide v = i32Field(k, e, stride, field);
    if (v < lo || v >= hi)
      badEntry(k, e, "(", what, ") is ", int64_t(v), ", outside [", int64_t(lo),
               ", ", int64_t(hi), ")");
    return v;
  }
  /// The pointer at byte `at` of table k (entry e): null (zero bytes) or
  /// a relocation; a raw address in the init bytes is refused.
  TablePointer pointerAt(size_t k, Wide e, Wide at) const {
    if (at < 0 || Wide(f_.tables->size(k)) < at + 8)
      badEntry(k, e, "lies past the table's ", f_.tables->size(k),
               " init bytes");
    TablePointer p = f_.tables->pointer(k, uint64_t(at));
    if (p.relocated)
      return p;
    uint64_t raw;
    if (!f_.tables->read(k, uint64_t(at), &raw, 8) || raw != 0)
      badEntry(k, e,
               "holds a raw address where the kernel reads a pointer "
               "the plan relocates (or null)");
    return p;
  }
  /// The kernel reads `bytes` through pointer p of entry e of table k.
  void through(size_t k, Wide e, const TablePointer &p, Wide bytes,
               const std::string &what) const {
    if (bytes > Wide(p.room))
      badEntry(k, e, "(", what, ") points to ", p.target,
               ", where the kernel reads ", int64_t(bytes),
               " bytes through it but the buffer ends ", p.room,
               " bytes after it");
  }

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

/// The bit mask of a trellis kernel's template "widths" digits (1..8).
inline int widthMask(const Reach &r) {
  int mask = 0;
  for (char c : r.l.targ("widths"))
    if (c >= '1' && c <= '8')
      mask |= 1 << (c - '0');
  return mask;
}

/// Bytes of a side-vector storage id (0 f32, 1 f16, 2 bf16).
inline int storageBytes(int id) { return id == 0 ? 4 : 2; }
/// Storage id of the template argument `key` ("f32" | "f16" | "bf16").
inline int storageArg(const Reach &r, const char *key) {
  const std::string &v = r.l.targ(key);
  return v == "f16" ? 1 : v == "bf16" ? 2 : 0;
}

} // namespace glm::rt::twins::fp
