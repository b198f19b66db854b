// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1024 kv-dtype=bf16 max-tokens=8})' | FileCheck %s
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1024 kv-dtype=fp8 max-tokens=8})' | FileCheck %s --check-prefix=FP8
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1024 kv-dtype=bf16 max-tokens=8 max-sequences=3})' | FileCheck %s --check-prefix=SLOTS
// RUN: sed 's/^module attributes {/module attributes {glm.mtp = [{layer = 2 : i64, latent = 80 : i64, index_head_dim = 32 : i64, kpool = 1 : i64}], /' %S/Inputs/model.mlir | glmc-opt -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1024 kv-dtype=bf16 max-tokens=8})' | FileCheck %s --check-prefix=MTP
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1048576 memory-per-spark=0.001})' 2>&1 | FileCheck %s --check-prefix=OVER
// RUN: glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-shard-tp{ranks=2},glm-select-width,glm-fuse,glm-plan-memory{max-context=1024 max-tokens=8})' | FileCheck %s --check-prefix=F32
// RUN: not glmc-opt %S/Inputs/model.mlir -pass-pipeline='builtin.module(glm-plan-memory{kv-dtype=int8})' 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not glmc compile %S/Inputs --kv-dtype e5m2 -o %t.glmplan 2>&1 | FileCheck %s --check-prefix=CLI

// KV: 2 layers x 1024 tokens x (64 + 16) x 2 bytes = 327680, plus layer 0's
// index keys 1024 x 32 x 2 = 65536: 393216 bytes on every rank.
// CHECK: glm.kv = {bytes = 393216 : i64, dtype = "bf16", max_context = 1024 : i64, max_tokens = 8 : i64, slots = 1 : i64}
// CHECK-SAME: glm.memory = [{activations = [[ACT:[0-9]+]] : i64, kv = 393216 : i64, rank = 0 : i64, state = 0 : i64, total = {{[0-9]+}} : i64, weights = {{[0-9]+}} : i64}, {activations = [[ACT]] : i64, kv = 393216 : i64, rank = 1 : i64
// Every value has an arena offset; the embedding output and a later value
// reuse freed space.
// CHECK: glm.embed {{.*}}glm.arena = array<i64: [[EMB:[0-9]+]]>
// fp8 rows are E4M3 values and the row's fp32 scale: 2 x 1024 x (80 + 4)
// + 1024 x (32 + 4) = 208896.
// FP8: glm.kv = {bytes = 208896 : i64, dtype = "fp8"
// The default, f32 (what the kernels computed): 4 bytes a value.
// F32: glm.kv = {bytes = 786432 : i64, dtype = "f32"
// Three KV slots (sequences): three caches.
// SLOTS: glm.kv = {bytes = 1179648 : i64, dtype = "bf16", max_context = 1024 : i64, max_tokens = 8 : i64, slots = 3 : i64}
// An MTP layer (glm.mtp, from the import): its latent cache 1024 x 80 x 2
// and index keys 1024 x 32 x 2 join the KV cache of every rank.
// MTP: glm.kv = {bytes = 622592 : i64, dtype = "bf16", max_context = 1024 : i64, max_tokens = 8 : i64, mtp_bytes = 229376 : i64, slots = 1 : i64}
// MTP-SAME: glm.memory = [{activations = {{[0-9]+}} : i64, kv = 622592 : i64, rank = 0 : i64

// OVER: the plan does not fit 0.001 GiB per Spark; per rank (GiB):
// OVER: rank   weights        KV  activations     total    budget
// OVER: 0 {{.*}} OVER
// OVER: 1 {{.*}} OVER
// OVER: use more Sparks (--sparks), a shorter --max-context, --kv-dtype fp8 or a smaller manifest

// DTYPE: glm-plan-memory: kv-dtype must be f32, bf16 or fp8, got 'int8'
// glmc compile refuses it before reading the pack, saying what it takes.
// CLI: --kv-dtype: 'e5m2' is no KV cache storage: give f32 (4 bytes a value), bf16 (2) or fp8 (E4M3, 1 and a 4-byte scale per row)
