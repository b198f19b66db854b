// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse)' | FileCheck %s
// RUN: not glmc-opt %S/Inputs/model.mlir -glm-fuse 2>&1 | FileCheck %s --check-prefix=ORDER

// Layer 0: q_a is computed once, before the indexer, and shared with it; the
// MLA becomes q_b (split by heads), kv_a, attention_decode and o_proj (input
// split: a partial sum for the all-reduce).
// CHECK-LABEL: func.func @decode_step
// CHECK: %[[QA:.*]] = glm.dense_gemv %{{.*}} {{{.*}}weight = @model.layers.0.self_attn.q_a_proj.weight}
// CHECK-NEXT: %[[QAN:.*]] = glm.rms_norm %[[QA]] {{{.*}}weight = @model.layers.0.self_attn.q_a_layernorm.weight}
// CHECK-NEXT: %[[SEL:.*]] = glm.indexer_topk %[[QAN]], %{{.*}} {{{.*}}layer = 0 : i64
// CHECK: %[[Q:.*]] = glm.dense_gemv %[[QAN]] {{{.*}}shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>, weight = @model.layers.0.self_attn.q_b_proj.weight}
// CHECK-NEXT: %[[KV:.*]] = glm.dense_gemv {{.*}}weight = @model.layers.0.self_attn.kv_a_proj_with_mqa.weight
// CHECK-NEXT: %[[ATT:.*]] = glm.attention_decode %[[Q]], %[[KV]], %[[SEL]]
// CHECK-NEXT: %[[O:.*]] = glm.dense_gemv %[[ATT]] {{{.*}}split_out = false, weight = @model.layers.0.self_attn.o_proj.weight}
// CHECK-NEXT: glm.allreduce %[[O]]
// Residual add + RMSNorm fuse into one kernel.
// CHECK-NEXT: %[[SUM:.*]], %[[NORMED:.*]] = glm.add_rms_norm
// CHECK: glm.mlp %[[NORMED]]
// Layer 1 has a shared indexer: it vanishes and attention reads layer 0's
// selection.
// CHECK-NOT: glm.dsa_indexer
// CHECK: glm.attention_decode %{{.*}}, %{{.*}}, %[[SEL]]
// The MoE becomes one fused expert kernel with the layer's width set.
// CHECK: glm.fused_expert_gemv
// CHECK-SAME: codebook = #glm.codebook<mcg>
// CHECK-SAME: e4m3 = true
// CHECK-SAME: halves = 2 : i64
// CHECK-SAME: shard = #glm.shard<halves, ranks = 2, units = 2, layer = 1>
// CHECK-SAME: top_k = 2 : i64
// CHECK-SAME: widths = array<i32: 6, 8>
// The LM head is a vocabulary-split dense GEMV before the all-gather.
// CHECK: %[[HEAD:.*]] = glm.dense_gemv {{.*}}shard = #glm.shard<vocab, ranks = 2, units = 512, layer = -1>{{.*}}weight = @lm_head.weight
// CHECK-NEXT: glm.allgather %[[HEAD]]
// CHECK-NOT: glm.mla
// CHECK-NOT: glm.moe

// ORDER: has unresolved widths: run glm-select-width before glm-fuse
