// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{arch=sm_121,sm_90})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels)' | FileCheck %s --check-prefix=ORDER
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-emit-kernels{arch=gfx90a})' 2>&1 | FileCheck %s --check-prefix=ARCH

// Both layers' attention launches share kernels: identical ops, one spec.
// CHECK: glm.archs = ["sm_121", "sm_90"]
// CHECK-SAME: glm.kernel_specs = [
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[ROPE:"[^"]+"]], [[MLA:"[^"]+"]]]
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[ROPE]], [[MLA]]]
// Every launch the CUDA executor runs for an op, in its order: the
// indexer's q/k/weight projections around its RoPE, the dense MLP's gate,
// up and down GEMVs, the router's gate GEMV before the selection, and the
// trellis experts as one input rotation and the two moe_trellis stages
// (the executor's launch tuning, codegen/moe_trellis_abi.h).
// ORDER: glm.indexer_topk {{.*}}glm.kernels = ["glm_dense_gemv_fp8_block_sf32_b1_t256", "glm_rope_d16", "glm_dense_gemv_fp8_block_sf32_b1_t256", "glm_dense_gemv_bf16_snone_b1_t256", "glm_indexer_scores_d32_h4_kbf16_t256", "glm_topk_t256"]
// ORDER: glm.mlp {{.*}}glm.kernels = ["glm_dense_gemv_fp8_block_sf32_b1_t256", "glm_dense_gemv_fp8_block_sf32_b1_t256", "glm_dense_gemv_fp8_block_sf32_b1_t256"]
// ORDER: glm.router {{.*}}glm.kernels = ["glm_dense_gemv_bf16_snone_b1_t256", "glm_router_e4_k2_t256"]
// ORDER: glm.fused_expert_gemv {{.*}}glm.kernels = ["glm_hadamard128_vf32_t256", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_gu_p4_m4_t128", "glm_moe_trellis_k34_mcg_e4m3_b1_svf32_down_p4_m4_t128"]
// The collectives run on NCCL: no kernel.
// CHECK-NOT: glm.allreduce {{.*}}glm.kernels

// ARCH: arch 'gfx90a' is not of the form sm_NN (sm_121, sm_90)
