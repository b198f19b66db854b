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
// Where such indices are the plan's own data (a buffer's init bytes and
// relocations: the MLA head lists, the expert tile-pointer and width
// tables, vocab_gather's slice bounds, gemm_trellis_grouped's items), the
// checker hands the footprint the table's contents (Tables) and the
// footprint, which knows the table's layout, holds every entry the kernel
// reads to what the rest of the footprint assumed: indices in range, the
// region read through each tile pointer inside the pointer's target
// buffer, widths the kernel was built for, slice bounds ordered. Tables
// written at run time (router expert ids, DSA selections) stay data.
//
// The indices the runtime writes before each step (IoIndex: KV slots,
// positions, token ids, draft hidden rows) are bounded by the runtime
// (PlanExecutor::writeIoRows, draft()). A footprint that indexes by them
// asks the checker for their bound (Reach::ioIndex) and covers every value
// below it: all KV slots, positions < the plan's context, every row of an
// embedding table. The checker refuses such an argument pointing at any
// other buffer, and any launch, binding or collective that could write
// those Io buffers (launch_bounds.cpp).
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

/// A pointer stored in a plan table, as the plan will patch it.
struct TablePointer {
  bool relocated = false; // a relocation sits at the entry
  uint64_t room = 0;      // bytes from its target to its buffer's end
  std::string target;     // "buffer 0 'weights' + 4096", for messages
};

/// Indices the runtime writes into its Io rows before each step, each
/// below a bound it enforces (launch_bounds.h IoBounds).
enum class IoIndex : uint8_t {
  Slot,     // io.slots: a KV-cache / recurrent-state slot
  Page,     // io.pages: a KV page (glmc compile --kv-page-tokens)
  Position, // io.positions: a token's position in its sequence
  Row,      // io.tokens (a token id) or io.draft_rows (a hidden row): a
            // row of the table the kernel gathers from
};
const char *ioIndexName(IoIndex what);

/// The load-time contents of a launch's pointer arguments, where the plan
/// gives them: a buffer's init bytes (the rest of the buffer is zero) with
/// its relocations, from the argument's address (launch_bounds.cpp).
class Tables {
public:
  virtual ~Tables() = default;
  /// Whether pointer k points into a buffer with init bytes that no
  /// kernel writes (the checker refuses writers of such buffers).
  virtual bool known(size_t k) const = 0;
  /// Init bytes from pointer k's address on.
  virtual uint64_t size(size_t k) const = 0;
  /// Copies bytes [at, at + n) of table k (at + n <= size(k)); false when
  /// a relocation (a device address only known at load) overlaps them.
  virtual bool read(size_t k, uint64_t at, void *dst, size_t n) const = 0;
  /// The relocation at byte `at` of table k, if any.
  virtual TablePointer pointer(size_t k, uint64_t at) const = 0;
  /// "buffer 7 'scratch.table.heads.0-4'", for messages.
  virtual std::string name(size_t k) const = 0;
  /// When pointer k is the runtime's Io buffer of `what` indices: the
  /// bound each value stays below; otherwise 0.
  virtual int64_t ioBound(size_t k, IoIndex what) const = 0;
};

/// What one launch may touch, per argument in parameter order.
struct Footprint {
  std::vector<uint64_t> bytes; // from the pointer; 0 for a non-pointer
  std::vector<bool> nullable;  // the kernel tests this pointer for null
  /// The kernel also reaches past `bytes` by a data index (a token id, a
  /// KV slot, an expert id): `bytes` is what index 0 touches.
  std::vector<bool> indexed;
  /// The kernel reads pointer k's contents as a table of the plan, and
  /// they were checked (only with Tables).
  std::vector<bool> table;
  /// The kernel indexes memory by pointer k's values, which the runtime
  /// writes (Reach::ioIndex; checked only with Tables).
  std::vector<bool> io;
  /// Pointer k holds KV cache rows in this storage form (templates/
  /// kv_cache.cuh: 0 f32, 1 bf16, 2 e4m3); -1 for other pointers. The plan
  /// checker holds the buffer's dtype to it (F32, BF16, E4M3).
  std::vector<int8_t> kvForm;
  /// While the footprint runs: the contents it checks (footprintOf's).
  const Tables *tables = nullptr;
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
/// BadLaunchArg when the launch's integers are out of range. With
/// `tables`, also checks the entries of the plan tables the launch reads
/// (BadLaunchArg naming the entry) and widens `bytes` to what they index.
Footprint footprintOf(const FootprintEntry &e, const Launch &l,
                      const Tables *tables = nullptr);

} // namespace glm::rt::twins
