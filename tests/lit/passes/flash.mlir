// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width)' | FileCheck %s --check-prefix=WIDTH
// RUN: glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=3},glm-select-width,glm-plan-memory{max-context=64 max-tokens=8 max-sequences=2})' | FileCheck %s --check-prefix=MEM
// RUN: not glmc-opt %S/Inputs/flash.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse)' 2>&1 | FileCheck %s --check-prefix=FUSE

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

// No kernels yet: glm-fuse stops at the first Flash op and says what works.
// FUSE: error: 'glm.hc_streams' (GLM-5.3-Flash) has no kernel lowering yet
