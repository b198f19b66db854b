//===- GlmDialect.td - the glm dialect ---------------------*- tablegen -*-===//
//
// The glm dialect describes one decode step of a GLM-5.3 model at two levels:
// model-level ops (embed, mla, moe, ...) as imported from a pack, and
// kernel-level ops (fused_expert_gemv, allreduce, ...) after sharding and
// fusion. Weights are module-level symbols that carry their pack byte ranges.
//
//===----------------------------------------------------------------------===//
#ifndef GLM_DIALECT_TD
#define GLM_DIALECT_TD

include "mlir/IR/OpBase.td"

def Glm_Dialect : Dialect {
  let name = "glm";
  let summary = "GLM-5.3 model and kernel level ops for the glmc compiler";
  let description = [{
    A decode step of a GLM-5.3 (`glm_moe_dsa`) model. The importer produces
    model-level ops inside `func.func @decode_step`; `glm-shard-tp`,
    `glm-select-width` and `glm-fuse` turn them into kernel-level ops that
    `glm-emit-kernels` and `glm-emit-plan` lower to CUDA and to a plan.
    Weight bytes are never read: weights are `glm.weight` / `glm.experts`
    symbols that name their byte ranges in the pack's files.
  }];
  let cppNamespace = "::mlir::glm";
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Glm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Glm_Dialect, mnemonic, traits>;

#endif // GLM_DIALECT_TD
