//===- glmc-opt.cpp - mlir-opt for the glm dialect and glmc passes --------===//
//
// Parses, verifies and transforms glm IR with any glmc pass; the driver of
// the lit tests in tests/lit/.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  glmc::registerGlmDialects(registry);
  glmc::registerAllGlmPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "glmc-opt: the glm dialect and glmc passes\n", registry));
}
