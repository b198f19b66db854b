//===- GlmAttrs.td - enums and attributes of the glm dialect -*- tablegen -*-===//
//
// Enums (codebook, tile order, dense format, indexer kind, shard kind) and the
// #glm.shard attribute that says how an op is split over N ranks.
//
//===----------------------------------------------------------------------===//
#ifndef GLM_ATTRS_TD
#define GLM_ATTRS_TD

include "GlmDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Glm_Codebook : I32EnumAttr<"Codebook", "trellis codebook", [
    I32EnumAttrCase<"ThreeInst", 0, "three_inst">,
    I32EnumAttrCase<"Mcg", 1, "mcg">,
    I32EnumAttrCase<"Mul1", 2, "mul1">]> {
  let cppNamespace = "::mlir::glm";
  let genSpecializedAttr = 0;
}
def Glm_CodebookAttr : EnumAttr<Glm_Dialect, Glm_Codebook, "codebook"> {
  let assemblyFormat = "`<` $value `>`";
}

def Glm_TileOrder : I32EnumAttr<"TileOrder", "tile order inside a blob", [
    I32EnumAttrCase<"RowMajor", 0, "row_major">,
    I32EnumAttrCase<"InMajor128", 1, "in_major128">]> {
  let cppNamespace = "::mlir::glm";
  let genSpecializedAttr = 0;
}

def Glm_DenseFormat : I32EnumAttr<"DenseFormat", "dense weight format", [
    I32EnumAttrCase<"F32", 0, "f32">,
    I32EnumAttrCase<"F16", 1, "f16">,
    I32EnumAttrCase<"BF16", 2, "bf16">,
    I32EnumAttrCase<"Fp8Block128", 3, "fp8_block128">,
    I32EnumAttrCase<"Fp8Row", 4, "fp8_row">,
    I32EnumAttrCase<"Mxfp8", 5, "mxfp8">,
    I32EnumAttrCase<"Int4", 6, "int4">]> {
  let cppNamespace = "::mlir::glm";
  let genSpecializedAttr = 0;
}

def Glm_IndexerKind : I32EnumAttr<"IndexerKind", "DSA indexer layer kind", [
    I32EnumAttrCase<"Full", 0, "full">,
    I32EnumAttrCase<"Shared", 1, "shared">]> {
  let cppNamespace = "::mlir::glm";
  let genSpecializedAttr = 0;
}
def Glm_IndexerKindAttr
    : EnumAttr<Glm_Dialect, Glm_IndexerKind, "indexer_kind">;

def Glm_ShardKind : I32EnumAttr<"ShardKind", "how an op is split over ranks", [
    I32EnumAttrCase<"Replicated", 0, "replicated">,
    I32EnumAttrCase<"Heads", 1, "heads">,
    I32EnumAttrCase<"Vocab", 2, "vocab">,
    I32EnumAttrCase<"Halves", 3, "halves">]> {
  let cppNamespace = "::mlir::glm";
  let genSpecializedAttr = 0;
}

def Glm_ShardAttr : AttrDef<Glm_Dialect, "Shard"> {
  let mnemonic = "shard";
  let summary = "split of an op over `ranks` tensor-parallel ranks";
  let description = [{
    `#glm.shard<halves, ranks = 3, units = 16, layer = 5>`: which part of an op
    each rank computes. `replicated`: every rank computes all of it. `heads` /
    `vocab`: rank r owns units [r·U/N, (r+1)·U/N). `halves`: unit h of expert
    e lives on rank (U·e + h + layer) mod N (the exlr8 rule with U halves per
    projection; the shared expert is e = E).

    ```mlir
    #glm.shard<heads, ranks = 4, units = 64, layer = 0>
    ```
  }];
  let parameters = (ins
      EnumParameter<Glm_ShardKind>:$kind, "int64_t":$ranks,
      "int64_t":$units, "int64_t":$layer);
  let assemblyFormat = [{
    `<` $kind `,` `ranks` `=` $ranks `,` `units` `=` $units `,`
        `layer` `=` $layer `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Rank that owns unit `unit` of expert `expert` (halves) or of the op.
    int64_t ownerOf(int64_t expert, int64_t unit) const;
    /// [begin, end) of the units of `rank` (heads / vocab).
    std::pair<int64_t, int64_t> rangeOf(int64_t rank) const;
  }];
}

#endif // GLM_ATTRS_TD
