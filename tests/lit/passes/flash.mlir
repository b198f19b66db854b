// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width)' | FileCheck %s --check-prefix=WIDTH
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width,glm-plan-memory{max-context=64 max-tokens=8 max-sequences=2})' | FileCheck %s --check-prefix=MEM
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse)' | FileCheck %s --check-prefix=FUSE
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-emit-kernels{decode-batches=1 prefill-chunks=16})' | FileCheck %s --check-prefix=KERNELS

// GLM-5.3-Flash through the passes that know it. glm-shard-tp: KDA heads
// split like MLA heads, with an all-reduce of o_proj's partial sums before
// glm.hc_post writes the output back into the streams; the mHC ops stay
// replicated; the clamped MLPs split halves as before.
// CHECK: %[[X:.*]] = glm.hc_streams %{{.*}} {streams = 4 : i64}
// CHECK: %[[U:.*]], %[[MIX:.*]] = glm.hc_pre %[[X]] {{{.*}}site = "attn"
// CHECK: %[[KDA:.*]] = glm.kda {{.*}}shard = #glm.shard<heads, ranks = 3, units = 4, layer = 0>
// CHECK-NEXT: %[[RED:.*]] = glm.allreduce %[[KDA]] {ranks = 3 : i64}
// CHECK-NEXT: glm.hc_post %[[X]], %[[RED]], %[[MIX]] {layer = 0 : i64, streams = 4 : i64}
// CHECK: glm.mlp {{.*}}shard = #glm.shard<halves, ranks = 3, units = 1, layer = 0>, swiglu_limit = 1.500000e+00 : f64
// CHECK: glm.dsa_indexer full {{.*}}kpool = 4 : i64
// CHECK: glm.mla {{.*}}shard = #glm.shard<heads, ranks = 3, units = 4, layer = 3>
// CHECK: glm.moe {{.*}}swiglu_limit = 1.500000e+00 : f64
// CHECK: %[[MEAN:.*]] = glm.hc_head %{{.*}} {streams = 4 : i64}
// CHECK-NEXT: glm.rms_norm %[[MEAN]]

// glm-select-width leaves the Flash ops alone.
// WIDTH: glm.kda
// WIDTH: glm.hc_head

// glm-plan-memory: the KDA state of 2 sequences on the rank owning each
// head. Per head and sequence (16·16 + 3·16·3) · 4 bytes = 1600; three KDA
// layers; 4 heads over 3 ranks = 1, 1, 2 heads: 9600, 9600, 19200 bytes.
// MEM: glm.memory = [{{{.*}}rank = 0 : i64, state = 9600 : i64
// MEM-SAME: rank = 1 : i64, state = 9600 : i64
// MEM-SAME: rank = 2 : i64, state = 19200 : i64

// glm-fuse: glm.kda becomes its projections (q, k, v, b and f_b/g_b split
// by heads, f_a/g_a whole), glm.kda_decode and o_proj reading the heads'
// columns; the all-reduce stays after it. The mHC ops stay (one or two
// kernel families each); the k-pool indexer keeps its kpool.
// FUSE: %[[X:.*]] = glm.hc_streams
// FUSE: %[[U:.*]], %[[MIX:.*]] = glm.hc_pre %[[X]] {{.*}}-> (tensor<?x64xf32>, tensor<?x24xf32>)
// FUSE: %[[H:.*]] = glm.rms_norm %[[U]]
// FUSE-NEXT: %[[Q:.*]] = glm.dense_gemv %[[H]] {{{.*}}shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>, weight = @{{.*}}q_proj.weight}
// FUSE-NEXT: %[[K:.*]] = glm.dense_gemv %[[H]] {{.*}}k_proj.weight}
// FUSE-NEXT: %[[V:.*]] = glm.dense_gemv %[[H]] {{.*}}v_proj.weight}
// FUSE-NEXT: %[[FA:.*]] = glm.dense_gemv %[[H]] {format = !glm.dense<f32>, in = 64 : i64, out = 16 : i64, weight = @{{.*}}f_a_proj.weight}
// FUSE-NEXT: %[[B:.*]] = glm.dense_gemv %[[H]] {{.*}}out = 4 : i64, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>, weight = @{{.*}}b_proj.weight}
// FUSE-NEXT: %[[GA:.*]] = glm.dense_gemv %[[H]] {{.*}}g_a_proj.weight}
// FUSE-NEXT: %[[F:.*]] = glm.dense_gemv %[[FA]] {{.*}}shard = #glm.shard<heads, {{.*}}f_b_proj.weight}
// FUSE-NEXT: %[[G:.*]] = glm.dense_gemv %[[GA]] {{.*}}shard = #glm.shard<heads, {{.*}}g_b_proj.weight}
// FUSE-NEXT: %[[D:.*]] = glm.kda_decode %[[Q]], %[[K]], %[[V]], %[[F]], %[[G]], %[[B]] {conv_kernel = 4 : i64, eps = 1.000000e-05 : f64, head_dim = 16 : i64, heads = 4 : i64, layer = 0 : i64, lower_bound = -5.000000e+00 : f64, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>, weights = [@{{.*}}q_conv1d.weight, @{{.*}}k_conv1d.weight, @{{.*}}v_conv1d.weight, @{{.*}}dt_bias, @{{.*}}A_log, @{{.*}}o_norm.weight]}
// FUSE-NEXT: %[[O:.*]] = glm.dense_gemv %[[D]] {{{.*}}split_out = false, weight = @{{.*}}o_proj.weight}
// FUSE-NEXT: %[[R:.*]] = glm.allreduce %[[O]]
// FUSE-NEXT: glm.hc_post %[[X]], %[[R]], %[[MIX]]
// FUSE: glm.indexer_topk {{.*}}kpool = 4 : i64
// FUSE: glm.fused_expert_gemv {{.*}}dense_format = !glm.dense<f32>{{.*}}swiglu_limit = 1.500000e+00 : f64
// FUSE: glm.hc_head
// FUSE-NOT: glm.kda {

// glm-emit-kernels: the Flash families (fill_f32 zeroes the other rank's
// heads before kda_decode; the NoPE k-pool indexer has no rope_rows; the
// prefill bucket's KDA runs kda_prep + kda_chunk).
// KERNELS-DAG: glm.hc_streams {{.*}}glm.kernels = ["glm_mhc_post_s4_t256"]
// KERNELS-DAG: glm.hc_pre {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_mhc_mix_s4_t256"]
// KERNELS-DAG: glm.kda_decode {{.*}}glm.kernels = ["glm_fill_f32_t256", "glm_kda_decode_r4_t128"]
// KERNELS-DAG: glm.hc_post {{.*}}glm.kernels = ["glm_mhc_post_s4_t256"]
// KERNELS-DAG: glm.indexer_topk {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_gemv_any_t256", "glm_gemv_any_t256", "glm_kpool_store_t256", "glm_gemv_any_t256", "glm_indexer_scores_ctx_p4_t256", "glm_dsa_select_p4_t1024"]
// KERNELS-DAG: glm.attention_decode {{.*}}glm.kernels = ["glm_kv_store_t256", "glm_fill_f32_t256", "glm_mla_qabs_t64", "glm_mla_scores_t256", "glm_mla_softmax_t1024", "glm_mla_values_t256", "glm_mla_out_t256"]
// KERNELS-DAG: glm.mlp {{.*}}glm.kernels = ["glm_gemv_any_t256", "glm_gemv_any_t256", "glm_swiglu_t256", "glm_gemv_any_sumfixed_out_t256"]
// KERNELS-DAG: glm.hc_head {{.*}}glm.kernels = ["glm_mhc_head_s4_t256"]
// KERNELS-DAG: glm.buckets = [{batch = 1 : i64, kind = "decode", size = 1 : i64}, {batch = 8 : i64, kind = "prefill", size = 16 : i64}]
// KERNELS-DAG: name = "glm_kda_prep_t256"
// KERNELS-DAG: name = "glm_kda_chunk_c32_tf32x3_t256"
