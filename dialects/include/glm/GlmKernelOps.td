//===- GlmKernelOps.td - kernel-level ops of the glm dialect -*- tablegen -*-===//
//
// What glm-fuse produces: one op per kernel launch. Each distinct op (its
// attributes minus layer and weight symbols) becomes one KernelSpec in
// glm-emit-kernels, so the kernel count does not grow with the layer count.
//
//===----------------------------------------------------------------------===//
#ifndef GLM_KERNEL_OPS_TD
#define GLM_KERNEL_OPS_TD

include "GlmTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Glm_FusedExpertGemvOp : Glm_Op<"fused_expert_gemv", [Pure]> {
  let summary = "trellis decode + E4M3 + Hadamard + gate/up + SwiGLU + down + routing weight";
  let description = [{
    One launch for all selected experts and the shared experts of a layer on
    one rank: the input Hadamard (x ⊙ signs.in · H) is shared by all experts
    and widths; each owned part is decoded at its own width through a pointer
    table; the result is the rank's partial sum (fp32) before the all-reduce.
    `widths` is the set of widths (twice the bits) present in the bank; the
    rank's halves are those the `shard` rule assigns to it. Experts stored
    dense (Hugging Face layout) carry `dense_format` and no widths.

    ```mlir
    %p = glm.fused_expert_gemv %h, %idx, %w {bank = @L3.experts, layer = 3 : i64,
           experts = 256 : i64, shared = 1 : i64, top_k = 8 : i64,
           hidden = 6144 : i64, inter = 2048 : i64, halves = 16 : i64,
           widths = array<i32: 6, 8>, codebook = #glm.codebook<mcg>, e4m3 = true,
           shard = #glm.shard<halves, ranks = 4, units = 16, layer = 3>}
        : (tensor<?x6144xf32>, tensor<?x8xi32>, tensor<?x8xf32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, 2DTensorOf<[I32]>:$indices,
      2DTensorOf<[F32]>:$weights, FlatSymbolRefAttr:$bank, I64Attr:$layer,
      I64Attr:$experts, I64Attr:$shared, I64Attr:$top_k, I64Attr:$hidden,
      I64Attr:$inter, I64Attr:$halves, DenseI32ArrayAttr:$widths,
      OptionalAttr<Glm_CodebookAttr>:$codebook, BoolAttr:$e4m3,
      OptionalAttr<TypeAttrOf<Glm_DenseType>>:$dense_format,
      Glm_ShardAttr:$shard, OptionalAttr<F64Attr>:$swiglu_limit);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_DenseGemvOp : Glm_Op<"dense_gemv", [Pure]> {
  let summary = "y = W x for one dense (or dense-trellis) weight";
  let description = [{
    `format` is the weight type; `out`/`in` the full HF shape. With a `shard`,
    rank r computes `split_out` rows (output split: heads or vocab) or reads
    its own `in` columns (input split, a partial sum to all-reduce).

    ```mlir
    %q = glm.dense_gemv %x {weight = @L0.q_b, format = !glm.dense<fp8_block128>,
           out = 16384 : i64, in = 2048 : i64, split_out = true,
           shard = #glm.shard<heads, ranks = 2, units = 64, layer = 0>}
        : (tensor<?x2048xf32>) -> tensor<?x16384xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, FlatSymbolRefAttr:$weight,
      TypeAttrOf<Glm_WeightType>:$format, I64Attr:$out, I64Attr:$in,
      DefaultValuedAttr<BoolAttr, "true">:$split_out,
      OptionalAttr<Glm_ShardAttr>:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_AttentionDecodeOp : Glm_Op<"attention_decode", [Pure]> {
  let summary = "MLA decode over the latent cache restricted to the DSA selection";
  let description = [{
    Appends `[norm(c) | RoPE(k_pe)]` of `%kv` to the latent cache of `layer`,
    applies interleaved RoPE to the rope part of `%q`, absorbs `kv_b` (W_UK,
    W_UV) and attends over the selected keys. Rank r computes the heads its
    `shard` gives it; the output holds all heads' columns (others zero).

    ```mlir
    %o = glm.attention_decode %q, %kv, %sel {layer = 0 : i64, heads = 64 : i64,
           kv_lora = 512 : i64, qk_nope = 192 : i64, qk_rope = 64 : i64,
           v_head = 256 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64,
           kv_b = @L0.kv_b, kv_norm = @L0.kv_a_norm,
           shard = #glm.shard<heads, ranks = 1, units = 64, layer = 0>}
        : (tensor<?x16384xf32>, tensor<?x576xf32>, tensor<?x?xi32>) -> tensor<?x16384xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$q, 2DTensorOf<[F32]>:$kv,
      2DTensorOf<[I32]>:$selection, I64Attr:$layer, I64Attr:$heads,
      I64Attr:$kv_lora, I64Attr:$qk_nope, I64Attr:$qk_rope, I64Attr:$v_head,
      F64Attr:$rope_theta, F64Attr:$eps, FlatSymbolRefAttr:$kv_b,
      FlatSymbolRefAttr:$kv_norm, Glm_ShardAttr:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_IndexerTopkOp : Glm_Op<"indexer_topk", [Pure]> {
  let summary = "DSA indexer scores and top-k selection of a full layer";
  let description = [{
    Reuses the MLA's normalised `%qa`; caches the layer's index keys.
    `kpool` > 1 (GLM-5.3-Flash): keys pooled over `kpool` tokens, as
    `glm.dsa_indexer`; the compress gate and position bias follow the five
    weights.

    ```mlir
    %s = glm.indexer_topk %qa, %h {layer = 0 : i64, heads = 32 : i64,
           head_dim = 128 : i64, rope = 64 : i64, topk = 2048 : i64,
           weights = [@L0.wq_b, @L0.wk, @L0.k_norm, @L0.k_norm_bias, @L0.weights_proj]}
        : (tensor<?x2048xf32>, tensor<?x6144xf32>) -> tensor<?x?xi32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$qa, 2DTensorOf<[F32]>:$input,
      I64Attr:$layer, I64Attr:$heads, I64Attr:$head_dim, I64Attr:$rope,
      I64Attr:$topk, SymbolRefArrayAttr:$weights,
      DefaultValuedAttr<I64Attr, "1">:$kpool);
  let results = (outs 2DTensorOf<[I32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_KdaDecodeOp : Glm_Op<"kda_decode", [Pure]> {
  let summary = "one KDA token per row after its projections (GLM-5.3-Flash)";
  let description = [{
    The recurrent part of `glm.kda`: from the raw projections `%q`, `%k`,
    `%v` (`heads`·`head_dim` columns), the forget-gate input `%f` (f_b f_a
    h), the output-gate input `%gate` (g_b g_a h) and `%b` (b h, `heads`
    columns): the causal conv + SiLU, the delta rule on the per-sequence
    fp32 state and the gated RMS norm, for the heads the `shard` gives this
    rank (their columns of the inputs; the other heads' output columns are
    zero, as `glm.attention_decode`'s, for o_proj's input-split GEMV).
    `weights`: q_conv, k_conv, v_conv, dt_bias, A_log, o_norm.

    ```mlir
    %o = glm.kda_decode %q, %k, %v, %f, %g, %b {layer = 0 : i64, heads = 4 : i64,
           head_dim = 16 : i64, conv_kernel = 4 : i64, lower_bound = -5.0 : f64,
           eps = 1.0e-05 : f64, weights = [@q_conv, @k_conv, @v_conv, @dt_bias,
           @A_log, @o_norm], shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>}
        : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>,
           tensor<?x64xf32>, tensor<?x4xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$q, 2DTensorOf<[F32]>:$k,
      2DTensorOf<[F32]>:$v, 2DTensorOf<[F32]>:$f, 2DTensorOf<[F32]>:$gate,
      2DTensorOf<[F32]>:$b, I64Attr:$layer, I64Attr:$heads,
      I64Attr:$head_dim, I64Attr:$conv_kernel,
      OptionalAttr<F64Attr>:$lower_bound, F64Attr:$eps,
      SymbolRefArrayAttr:$weights, Glm_ShardAttr:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_AddRmsNormOp : Glm_Op<"add_rms_norm", [Pure]> {
  let summary = "fused residual add + RMSNorm kernel: (x + r, norm(x + r))";
  let description = [{
    ```mlir
    %sum, %n = glm.add_rms_norm %x, %r {weight = @L1.input_norm, eps = 1.0e-05 : f64}
        : (tensor<?x6144xf32>, tensor<?x6144xf32>) -> (tensor<?x6144xf32>, tensor<?x6144xf32>)
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, 2DTensorOf<[F32]>:$residual,
                       FlatSymbolRefAttr:$weight, F64Attr:$eps);
  let results = (outs 2DTensorOf<[F32]>:$sum, 2DTensorOf<[F32]>:$normed);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_AllReduceOp : Glm_Op<"allreduce", [SameOperandsAndResultType]> {
  let summary = "sum of per-rank partials in rank order, fp32";
  let description = [{
    Every rank ends with the same bits: partials are summed in fp32 in rank
    order 0..N-1, so results do not depend on the transport.

    ```mlir
    %s = glm.allreduce %p {ranks = 4 : i64} : tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$ranks);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Glm_AllGatherOp : Glm_Op<"allgather"> {
  let summary = "concatenation of per-rank column slices in rank order";
  let description = [{
    ```mlir
    %l = glm.allgather %p {ranks = 4 : i64} : (tensor<?x154880xf32>) -> tensor<?x154880xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$ranks);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // GLM_KERNEL_OPS_TD
