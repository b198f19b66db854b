// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{arch=sm_121,sm_90})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels)' | FileCheck %s --check-prefix=ORDER
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-emit-kernels{arch=gfx90a})' 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory{kv-dtype=fp8},glm-emit-kernels)' | FileCheck %s --check-prefix=FP8
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-emit-kernels{kv-dtype=bf16})' | FileCheck %s --check-prefix=BF16
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{moe-trellis-tuning=2:1:64:2:2 dense-trellis-tuning=8:1:64:64:0:0:2})' | FileCheck %s --check-prefix=TUNED
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-emit-kernels{dense-trellis-tuning=16:2})' 2>&1 | FileCheck %s --check-prefix=BADTUNE
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{moe-trellis-tuning=24:2:128:4:4})' 2>&1 | FileCheck %s --check-prefix=MOETRAP

// Both layers' attention launches share kernels: identical ops, one spec.
// CHECK: glm.archs = ["sm_121", "sm_90"]
// CHECK-SAME: glm.kernel_specs = [
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[KV:"[^"]+"]], [[ROPE:"[^"]+"]], [[FILL:"[^"]+"]], [[QABS:"[^"]+"]], [[SCORES:"[^"]+"]], [[SOFTMAX:"[^"]+"]], [[VALUES:"[^"]+"]], [[OUT:"[^"]+"]]]
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[KV]], [[ROPE]], [[FILL]], [[QABS]], [[SCORES]], [[SOFTMAX]], [[VALUES]], [[OUT]]]
// Every launch of an op, in its order (what the plan executor runs): the
// indexer's q projection and RoPE, key projection and store, head weights,
// scores and selection; the cache store, RoPE and absorbed MLA; the dense
// MLP's gate, up, SwiGLU and down; the router's gate GEMV before the
// selection; the trellis experts as one input rotation and the two
// moe_trellis stages (codegen/moe_trellis_abi.h). bf16/FP8 weights with a
// multiple of 128 inputs stream through dense_gemv; the rest (here the
// indexer's q_b with 64-wide inputs) run on gemv_any.
// ORDER: glm.indexer_topk {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_rope_rows_t32", "glm_dense_gemv_fp8_block_sf32_b1_stream_t256", "glm_index_key_store_t256", "glm_dense_gemv_bf16_snone_b1_stream_t256", "glm_indexer_scores_ctx_t256", "glm_dsa_select_t1024"]
// ORDER: glm.attention_decode {{.*}}glm.kernels = ["glm_kv_store_t256", "glm_rope_rows_t32", "glm_mla_qabs_t64", "glm_mla_scores_t256", "glm_mla_softmax_t1024", "glm_mla_values_t256", "glm_mla_out_t256"]
// ORDER: glm.mlp {{.*}}glm.kernels = ["glm_dense_gemv_fp8_block_sf32_b1_r2_stream_t256", "glm_dense_gemv_fp8_block_sf32_b1_r2_stream_t256", "glm_swiglu_t256", "glm_dense_gemv_fp8_block_sf32_b1_sumfixed_stream_t256"]
// ORDER: glm.router {{.*}}glm.kernels = ["glm_dense_gemv_bf16_snone_b1_stream_t256", "glm_route_t32"]
// ORDER: glm.fused_expert_gemv {{.*}}glm.kernels = ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_t128"]
// The KV cache's writers and readers are instantiated for its storage
// (--kv-dtype; glm.kv's dtype wins over the pass option): the index-key
// store and scores, the latent store and its readers; the other kernels keep
// their names.
// FP8: glm.indexer_topk {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_rope_rows_t32", "glm_dense_gemv_fp8_block_sf32_b1_stream_t256", "glm_index_key_store_kve4m3_t256", "glm_dense_gemv_bf16_snone_b1_stream_t256", "glm_indexer_scores_ctx_kve4m3_t256", "glm_dsa_select_t1024"]
// FP8: glm.attention_decode {{.*}}glm.kernels = ["glm_kv_store_kve4m3_t256", "glm_rope_rows_t32", "glm_mla_qabs_t64", "glm_mla_scores_kve4m3_t256", "glm_mla_softmax_t1024", "glm_mla_values_kve4m3_t256", "glm_mla_out_t256"]
// BF16: glm.attention_decode {{.*}}glm.kernels = ["glm_kv_store_kvbf16_t256", "glm_rope_rows_t32", "glm_mla_qabs_t64", "glm_mla_scores_kvbf16_t256", "glm_mla_softmax_t1024", "glm_mla_values_kvbf16_t256", "glm_mla_out_t256"]
// A sum over rank-owned units ends in fixed point (the same bits at every
// rank count): one rank converts in the kernel (sum = fixed, above); two
// write int64 rows (fixed_out), all-reduce them on NCCL and convert after.
// CHECK: glm.fused_expert_gemv {{.*}}"glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_sumfixed_out_t128"
// CHECK: glm.allreduce {{.*}}glm.kernels = ["glm_fixed_to_f32_t256"]

// ARCH: arch 'gfx90a' is not of the form sm_NN (sm_121, sm_90)

// glmc compile --moe-trellis-tuning / --dense-trellis-tuning reach the
// kernels' template arguments (recorded on the module for glm-emit-plan).
// TUNED: glm.tuning = {dense_trellis = "8:1:64:64:0:0:2", moe_trellis = "2:1:64:2:2"}
// TUNED: glm.fused_expert_gemv {{.*}}glm.kernels = ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p2_m2_t64", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p2_m2_sumfixed_t64"]
// BADTUNE: --dense-trellis-tuning "16:2": expected 7 colon-separated fields
// A tuning the kernel would trap on is refused, naming the rule (guSplit 24
// does not divide this model's 256/16 rows).
// MOETRAP: error: glm-emit-kernels: --moe-trellis-tuning 24:2:128:4:4 gives moe_trellis launches the kernel traps on at hidden 256
