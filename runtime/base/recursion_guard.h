//===- recursion_guard.h - bound a recursion by a depth counter -----------===//
//
// Parsers and printers of untrusted input (chat templates, the values they
// build) recurse once per level of nesting; past a limit they must refuse
// with a message instead of overflowing the stack.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/base/error.h"

namespace glm::rt {

/// Counts one level in `depth` for the guard's lifetime. Past `limit` levels
/// it takes the level back and calls `tooDeep`, which throws (a message that
/// says where); an exception from deeper levels unwinds the count.
class RecursionGuard {
public:
  template <class TooDeep>
  RecursionGuard(int &depth, int limit, TooDeep &&tooDeep) : depth_(depth) {
    if (++depth_ > limit) {
      --depth_; // no destructor runs for a throwing constructor
      tooDeep();
      fail("recursion deeper than ", limit, " levels"); // tooDeep returned
    }
  }
  ~RecursionGuard() { --depth_; }
  RecursionGuard(const RecursionGuard &) = delete;
  RecursionGuard &operator=(const RecursionGuard &) = delete;

private:
  int &depth_;
};

} // namespace glm::rt
