//===- error.h - the one error type of glmc's runtime and tools -----------===//
//
// Every failure on bad input travels as glm::rt::Error up to main, which prints
// its message on one line and exits 1. Messages name the file, the tensor (or
// expert/projection/half) and what the user should do: never a bare "bad data".
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace glm::rt {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Concatenates the parts with operator<< and throws Error.
template <class... Parts> [[noreturn]] void fail(Parts &&...parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

/// Throws Error built from the parts when `cond` is false.
template <class... Parts> void check(bool cond, Parts &&...parts) {
  if (!cond)
    fail(std::forward<Parts>(parts)...);
}

} // namespace glm::rt
