//===- GlmModelOps.td - model-level ops of the glm dialect -*- tablegen -*-===//
//
// What the importer produces: module-level symbols for the pack, its weights,
// expert banks and manifest, and one op per model block inside
// func.func @decode_step. Activations are tensor<?xDxf32> (? = tokens).
//
//===----------------------------------------------------------------------===//
#ifndef GLM_MODEL_OPS_TD
#define GLM_MODEL_OPS_TD

include "GlmTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Module-level symbols
//===----------------------------------------------------------------------===//

def Glm_PackOp : Glm_Op<"pack", [Symbol]> {
  let summary = "the pack a module was imported from";
  let description = [{
    Names the pack directory, its layout, the files that weight byte ranges
    index into (`files`), the role names that ranges index into (`roles`) and
    the content hashes a plan records.

    ```mlir
    glm.pack @pack {layout = "exlr8", dir = "/packs/tiny",
                    files = ["dense/exlr8-vocab.safetensors"],
                    roles = ["data"], config_hash = "…", index_hash = "…",
                    manifest_hash = "…", manifest = "home"}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$layout,
                       StrAttr:$dir, StrArrayAttr:$files, StrArrayAttr:$roles,
                       StrAttr:$config_hash, StrAttr:$index_hash,
                       StrAttr:$manifest_hash, StrAttr:$manifest);
  let assemblyFormat = "$sym_name attr-dict";
  let hasVerifier = 1;
}

def Glm_WeightOp : Glm_Op<"weight", [Symbol]> {
  let summary = "a weight of the pack: HF name, format, shape, byte ranges";
  let description = [{
    `ranges` holds quadruples (file index, absolute offset, length, role index)
    into the `files` and `roles` of `glm.pack`. `shape` is the Hugging Face
    shape ([out, in] for linear weights). No bytes are read.

    ```mlir
    glm.weight @L3.o_proj : !glm.dense<fp8_block128> {
      name = "model.layers.3.self_attn.o_proj.weight",
      shape = array<i64: 6144, 16384>, ranges = array<i64: 2, 4096, 100663296, 0>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Glm_WeightType>:$type, StrAttr:$name,
                       DenseI64ArrayAttr:$shape, DenseI64ArrayAttr:$ranges);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Sum of the lengths of all ranges.
    uint64_t getByteSize();
    int64_t getNumElements();
  }];
}

def Glm_ExpertsOp : Glm_Op<"experts", [Symbol]> {
  let summary = "the routed and shared experts of one MoE layer";
  let description = [{
    One bank per MoE layer: `experts` routed experts followed by `shared`
    shared experts, 3 projections (gate, up, down). `halves` = ceil(inter /
    128) is the number of 128-channel units tensor parallelism places;
    `parts_per_proj` is how many independently stored parts a projection has
    (exlr8: one per half; EXL3 and Hugging Face layouts: 1 whole tensor).
    `parts` holds, per (expert, projection, part) in that order, a row
    (file, offset, length, side begin, side end); `sides` holds quadruples
    (file, offset, length, role) of the side vectors each part reads, shared
    between parts when the pack shares them. `widths` (twice the bits, per
    part) is absent until `glm-select-width` resolves a `?` width.

    ```mlir
    glm.experts @L3.experts : !glm.trellis<?, mcg, row_major, e4m3> {
      layer = 3 : i64, experts = 2 : i64, shared = 1 : i64, halves = 1 : i64,
      parts_per_proj = 1 : i64, hidden = 256 : i64, inter = 128 : i64,
      parts = array<i64: ...>, sides = array<i64: ...>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Glm_WeightType>:$type, I64Attr:$layer,
                       I64Attr:$experts, I64Attr:$shared, I64Attr:$halves,
                       I64Attr:$parts_per_proj, I64Attr:$hidden,
                       I64Attr:$inter,
                       DenseI64ArrayAttr:$parts, DenseI64ArrayAttr:$sides,
                       OptionalAttr<DenseI32ArrayAttr>:$widths);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static constexpr int kPartFields = 5;
    int64_t getNumParts() {
      return (getExperts() + getShared()) * 3 * getPartsPerProj();
    }
    /// Index of part (expert, projection, part) in `parts` rows / `widths`.
    int64_t partIndex(int64_t e, int64_t p, int64_t h) {
      return (e * 3 + p) * getPartsPerProj() + h;
    }
  }];
}

def Glm_ManifestOp : Glm_Op<"manifest"> {
  let summary = "width choice per expert part, from a manifest or EXL3 config";
  let description = [{
    `widths[i]` holds, for MoE layer `layers[i]`, twice the bits of every
    part in `glm.experts` order. Consumed (and erased) by `glm-select-width`.
    `available` lists the widths (twice the bits) the pack stores.

    ```mlir
    glm.manifest {name = "home", layers = array<i64: 3>,
                  available = array<i32: 4, 6, 8>,
                  widths = [array<i32: 6, 6, 6, 8, 8, 8, 6, 6, 6>]}
    ```
  }];
  let arguments = (ins StrAttr:$name, DenseI64ArrayAttr:$layers,
                       DenseI32ArrayAttr:$available, ArrayAttr:$widths);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Blocks of the decode step
//===----------------------------------------------------------------------===//

def Glm_EmbedOp : Glm_Op<"embed", [Pure]> {
  let summary = "token embedding lookup (no scaling)";
  let description = [{
    ```mlir
    %x = glm.embed %tokens {weight = @embed} : (tensor<?xi32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 1DTensorOf<[I32]>:$tokens, FlatSymbolRefAttr:$weight);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Glm_RmsNormOp : Glm_Op<"rms_norm", [Pure, SameOperandsAndResultType]> {
  let summary = "RMSNorm w ⊙ x / sqrt(mean(x²) + eps); also the final norm";
  let description = [{
    ```mlir
    %y = glm.rms_norm %x {weight = @L0.input_norm, eps = 1.0e-05 : f64} : tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, FlatSymbolRefAttr:$weight,
                       F64Attr:$eps);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Glm_AddOp : Glm_Op<"add", [Pure, SameOperandsAndResultType]> {
  let summary = "residual add";
  let description = [{
    ```mlir
    %z = glm.add %x, %y : tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$lhs, 2DTensorOf<[F32]>:$rhs);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Glm_MlaOp : Glm_Op<"mla", [Pure]> {
  let summary = "multi-head latent attention (absorbed form, latent cache)";
  let description = [{
    GLM-5.3 MLA: `qa = norm(q_a h)`, `q = q_b qa` per head `[nope | rope]`,
    `[c | k_pe] = kv_a h`, `c = norm(c)`; interleaved (GPT-J) RoPE with
    `rope_theta`; the cache holds `kv_lora + qk_rope` values per token; keys
    are restricted to the DSA selection `%sel`; `o` projects the heads back.

    ```mlir
    %a = glm.mla %h, %sel {layer = 0 : i64, heads = 64 : i64, q_lora = 2048 : i64,
           kv_lora = 512 : i64, qk_nope = 192 : i64, qk_rope = 64 : i64,
           v_head = 256 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64,
           q_a = @L0.q_a, q_a_norm = @L0.q_a_norm, q_b = @L0.q_b, kv_a = @L0.kv_a,
           kv_a_norm = @L0.kv_a_norm, kv_b = @L0.kv_b, o = @L0.o}
         : (tensor<?x6144xf32>, tensor<?x?xi32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, 2DTensorOf<[I32]>:$selection,
      I64Attr:$layer, I64Attr:$heads, I64Attr:$q_lora, I64Attr:$kv_lora,
      I64Attr:$qk_nope, I64Attr:$qk_rope, I64Attr:$v_head, F64Attr:$rope_theta,
      F64Attr:$eps, FlatSymbolRefAttr:$q_a, FlatSymbolRefAttr:$q_a_norm,
      FlatSymbolRefAttr:$q_b, FlatSymbolRefAttr:$kv_a,
      FlatSymbolRefAttr:$kv_a_norm, FlatSymbolRefAttr:$kv_b,
      FlatSymbolRefAttr:$o, OptionalAttr<Glm_ShardAttr>:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_DsaIndexerOp : Glm_Op<"dsa_indexer", [Pure]> {
  let summary = "DSA lightning indexer: full layers score, shared layers reuse";
  let description = [{
    `full`: scores `I(t,s) = Σ_h w_h ReLU(q_h·k_s / sqrt(head_dim))` with
    interleaved RoPE on the first `rope` dims, caches index keys, selects the
    top `topk` keys (all keys while t < topk). `shared`: the input is the
    selection of the most recent full layer (`source`), returned as is.

    `kpool` > 1 (GLM-5.3-Flash's k-pool): keys are pooled over `kpool`
    consecutive tokens (per channel, a softmax over the members of the
    compression gate `index_kpool_compress_gate · h` plus the position bias
    `index_kpool_compress_ape`), only complete pools are scored, the top
    `topk / kpool` pools are expanded to their tokens and the query's
    incomplete tail pool is always added. Two more weights follow the five:
    the gate and the position bias.

    ```mlir
    %s0 = glm.dsa_indexer full %h {layer = 0 : i64, heads = 32 : i64,
            head_dim = 128 : i64, rope = 64 : i64, topk = 2048 : i64,
            weights = [@L0.wq_b, @L0.wk, @L0.k_norm, @L0.k_norm_bias,
                       @L0.weights_proj]}
          : (tensor<?x6144xf32>) -> tensor<?x?xi32>
    %s3 = glm.dsa_indexer shared %s0 {layer = 3 : i64, heads = 32 : i64,
            head_dim = 128 : i64, rope = 64 : i64, topk = 2048 : i64,
            weights = []} : (tensor<?x?xi32>) -> tensor<?x?xi32>
    ```
  }];
  let arguments = (ins Glm_IndexerKindAttr:$kind, 2DTensorOf<[F32, I32]>:$input,
      I64Attr:$layer, I64Attr:$heads, I64Attr:$head_dim, I64Attr:$rope,
      I64Attr:$topk, SymbolRefArrayAttr:$weights,
      DefaultValuedAttr<I64Attr, "1">:$kpool);
  let results = (outs 2DTensorOf<[I32]>:$result);
  let assemblyFormat = [{
    $kind $input attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Glm_RouterOp : Glm_Op<"router", [Pure]> {
  let summary = "sigmoid router: bias for selection only, renormalise, scale";
  let description = [{
    `s = sigmoid(W x)` in fp32; select the top `top_k` of `s + bias`; weights
    `s_k / (Σ_sel s + 1e-20) · scale` when `renormalize`.

    ```mlir
    %idx, %w = glm.router %h {weight = @L3.gate, bias = @L3.bias, experts = 256 : i64,
                 top_k = 8 : i64, scale = 2.5 : f64, renormalize = true}
        : (tensor<?x6144xf32>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, FlatSymbolRefAttr:$weight,
      FlatSymbolRefAttr:$bias, I64Attr:$experts, I64Attr:$top_k,
      F64Attr:$scale, BoolAttr:$renormalize);
  let results = (outs 2DTensorOf<[I32]>:$indices, 2DTensorOf<[F32]>:$weights);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_MoeOp : Glm_Op<"moe", [Pure]> {
  let summary = "routed experts (weighted by the router) plus shared experts";
  let description = [{
    `Σ_k w_k · Expert_{idx_k}(x) + Σ shared(x)`, each expert a SwiGLU
    `down(SiLU(gate x) ⊙ up x)`, weights from the bank `experts`. With
    `swiglu_limit` L (GLM-5.3-Flash) gate x is clamped to ≤ L and up x to
    [−L, L] first (every expert, routed and shared).

    ```mlir
    %m = glm.moe %h, %idx, %w {experts = @L3.experts, layer = 3 : i64}
        : (tensor<?x6144xf32>, tensor<?x8xi32>, tensor<?x8xf32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, 2DTensorOf<[I32]>:$indices,
      2DTensorOf<[F32]>:$weights, FlatSymbolRefAttr:$experts, I64Attr:$layer,
      OptionalAttr<Glm_ShardAttr>:$shard, OptionalAttr<F64Attr>:$swiglu_limit);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_MlpOp : Glm_Op<"mlp", [Pure]> {
  let summary = "dense SwiGLU MLP (the first_k_dense_replace layers)";
  let description = [{
    `swiglu_limit` clamps as in `glm.moe`.

    ```mlir
    %m = glm.mlp %h {layer = 0 : i64, inter = 12288 : i64, gate = @L0.gate,
                     up = @L0.up, down = @L0.down} : (tensor<?x6144xf32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$layer,
      I64Attr:$inter, FlatSymbolRefAttr:$gate, FlatSymbolRefAttr:$up,
      FlatSymbolRefAttr:$down, OptionalAttr<Glm_ShardAttr>:$shard,
      OptionalAttr<F64Attr>:$swiglu_limit);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// GLM-5.3-Flash (glm5_next): KDA and the mHC residual streams
//===----------------------------------------------------------------------===//

def Glm_KdaOp : Glm_Op<"kda", [Pure]> {
  let summary = "Kimi delta attention (KDA): linear attention with a recurrent state";
  let description = [{
    Per head (`heads` × `head_dim`, dk = dv): q, k, v projections, each
    through a depthwise causal conv of `conv_kernel` taps and SiLU (the
    rolling conv state holds the last `conv_kernel − 1` raw inputs per
    channel); q, k l2-normalised (q also × head_dim^−½); the per-channel
    forget gate `g = lower_bound · sigmoid(exp(A_log) · (f_b f_a h +
    dt_bias))` (without `lower_bound`: `−exp(A_log) · softplus(·)`), `β =
    sigmoid(b h)`; the fp32 state S [dk, dv] per head: `S ← diag(e^g) S;
    δ = β (v − Sᵀk); S ← S + k δᵀ; o = Sᵀq`; `o` through the gated RMS norm
    (`o_norm`, `eps`, × sigmoid(g_b g_a h)) and `o_proj`. Per sequence the
    state is heads·dk·dv fp32 plus 3·heads·dk·(conv_kernel − 1) conv inputs.

    ```mlir
    %a = glm.kda %h {layer = 0 : i64, heads = 64 : i64, head_dim = 128 : i64,
           conv_kernel = 4 : i64, lower_bound = -5.0 : f64, eps = 1.0e-05 : f64,
           weights = [@q, @k, @v, @q_conv, @k_conv, @v_conv, @f_a, @f_b,
                      @dt_bias, @A_log, @b, @g_a, @g_b, @o_norm, @o]}
         : (tensor<?x4096xf32>) -> tensor<?x4096xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$layer,
      I64Attr:$heads, I64Attr:$head_dim, I64Attr:$conv_kernel,
      OptionalAttr<F64Attr>:$lower_bound, F64Attr:$eps,
      SymbolRefArrayAttr:$weights, OptionalAttr<Glm_ShardAttr>:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_HcStreamsOp : Glm_Op<"hc_streams", [Pure]> {
  let summary = "mHC: the residual streams, each a copy of the embedding";
  let description = [{
    ```mlir
    %X = glm.hc_streams %x {streams = 4 : i64} : (tensor<?x4096xf32>) -> tensor<?x16384xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$streams);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_HcPreOp : Glm_Op<"hc_pre", [Pure]> {
  let summary = "mHC site: the mixing map of the streams and the sublayer input";
  let description = [{
    From the S streams X [S, d] of a token: `m = fn · X / rms(X)` (the
    unweighted RMS of the flattened streams, `eps`), `pre_j = sigmoid(m_j ·
    scale_0 + base_j) + hc_eps`, `post_j = 2 sigmoid(m_{S+j} · scale_1 +
    base_{S+j})`, `comb` = the row softmax of the next S×S (× scale_2 + base)
    + hc_eps, Sinkhorn-normalised (columns, then `sinkhorn_iters − 1` rounds
    of rows and columns, each normaliser + hc_eps). Results: the sublayer
    input `u = Σ_j pre_j X_j` and the mix `[pre (S) | post (S) | comb (S·S)]`
    ((2+S)·S columns, mhc_mix's layout) whose post and comb `glm.hc_post`
    applies. `site` is "attn" or "ffn".

    ```mlir
    %u, %mix = glm.hc_pre %X {layer = 0 : i64, site = "attn", streams = 4 : i64,
                 sinkhorn_iters = 20 : i64, hc_eps = 1.0e-06 : f64, eps = 1.0e-05 : f64,
                 fn = @fn, base = @base, scale = @scale}
        : (tensor<?x16384xf32>) -> (tensor<?x4096xf32>, tensor<?x24xf32>)
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$layer, StrAttr:$site,
      I64Attr:$streams, I64Attr:$sinkhorn_iters, F64Attr:$hc_eps, F64Attr:$eps,
      FlatSymbolRefAttr:$fn, FlatSymbolRefAttr:$base, FlatSymbolRefAttr:$scale);
  let results = (outs 2DTensorOf<[F32]>:$result, 2DTensorOf<[F32]>:$mix);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_HcPostOp : Glm_Op<"hc_post", [Pure]> {
  let summary = "mHC site: write the sublayer output back into the streams";
  let description = [{
    `X'_i = post_i · y + Σ_j comb[j, i] · X_j` with the mix of the matching
    `glm.hc_pre`.

    ```mlir
    %X1 = glm.hc_post %X, %y, %mix {layer = 0 : i64, streams = 4 : i64}
        : (tensor<?x16384xf32>, tensor<?x4096xf32>, tensor<?x24xf32>) -> tensor<?x16384xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, 2DTensorOf<[F32]>:$update,
      2DTensorOf<[F32]>:$mix, I64Attr:$layer, I64Attr:$streams);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_HcHeadOp : Glm_Op<"hc_head", [Pure]> {
  let summary = "mHC: the unweighted mean of the streams (before the final norm)";
  let description = [{
    ```mlir
    %h = glm.hc_head %X {streams = 4 : i64} : (tensor<?x16384xf32>) -> tensor<?x4096xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, I64Attr:$streams);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The MTP draft graph (num_nextn_predict_layers; glmc compile --draft mtp)
//===----------------------------------------------------------------------===//

def Glm_DraftBeginOp : Glm_Op<"draft_begin"> {
  let summary = "the ops after it form the MTP draft graph";
  let description = [{
    Everything before it is the decode step (and each prefill chunk); the
    ops after it are the draft graph: one MTP draft token per row, run by
    the runtime after a step (and again for each further draft token).

    ```mlir
    glm.draft_begin {layer = 78 : i64}
    ```
  }];
  let arguments = (ins I64Attr:$layer);
  let assemblyFormat = "attr-dict";
}

def Glm_GatherRowsOp : Glm_Op<"gather_rows", [Pure]> {
  let summary = "out[b] = table[rows[b]]: the step's hidden row each draft row starts from";
  let description = [{
    ```mlir
    %h = glm.gather_rows %x, %rows : (tensor<?x6144xf32>, tensor<?xi32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$table, 1DTensorOf<[I32]>:$rows);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_MtpInputOp : Glm_Op<"mtp_input", [Pure]> {
  let summary = "[enorm(embed(token_{t+1})) ; hnorm(h_t)]: eh_proj's input";
  let description = [{
    ```mlir
    %c = glm.mtp_input %e, %h {enorm = @L78.enorm, hnorm = @L78.hnorm, eps = 1.0e-05 : f64}
        : (tensor<?x6144xf32>, tensor<?x6144xf32>) -> tensor<?x12288xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$embedded, 2DTensorOf<[F32]>:$hidden,
                       FlatSymbolRefAttr:$enorm, FlatSymbolRefAttr:$hnorm,
                       F64Attr:$eps);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_CarryRowsOp : Glm_Op<"carry_rows"> {
  let summary = "the draft's hidden rows over the step's, in place, for the next draft token";
  let description = [{
    The result is `dest`'s buffer (glm-plan-memory) holding `src`'s rows: a
    further draft token starts from the MTP layer's output row.

    ```mlir
    %x2 = glm.carry_rows %x, %y : (tensor<?x6144xf32>, tensor<?x6144xf32>) -> tensor<?x6144xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$dest, 2DTensorOf<[F32]>:$src);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_LmHeadOp : Glm_Op<"lm_head", [Pure]> {
  let summary = "logits = lm_head · x (after the final norm)";
  let description = [{
    ```mlir
    %l = glm.lm_head %x {weight = @lm_head} : (tensor<?x6144xf32>) -> tensor<?x154880xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, FlatSymbolRefAttr:$weight,
                       OptionalAttr<Glm_ShardAttr>:$shard);
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Glm_SampleOp : Glm_Op<"sample"> {
  let summary = "next token from logits (greedy or temperature/top-p)";
  let description = [{
    Defaults come from generation_config; `eos` are the stop ids.

    ```mlir
    %t = glm.sample %l {eos = array<i64: 154820>, temperature = 1.0 : f64,
                        top_p = 0.95 : f64} : (tensor<?x154880xf32>) -> tensor<?xi32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$logits, DenseI64ArrayAttr:$eos,
                       F64Attr:$temperature, F64Attr:$top_p);
  let results = (outs 1DTensorOf<[I32]>:$tokens);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // GLM_MODEL_OPS_TD
