// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1})' | FileCheck %s --check-prefix=ONE
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=0})' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-shard-tp{ranks=2})' 2>&1 | FileCheck %s --check-prefix=TWICE

// Attention splits heads, experts and dense MLPs split halves (layer term in
// the rule), the LM head splits the vocabulary; one all-reduce after each
// attention and each MLP/MoE block, an all-gather after the LM head.
// CHECK: module attributes {{{.*}}glm.ranks = 3 : i64
// CHECK: %[[ATT0:.*]] = glm.mla {{.*}}shard = #glm.shard<heads, ranks = 3, units = 4, layer = 0>
// CHECK-NEXT: %[[RED0:.*]] = glm.allreduce %[[ATT0]] {ranks = 3 : i64}
// CHECK-NEXT: glm.add %{{.*}}, %[[RED0]]
// CHECK: %[[MLP:.*]] = glm.mlp {{.*}}shard = #glm.shard<halves, ranks = 3, units = 4, layer = 0>
// CHECK-NEXT: glm.allreduce %[[MLP]] {ranks = 3 : i64}
// CHECK: glm.mla {{.*}}shard = #glm.shard<heads, ranks = 3, units = 4, layer = 1>
// CHECK-NEXT: glm.allreduce
// CHECK: %[[MOE:.*]] = glm.moe {{.*}}shard = #glm.shard<halves, ranks = 3, units = 2, layer = 1>
// CHECK-NEXT: glm.allreduce %[[MOE]] {ranks = 3 : i64}
// CHECK: %[[HEAD:.*]] = glm.lm_head {{.*}}shard = #glm.shard<vocab, ranks = 3, units = 512, layer = -1>
// CHECK-NEXT: %[[ALL:.*]] = glm.allgather %[[HEAD]] {ranks = 3 : i64}
// CHECK-NEXT: glm.sample %[[ALL]]

// ONE: glm.ranks = 1 : i64
// ONE: glm.mla {{.*}}#glm.shard<heads, ranks = 1, units = 4, layer = 0>

// ZERO: glm-shard-tp: ranks must be in [1, 64], got 0
// TWICE: glm-shard-tp: module is already sharded over 2 : i64 ranks
