// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{arch=sm_121,sm_90})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels)' | FileCheck %s --check-prefix=ORDER
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-emit-kernels{arch=gfx90a})' 2>&1 | FileCheck %s --check-prefix=ARCH

// Both layers' attention launches share kernels: identical ops, one spec.
// CHECK: glm.archs = ["sm_121", "sm_90"]
// CHECK-SAME: glm.kernel_specs = [
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[KV:"[^"]+"]], [[ROPE:"[^"]+"]], [[FILL:"[^"]+"]], [[QABS:"[^"]+"]], [[CORE:"[^"]+"]], [[OUT:"[^"]+"]]]
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[KV]], [[ROPE]], [[FILL]], [[QABS]], [[CORE]], [[OUT]]]
// Every launch of an op, in its order (what the plan executor runs): the
// indexer's q projection and RoPE, key projection and store, head weights,
// scores and selection; the cache store, RoPE and absorbed MLA; the dense
// MLP's gate, up, SwiGLU and down; the router's gate GEMV before the
// selection; the trellis experts as one input rotation and the two
// moe_trellis stages (codegen/moe_trellis_abi.h).
// ORDER: glm.indexer_topk {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_rope_rows_t32", "glm_gemv_any_t256", "glm_index_key_store_t256", "glm_gemv_any_t256", "glm_indexer_scores_ctx_t256", "glm_dsa_select_t1024"]
// ORDER: glm.attention_decode {{.*}}glm.kernels = ["glm_kv_store_t256", "glm_rope_rows_t32", "glm_mla_qabs_t64", "glm_mla_core_t1024", "glm_mla_out_t256"]
// ORDER: glm.mlp {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_gemv_any_t256", "glm_swiglu_t256", "glm_gemv_any_t256"]
// ORDER: glm.router {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_route_t32"]
// ORDER: glm.fused_expert_gemv {{.*}}glm.kernels = ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_t128"]
// The collectives run on NCCL: no kernel.
// CHECK-NOT: glm.allreduce {{.*}}glm.kernels

// ARCH: arch 'gfx90a' is not of the form sm_NN (sm_121, sm_90)
