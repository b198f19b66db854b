// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory,glm-emit-kernels{arch=sm_121,sm_90})' | FileCheck %s
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-emit-kernels{arch=gfx90a})' 2>&1 | FileCheck %s --check-prefix=ARCH

// Both layers' attention launches share kernels: identical ops, one spec.
// CHECK: glm.archs = ["sm_121", "sm_90"]
// CHECK-SAME: glm.kernel_specs = [
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[ROPE:"[^"]+"]], [[MLA:"[^"]+"]]]
// CHECK: glm.attention_decode {{.*}}glm.kernels = [[[ROPE]], [[MLA]]]
// CHECK: glm.fused_expert_gemv {{.*}}glm.kernels = ["{{[^"]*}}hadamard128{{[^"]*}}", "{{[^"]*}}expert_gemv_trellis{{[^"]*}}", "{{[^"]*}}moe_reduce{{[^"]*}}"]
// The collectives run on NCCL: no kernel.
// CHECK-NOT: glm.allreduce {{.*}}glm.kernels

// ARCH: arch 'gfx90a' is not of the form sm_NN (sm_121, sm_90)
