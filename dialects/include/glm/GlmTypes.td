//===- GlmTypes.td - weight types of the glm dialect -------*- tablegen -*-===//
//
// !glm.trellis: a trellis-quantized weight (width K, codebook, tile order,
// exlr8 E4M3 rounding). !glm.dense: a dense weight in one of the pack formats.
//
//===----------------------------------------------------------------------===//
#ifndef GLM_TYPES_TD
#define GLM_TYPES_TD

include "GlmAttrs.td"
include "mlir/IR/AttrTypeBase.td"

class Glm_Type<string name, string typeMnemonic>
    : TypeDef<Glm_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Glm_TrellisType : Glm_Type<"Trellis", "trellis"> {
  let summary = "trellis-quantized weight (EXL3 / exlr8)";
  let description = [{
    Width K is stored as twice the bits so half-integer MUL1 widths (1.5, 2.5,
    3.5) are exact; `?` means per-part widths given by a `glm.manifest`
    (exlr8 halves of mixed width) and resolved by `glm-select-width`.
    `e4m3` marks the exlr8 rounding after the fp16 codebook sum.

    ```mlir
    !glm.trellis<3, mcg, row_major, e4m3>
    !glm.trellis<2.5, mul1, row_major, fp16>
    !glm.trellis<?, mcg, in_major128, e4m3>
    ```
  }];
  let parameters = (ins "unsigned":$twiceBits,
                        EnumParameter<Glm_Codebook>:$codebook,
                        EnumParameter<Glm_TileOrder>:$order, "bool":$e4m3);
  let assemblyFormat = [{
    `<` custom<Width>($twiceBits) `,` $codebook `,` $order `,`
        custom<E4m3>($e4m3) `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isResolved() const { return getTwiceBits() != 0; }
    double getBits() const { return getTwiceBits() / 2.0; }
  }];
}

def Glm_DenseType : Glm_Type<"Dense", "dense"> {
  let summary = "dense weight: bf16, f16, f32, fp8 block-128, fp8 row, mxfp8, int4";
  let description = [{
    ```mlir
    !glm.dense<fp8_block128>
    ```
  }];
  let parameters = (ins EnumParameter<Glm_DenseFormat>:$format);
  let assemblyFormat = "`<` $format `>`";
  let extraClassDeclaration = [{
    /// Bits per weight including scales (fp8_block128: 8 + 32/16384).
    double getBitsPerWeight() const;
  }];
}

def Glm_WeightType : AnyTypeOf<[Glm_TrellisType, Glm_DenseType]>;

#endif // GLM_TYPES_TD
