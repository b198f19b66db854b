//===- KernelArgs.h - plan kernel arguments vs the kernels' ABI -*- C++ -*-===//
//
// Every op of a plan that launches a kernel carries its arguments in the
// order of the kernel family's runtime parameter list (the PARAMS/ARGS
// macros of codegen/templates/*.cuh, FamilyInfo::kernelParams). This check
// catches a drift between the compiler's argument rules and a template.
// Needs codegen (the templates are the source of the ABI).
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_MLIR_KERNELARGS_H
#define GLMC_MLIR_KERNELARGS_H

#include "plans/plan.h"

#include <string>
#include <vector>

namespace glmc {

/// Kind of one runtime kernel parameter.
enum class ParamKind { Pointer, Int, Float, Int64, Double };

/// One runtime parameter of a kernel family: its name and kind.
struct KernelParam {
  std::string name;
  ParamKind kind = ParamKind::Int;
};

/// The runtime parameters of `family` in order, from its template's PARAMS
/// macro; throws glm::rt::Error when the family or macro is unknown.
std::vector<KernelParam> kernelParams(const std::string &family);

/// Checks every kernel launch of every graph: as many arguments as the
/// family has parameters; pointers as Buffer (or Runtime), ints as I32,
/// long longs as I64, floats as F32, doubles as F64 (each or Runtime); Buffer and immediate arguments
/// labelled with their parameter's name. Throws glm::rt::Error naming
/// `source`, the rank, graph, op, argument and parameter.
void checkKernelArgs(const glm::plan::Plan &plan, const std::string &source);

} // namespace glmc

#endif // GLMC_MLIR_KERNELARGS_H
