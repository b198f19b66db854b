// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels,glm-emit-plan{output=%t.1.plan})' | FileCheck %s --check-prefix=ONE
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels,glm-emit-plan{output=%t.3.plan})' | FileCheck %s --check-prefix=THREE
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels,glm-emit-plan{output=%t.3b.plan})' -o /dev/null
// RUN: cmp %t.3.plan %t.3b.plan
// RUN: test -s %t.1.plan

// The model's active bytes and the pack's bytes do not depend on the rank
// count; per-rank bytes per token sum to the active bytes.
// ONE: glm.plan_summary = {active_bytes = [[ACTIVE:[0-9]+]] : i64,
// ONE-SAME: bytes_per_token = array<i64: [[ACTIVE]]>
// ONE-SAME: pack_bytes = [[PACK:[0-9]+]] : i64
// ONE-SAME: ranks = 1 : i64
// THREE: glm.plan_summary = {active_bytes = [[ACTIVE3:[0-9]+]] : i64,
// THREE-SAME: bytes_per_token = array<i64: {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>
// THREE-SAME: ranks = 3 : i64
