//===- GlmDialect.h - the glm dialect: ops, types, attributes ---*- C++ -*-===//
//
// The one header users of the glm dialect include. Generated declarations
// come from dialects/include/glm/*.td.
//
//===----------------------------------------------------------------------===//
#ifndef GLM_DIALECT_H
#define GLM_DIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "glm/GlmOpsDialect.h.inc"
#include "glm/GlmEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "glm/GlmAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "glm/GlmOpsTypes.h.inc"

#define GET_OP_CLASSES
#include "glm/GlmOps.h.inc"

namespace mlir::glm {
/// True for a width (twice the bits) a trellis codebook can decode:
/// K = 1..8 for every codebook, K = 1.5/2.5/3.5 for MUL1 only.
bool isAllowedWidth(int64_t twiceBits, Codebook codebook);
} // namespace mlir::glm

#endif // GLM_DIALECT_H
