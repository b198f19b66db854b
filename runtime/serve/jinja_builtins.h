//===- jinja_builtins.h - filters, tests, methods and operators -----------===//
//
// Private to the Jinja subset: the Python/Jinja2 semantics of values that the
// interpreter calls into (attribute and item access, operators, comparisons,
// iteration, filters, tests, globals). Errors name the template and line.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/serve/jinja.h"

namespace glm::rt::jinja {

struct Builtins {
  std::string tplName;

  [[noreturn]] void err(int line, const std::string &m) const;
  /// range, namespace, dict, raise_exception, strftime_now; else undefined.
  Value global(const std::string &name) const;
  Value getAttr(const Value &obj, const std::string &name, int line) const;
  Value getItem(const Value &obj, const Value &key, int line) const;
  Value slice(const Value &obj, const Value &start, const Value &stop,
              const Value &step, int line) const;
  Value filter(const std::string &name, std::vector<Value> &args, Kwargs &kw,
               int line) const;
  bool test(const std::string &name, std::vector<Value> &args, int line) const;
  Value binaryOp(const std::string &op, const Value &a, const Value &b,
                 int line) const;
  bool compare(const std::string &op, const Value &a, const Value &b,
               int line) const;
  std::vector<Value> iterate(const Value &v, int line) const;
};

/// Python equality (1 == 1.0 == True, deep lists/dicts, None == None).
bool pyEquals(const Value &a, const Value &b);

} // namespace glm::rt::jinja
