// Formats the GPU templates cannot decode get no kernel and one precise
// warning per cause (the plan then runs on the CPU executor); f32 dense
// weights run on dense_gemv_f32.
// RUN: sed -e 's/q_a_proj.weight : !glm.dense<fp8_block128>/q_a_proj.weight : !glm.dense<f32>/g' -e 's/kv_a_proj_with_mqa.weight : !glm.dense<fp8_block128>/kv_a_proj_with_mqa.weight : !glm.dense<f16>/g' %S/Inputs/model.mlir > %t.dense.mlir
// RUN: glmc-opt %t.dense.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=1},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=1,2 prefill-chunks=0})' 2>%t.dense.err | FileCheck %s --check-prefix=F32
// RUN: FileCheck %s --check-prefix=F16 --allow-empty < %t.dense.err
// RUN: sed -e 's/!glm.trellis<?, mcg, row_major, e4m3>/!glm.trellis<?, mul1, row_major, e4m3>/' -e 's/available = array<i32: 6, 8>, widths = \[array<i32: 6, 6,/available = array<i32: 5, 6, 8>, widths = [array<i32: 5, 6,/' %S/Inputs/model.mlir > %t.half.mlir
// RUN: glmc-opt %t.half.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{decode-batches=1},glm-emit-plan{output=%t.half.plan})' 2>%t.half.err | FileCheck %s --check-prefix=HALF
// RUN: FileCheck %s --check-prefix=HALFWARN < %t.half.err
// RUN: glmc inspect %t.half.plan --rank 0 --layer 1 | FileCheck %s --check-prefix=HALFPLAN

// f32 and f16 weights run on gemv_any (fp64 sums, any stored dtype); the
// same kernel serves every decode batch, and neither format is refused.
// F32: glm.dense_gemv {{.*}}glm.bucket_kernels = {{.}}["glm_gemv_any_t256"], ["glm_gemv_any_t256"]{{.}}
// F16-NOT: no GPU kernel for glm.dense_gemv

// A half-integer width (2.5, MUL1) in the bank: no expert kernel.
// HALFWARN: warning: no GPU kernel for glm.fused_expert_gemv: expert widths 2.5 (half-integer, mul1) have no GPU kernel: expert_gemv_trellis decodes integer widths 1..8 only (layers 1); the plan cannot be executed (glm-engine --backend reference runs the pack without it)
// HALF: glm.fused_expert_gemv
// HALF-NOT: glm.kernels
// HALF-SAME: -> tensor<?x256xf32>
// The op stays in the plan (its bytes count), without a kernel.
// HALFPLAN: 1      moe
// HALFPLAN-SAME: glm_route_t32
// HALFPLAN-NOT: expert_gemv
