//===- footprint.h - the bytes each kernel family may touch ---------------===//
//
// Beside every family's twin, its footprint: given a launch as the twin sees
// it (template arguments, grid, block, runtime arguments), the number of
// bytes the kernel may read or write from each pointer argument, and which
// pointers may be null. The plan executor checks every launch of a plan
// against its buffers before it allocates anything
// (runtime/exec/launch_bounds.h), so a damaged (re-signed) plan is refused
// instead of making a twin or a CUDA kernel step outside the arena.
//
// A footprint reads only the launch's shape: integers, template arguments,
// grid and block, and whether a pointer is null (a footprint's launch
// carries a non-null dummy for a non-null buffer). Indices that are data
// (token ids, KV slots, positions, DSA selections, expert ids, the entries
// of the plan's own tables) are bounded where they come from; a footprint
// counts the elements of one index value (slot 0 of a KV cache, row 0 of
// an embedding table, expert 0 of a bank), and what the integers say about
// the rest (positions < maxCtx, experts < the grid).
//
// Thread-safety: pure functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"
#include "runtime/twins/twin.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::rt::twins {

/// What one launch may touch, per argument in parameter order.
struct Footprint {
  std::vector<uint64_t> bytes; // from the pointer; 0 for a non-pointer
  std::vector<bool> nullable;  // the kernel tests this pointer for null
  /// The kernel also reaches past `bytes` by a data index (a token id, a
  /// KV slot, an expert id): `bytes` is what index 0 touches.
  std::vector<bool> indexed;
};

/// A launch whose own integers are out of range (negative sizes, overflow,
/// shapes the kernel traps on): `arg` is the offending parameter.
class BadLaunchArg : public Error {
public:
  BadLaunchArg(size_t arg, const std::string &why) : Error(why), arg(arg) {}
  size_t arg;
};

using FootprintFn = void (*)(const Launch &, Footprint &);

/// One family's footprint and its runtime parameter kinds, one character
/// each in parameter order: 'p' pointer, 'i' int, 'l' long long (64-bit),
/// 'f' float, 'd' double (as the PARAMS macro of its template declares).
struct FootprintEntry {
  const char *family;
  const char *signature;
  FootprintFn fn;
};

/// The footprint entry of `family`, nullptr when it has none.
const FootprintEntry *findFootprint(const std::string &family);

/// The tables findFootprint searches, as kCodegenTwins and kHelperTwins
/// (footprints_codegen.cpp, footprints_helper.cpp); each ends with nulls.
extern const FootprintEntry kCodegenFootprints[];
extern const FootprintEntry kHelperFootprints[];

/// Fills the footprint of `l` (its args sized to the signature); throws
/// BadLaunchArg when the launch's integers are out of range.
Footprint footprintOf(const FootprintEntry &e, const Launch &l);

} // namespace glm::rt::twins
