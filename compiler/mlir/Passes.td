//===- Passes.td - the glmc pass pipeline ------------------*- tablegen -*-===//
//
// Every glmc pass, in pipeline order: glm-shard-tp, glm-select-width,
// glm-fuse, glm-plan-memory, glm-emit-kernels, glm-emit-plan. Options are
// pass options so `-pass-pipeline='builtin.module(glm-shard-tp{ranks=3})'`
// replays any stage of a compile.
//
//===----------------------------------------------------------------------===//
#ifndef GLMC_PASSES_TD
#define GLMC_PASSES_TD

include "mlir/Pass/PassBase.td"

def GlmShardTp : Pass<"glm-shard-tp", "::mlir::ModuleOp"> {
  let summary = "Split the model over N tensor-parallel ranks";
  let description = [{
    Experts by the exlr8 rule generalised to any geometry: part h of expert e
    in layer L lives on rank (H·e + h + L) mod N, H = parts per projection
    (exlr8: 16 halves of 128 channels; EXL3/HF: 1), the shared experts take
    e = E, E + 1, ...; dense MLPs split their 128-channel blocks the same way
    (e = 0). Attention is split by heads, the LM head by vocabulary. Inserts
    one `glm.allreduce` after each attention block and each MLP/MoE block,
    and a `glm.allgather` after the LM head; reductions are fp32 in rank order.
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", "1",
           "number of tensor-parallel ranks (Sparks), 1..64">
  ];
}

def GlmSelectWidth : Pass<"glm-select-width", "::mlir::ModuleOp"> {
  let summary = "Resolve trellis widths per expert part from the manifest";
  let description = [{
    Copies the width of every expert part (exlr8: per half; EXL3: per tensor)
    from `glm.manifest` onto its `glm.experts` bank (attribute `widths`, and
    the bank type when one width covers the layer), then erases the manifest.
    A layer the manifest does not cover is an error.
  }];
}

def GlmFuse : Pass<"glm-fuse", "::mlir::ModuleOp"> {
  let summary = "Lower model-level blocks to kernel-level ops";
  let description = [{
    `glm.moe` → `glm.fused_expert_gemv`; `glm.mla` → q/kv projections
    (`glm.dense_gemv`), `glm.attention_decode`, o projection; full
    `glm.dsa_indexer` → `glm.indexer_topk` (reusing the MLA's q_a), shared
    indexers disappear (their users read the source selection); `glm.mlp` →
    three `glm.dense_gemv`; `glm.lm_head` → `glm.dense_gemv`; a residual
    `glm.add` feeding a `glm.rms_norm` → `glm.add_rms_norm`.
  }];
}

def GlmPlanMemory : Pass<"glm-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Per-rank memory: weights, KV cache, activation arena";
  let description = [{
    Assigns each activation an offset in one arena by liveness (best fit over
    the decode step), sizes the KV cache from max-context × layers × the
    bytes of a row of kv_lora + qk_rope values in the kv-dtype's storage
    form (f32 4 per value, bf16 2, fp8 1 plus a 4-byte scale per row:
    codegen/templates/kv_cache.cuh) (+ index keys on full indexer layers),
    sums each rank's weight bytes, and refuses the compile with a per-rank
    table when a rank exceeds memory-per-spark (0 = no limit). KDA layers
    (GLM-5.3-Flash) add recurrent state per sequence on the rank owning each
    head: the fp32 state heads × dk × dv and the conv inputs
    3 · heads · dk · (conv_kernel − 1), fp32 ("state" per rank).
  }];
  let options = [
    Option<"maxContext", "max-context", "int64_t", "8192",
           "tokens of context the KV cache holds">,
    Option<"kvDtype", "kv-dtype", "std::string", "\"f32\"",
           "KV cache storage: f32, bf16, or fp8 (E4M3 with an fp32 scale "
           "per row)">,
    Option<"memoryPerSpark", "memory-per-spark", "double", "0",
           "GiB available per rank; 0 = no limit">,
    Option<"maxTokens", "max-tokens", "int64_t", "2048",
           "tokens per step the activation arena holds (prefill chunk)">,
    Option<"maxSequences", "max-sequences", "int64_t", "1",
           "KV slots: sequences whose KV cache, index keys and recurrent "
           "state (GLM-5.3-Flash KDA) the plan holds at once">,
    Option<"pageTokens", "page-tokens", "int64_t", "0",
           "paged KV (kv::SlotRows): rows a page, a power of two >= 64 "
           "dividing max-context; 0 = a max-context block per slot">,
    Option<"pages", "pages", "int64_t", "0",
           "paged KV: pages the caches hold, the last a sink for rows past a "
           "sequence's pages; 0 = max-sequences × max-context / "
           "page-tokens + 1 (the unpaged bytes and the sink)">
  ];
}

def GlmEmitKernels : Pass<"glm-emit-kernels", "::mlir::ModuleOp"> {
  let summary = "One kernel per distinct kernel-level op, compiled per arch";
  let description = [{
    Collects the distinct kernel-level ops (attributes that shape the code,
    not layer or weight symbols), names one kernel for each, tags every op
    with its kernel and, with `compile`, compiles each for every `arch`
    through codegen (NVRTC). The kernel count does not grow with layers.
  }];
  let options = [
    ListOption<"archs", "arch", "std::string", "target archs (sm_121, sm_90)">,
    Option<"compile", "compile", "bool", "false",
           "compile every kernel with NVRTC (needs codegen)">,
    Option<"cubin", "cubin", "bool", "true",
           "with compile: also run ptxas and carry CUBIN (SASS) for every "
           "arch; false: PTX only (about half the NVRTC time), which the "
           "runtime JITs once at load">,
    Option<"async", "async", "bool", "false",
           "with compile: leave the NVRTC builds running in the background "
           "for glm-emit-plan to collect (the kernels compile while "
           "glm-plan-memory and glm-emit-plan run; passes in between must "
           "preserve the glmc::KernelBuilds analysis)">,
    Option<"kvDtype", "kv-dtype", "std::string", "\"\"",
           "KV cache storage (f32|bf16|fp8; empty: f32) when "
           "glm-plan-memory has not run yet (its glm.kv attribute wins): "
           "the cache kernels are instantiated for it">,
    ListOption<"decodeBatches", "decode-batches", "int64_t",
               "decode graph batch sizes, 1..8 (default: 1,2,...,8)">,
    ListOption<"prefillChunks", "prefill-chunks", "int64_t",
               "prefill graph chunk sizes in tokens (default: 512,2048; "
               "0 = no prefill graphs)">,
    Option<"moeTrellisTuning", "moe-trellis-tuning", "std::string", "\"\"",
           "moe_trellis launches: guSplit:downGroup:threads:pipe:minBlocks "
           "(empty: codegen's default for the model's hidden size)">,
    Option<"denseTrellisTuning", "dense-trellis-tuning", "std::string", "\"\"",
           "dense_trellis launches: warpsPerSm:minRows:maxSplit:threads:pipe:"
           "pipeBatched:minBlocks (empty: codegen's default)">
  ];
}

def GlmEmitPlan : Pass<"glm-emit-plan", "::mlir::ModuleOp"> {
  let summary = "Write the plan: per-rank bindings, buffers, kernels, steps";
  let description = [{
    Binds every weight byte range to the ranks that read it (replicated
    tensors on every rank), lists buffers and kernels, and serialises the
    plan to `output`. Annotates the module with `glm.plan_summary`
    (per-rank bytes per decoded token, binding counts) for tests and with
    `glm.final_memory` (per rank: the arena the runtime allocates, its
    weight, KV and context-sized parts, and the budget). The budget check
    runs here, on the final plan (weights + KV + activations + scratch, the
    arena `glmc inspect` shows): a rank over `memory-per-spark` refuses the
    plan, naming every rank over it, and nothing is written.
  }];
  let options = [
    Option<"output", "output", "std::string", "\"\"",
           "plan file to write (empty: summary only)">,
    Option<"memoryPerSpark", "memory-per-spark", "double", "0",
           "GiB each rank's arena may use; 0 = no limit">,
    Option<"command", "command", "std::string", "\"\"",
           "the glmc compile command line, recorded in the plan's "
           "compile options (key `command`)">,
    Option<"programmaticLaunch", "programmatic-launch", "bool", "true",
           "mark every kernel launch programmatic (CUDA programmatic "
           "dependent launch: scheduled while the previous kernel runs, "
           "its entry waits for it); false: plain stream order">
  ];
}

#endif // GLMC_PASSES_TD
