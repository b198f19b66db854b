//===- jinja_builtins.h - filters, tests, methods and operators -----------===//
//
// Private to the Jinja subset: the Python/Jinja2 semantics of values that the
// interpreter calls into (attribute and item access, operators, comparisons,
// iteration, filters, tests, globals). Errors name the template and line.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/serve/jinja.h"

#include <chrono>

namespace glm::rt::jinja {

/// The limits of the render running on this thread. Template::render opens
/// one (RAII); the interpreter, the builtins and the value printers charge
/// it, each before or while building a value, so that nothing grows past
/// Limits::maxBytes before it is refused. Without an open budget (values
/// printed outside a render) nothing is charged.
class RenderBudget {
public:
  RenderBudget(const std::string &name, const Limits &limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget &) = delete;
  RenderBudget &operator=(const RenderBudget &) = delete;

  /// The budget open on this thread, or null.
  static RenderBudget *current();
  /// One evaluation step at template line `line`; checks the step count,
  /// and the clock every 4096 steps.
  void step(int line);
  /// Refuses a string of `n` bytes (about to be built or just built) at
  /// `line` (0: the line of the last step).
  void bytes(size_t n, int line, const char *what);
  /// Refuses a list of `n` items.
  void items(size_t n, int line, const char *what);

private:
  [[noreturn]] void refuse(int line, const std::string &why) const;
  std::string name_;
  Limits limits_;
  uint64_t steps_ = 0;
  int line_ = 0; // of the last step: where a builtin without a line runs
  std::chrono::steady_clock::time_point deadline_;
  RenderBudget *outer_;
};

/// RenderBudget::current()->bytes(n, 0, what) / items(...) when a budget is
/// open (helpers that have no template line at hand).
void chargeBytes(size_t n, const char *what);
void chargeItems(size_t n, const char *what);

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
