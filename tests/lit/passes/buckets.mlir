// Graph buckets: decode batches instantiate the GEMV kernels per batch,
// prefill chunks reuse the largest batch's kernels (or prefill families of
// their own); invalid buckets are
// refused with what to give instead.
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=4,1 prefill-chunks=16})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels)' | FileCheck %s --check-prefix=DEFAULT
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{prefill-chunks=0})' | FileCheck %s --check-prefix=NOPREFILL
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=9})' 2>&1 | FileCheck %s --check-prefix=BATCH
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{prefill-chunks=0,512})' 2>&1 | FileCheck %s --check-prefix=CHUNK
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=2,4})' 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory{max-tokens=64},glm-emit-kernels{prefill-chunks=512},glm-emit-plan)' 2>&1 | FileCheck %s --check-prefix=ARENA

// The module lists the buckets first (decode 1, 4, prefill 16 on batch-8
// kernels); kernels that take no batch are shared by every bucket.
// CHECK: glm.buckets = [{batch = 1 : i64, kind = "decode", size = 1 : i64}, {batch = 4 : i64, kind = "decode", size = 4 : i64}, {batch = 8 : i64, kind = "prefill", size = 16 : i64}]
// CHECK-SAME: name = "glm_rms_norm_rows_t1024"
// CHECK-NOT: name = "glm_rms_norm_rows
// The prefill bucket's dense GEMVs run on gemm_dense, FP8 and BF16 alike
// (the indexer's head weights and the router: bf16 x planes).
// CHECK: glm.indexer_topk
// CHECK-SAME: ["glm_gemv_any_t256", "glm_rope_rows_t32", "glm_gemm_dense_fp8_block_sf32_m64_t256", "glm_index_key_store_t256", "glm_gemm_dense_bf16_snone_m64_t256", "glm_indexer_scores_mma_t256", "glm_dsa_select_t1024"]{{.}},
// A prefill chunk's attention: the slot's rows in fp16 once (mla_rows16),
// then the tensor-core attention reading them.
// CHECK: glm.attention_decode
// CHECK-SAME: ["glm_kv_store_t256", "glm_rope_rows_t32", "glm_mla_proj_kn_e4m3_block_t128", "glm_mla_rows16_t256", "glm_mla_prefill_rows16_v4_t64", "glm_mla_proj_nk_e4m3_block_t128"]
// CHECK: glm.router
// CHECK-SAME: ["glm_gemm_dense_bf16_snone_m64_t256", "glm_route_t32"]{{.}},
// Per op, one kernel list per bucket in glm.buckets order; glm.kernels is
// the first bucket's.
// CHECK: glm.fused_expert_gemv
// CHECK-SAME: glm.bucket_kernels = {{.}}["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_t128"],
// CHECK-SAME: ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b8_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b8_svf32_down_p4_m4_sumfixed_t128"],
// A prefill chunk's experts are grouped by expert: sorted entries, the
// tensor-core GEMMs (gate/up, then down: both halves of an expert row
// block in one block, one launch), the weighted sum in fp32 (an fp32
// all-reduce: glm.fixed_sum is false there).
// CHECK-SAME: ["glm_hadamard128_vf32_t256", "glm_moe_group_t512", "glm_moe_gather_t256", "glm_gemm_trellis_grouped_k34_mcg_e4m3_xf16_m64_t128", "glm_moe_act_t256", "glm_gemm_trellis_grouped_k34_mcg_e4m3_xf16_m64_h2_t256", "glm_moe_combine_t256", "glm_hadamard128_vf32_t256"]{{.}},
// CHECK-SAME: glm.fixed_sum = array<i1: true, true, false>
// CHECK-SAME: glm.kernels = ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_t128"]

// DEFAULT: glm.buckets = [{batch = 1 : i64, kind = "decode", size = 1 : i64}, {batch = 2 : i64, kind = "decode", size = 2 : i64}, {batch = 3 : i64, kind = "decode", size = 3 : i64}, {batch = 4 : i64, kind = "decode", size = 4 : i64}, {batch = 5 : i64, kind = "decode", size = 5 : i64}, {batch = 6 : i64, kind = "decode", size = 6 : i64}, {batch = 7 : i64, kind = "decode", size = 7 : i64}, {batch = 8 : i64, kind = "decode", size = 8 : i64}, {batch = 8 : i64, kind = "prefill", size = 512 : i64}, {batch = 8 : i64, kind = "prefill", size = 2048 : i64}]
// NOPREFILL: glm.buckets = [{{.*}}{batch = 8 : i64, kind = "decode", size = 8 : i64}]
// NOPREFILL-NOT: prefill

// BATCH: error: glm-emit-kernels: decode batch 9 is out of range: the decode kernels take batch 1..8 (decode-batches)
// ONE: error: glm-emit-kernels: decode-batches must include 1: per-token figures come from the batch-1 decode graph
// CHUNK: error: glm-emit-kernels: prefill chunk 0 is out of range: give 1..1048576 tokens, or 0 alone for no prefill graphs (prefill-chunks)
// ARENA: error: glm-emit-plan: prefill chunk 512 exceeds the activation arena's 64 tokens: raise glm-plan-memory's max-tokens
