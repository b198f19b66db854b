// RUN: glmc-opt %s -split-input-file | glmc-opt -split-input-file | FileCheck %s
// Every glm type, attribute and op parses, verifies and prints back.

// CHECK-LABEL: glm.pack @pack
// CHECK: glm.weight @w_trellis : !glm.trellis<3, mcg, row_major, e4m3>
// CHECK: glm.weight @w_half : !glm.trellis<2.5, mul1, in_major128, fp16>
// CHECK: glm.weight @w_fp8 : !glm.dense<fp8_block128>
// CHECK: glm.experts @bank : !glm.trellis<?, three_inst, row_major, e4m3>
// CHECK: glm.manifest
glm.pack @pack {layout = "exlr8", dir = "/p", files = ["a", "b"], roles = ["data"], config_hash = "c", index_hash = "i", manifest_hash = "m", manifest = "home"}
glm.weight @w_trellis : !glm.trellis<3, mcg, row_major, e4m3> {name = "t", shape = array<i64: 256, 128>, ranges = array<i64: 0, 0, 12288, 0>}
glm.weight @w_half : !glm.trellis<2.5, mul1, in_major128, fp16> {name = "h", shape = array<i64: 256, 128>, ranges = array<i64: 1, 0, 10240, 0>}
glm.weight @w_fp8 : !glm.dense<fp8_block128> {name = "d", shape = array<i64: 300, 200>, ranges = array<i64: 0, 16384, 60000, 0>}
glm.experts @bank : !glm.trellis<?, three_inst, row_major, e4m3> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 1, 0, 100, 0, 0, 1, 100, 100, 0, 0, 1, 200, 100, 0, 0>, sides = array<i64>}
glm.manifest {name = "home", layers = array<i64: 3>, available = array<i32: 4, 6>, widths = [array<i32: 4, 6, 6>]}

// -----

// CHECK-LABEL: func.func @model_level
// CHECK: glm.embed
// CHECK: glm.rms_norm
// CHECK: glm.dsa_indexer full
// CHECK: glm.dsa_indexer shared
// CHECK: glm.mla
// CHECK-SAME: shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>
// CHECK: glm.add
// CHECK: glm.router
// CHECK: glm.moe
// CHECK: glm.mlp
// CHECK: glm.lm_head
// CHECK: glm.sample
func.func @model_level(%t: tensor<?xi32>) -> tensor<?xi32> {
  %x = glm.embed %t {weight = @e} : (tensor<?xi32>) -> tensor<?x256xf32>
  %h = glm.rms_norm %x {weight = @n, eps = 1.0e-05 : f64} : tensor<?x256xf32>
  %s0 = glm.dsa_indexer full %h {layer = 0 : i64, heads = 4 : i64, head_dim = 32 : i64, rope = 16 : i64, topk = 8 : i64, weights = [@a, @b, @c, @d, @e]} : (tensor<?x256xf32>) -> tensor<?x?xi32>
  %s1 = glm.dsa_indexer shared %s0 {layer = 1 : i64, heads = 4 : i64, head_dim = 32 : i64, rope = 16 : i64, topk = 8 : i64, weights = []} : (tensor<?x?xi32>) -> tensor<?x?xi32>
  %a = glm.mla %h, %s1 {layer = 0 : i64, heads = 4 : i64, q_lora = 64 : i64, kv_lora = 64 : i64, qk_nope = 32 : i64, qk_rope = 16 : i64, v_head = 32 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64, q_a = @qa, q_a_norm = @qan, q_b = @qb, kv_a = @kva, kv_a_norm = @kvan, kv_b = @kvb, o = @o, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>} : (tensor<?x256xf32>, tensor<?x?xi32>) -> tensor<?x256xf32>
  %r = glm.add %x, %a : tensor<?x256xf32>
  %i, %w = glm.router %r {weight = @g, bias = @gb, experts = 4 : i64, top_k = 2 : i64, scale = 2.5 : f64, renormalize = true} : (tensor<?x256xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %m = glm.moe %r, %i, %w {experts = @bank, layer = 1 : i64} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  %d = glm.mlp %m {layer = 0 : i64, inter = 512 : i64, gate = @g, up = @u, down = @dn} : (tensor<?x256xf32>) -> tensor<?x256xf32>
  %l = glm.lm_head %d {weight = @lm} : (tensor<?x256xf32>) -> tensor<?x512xf32>
  %n = glm.sample %l {eos = array<i64: 1, 2>, temperature = 0.0 : f64, top_p = 1.0 : f64} : (tensor<?x512xf32>) -> tensor<?xi32>
  return %n : tensor<?xi32>
}

// -----

// CHECK-LABEL: func.func @kernel_level
// CHECK: glm.fused_expert_gemv
// CHECK-SAME: codebook = #glm.codebook<mcg>
// CHECK-SAME: widths = array<i32: 6, 8>
// CHECK: glm.fused_expert_gemv
// CHECK-SAME: dense_format = !glm.dense<bf16>
// CHECK: glm.dense_gemv
// CHECK: glm.attention_decode
// CHECK: glm.indexer_topk
// CHECK: glm.add_rms_norm
// CHECK: glm.allreduce
// CHECK: glm.allgather
func.func @kernel_level(%x: tensor<?x256xf32>, %i: tensor<?x2xi32>, %w: tensor<?x2xf32>, %sel: tensor<?x?xi32>) -> tensor<?x256xf32> {
  %p = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 256 : i64, inter = 256 : i64, halves = 2 : i64, widths = array<i32: 6, 8>, codebook = #glm.codebook<mcg>, e4m3 = true, shard = #glm.shard<halves, ranks = 3, units = 2, layer = 3>} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  %p2 = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 256 : i64, inter = 200 : i64, halves = 2 : i64, widths = array<i32>, e4m3 = false, dense_format = !glm.dense<bf16>, shard = #glm.shard<halves, ranks = 3, units = 2, layer = 3>} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  %q = glm.dense_gemv %x {weight = @qb, format = !glm.dense<fp8_block128>, out = 192 : i64, in = 256 : i64, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>} : (tensor<?x256xf32>) -> tensor<?x192xf32>
  %kv = glm.dense_gemv %x {weight = @kva, format = !glm.trellis<4, mcg, row_major, e4m3>, out = 80 : i64, in = 256 : i64} : (tensor<?x256xf32>) -> tensor<?x80xf32>
  %att = glm.attention_decode %q, %kv, %sel {layer = 0 : i64, heads = 4 : i64, kv_lora = 64 : i64, qk_nope = 32 : i64, qk_rope = 16 : i64, v_head = 32 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64, kv_b = @kvb, kv_norm = @kvan, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>} : (tensor<?x192xf32>, tensor<?x80xf32>, tensor<?x?xi32>) -> tensor<?x128xf32>
  %s = glm.indexer_topk %x, %x {layer = 0 : i64, heads = 4 : i64, head_dim = 32 : i64, rope = 16 : i64, topk = 8 : i64, weights = [@a, @b, @c, @d, @e]} : (tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x?xi32>
  %sum, %n = glm.add_rms_norm %p, %p2 {weight = @n, eps = 1.0e-05 : f64} : (tensor<?x256xf32>, tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>)
  %r = glm.allreduce %n {ranks = 3 : i64} : tensor<?x256xf32>
  %g = glm.allgather %r {ranks = 3 : i64} : (tensor<?x256xf32>) -> tensor<?x256xf32>
  return %g : tensor<?x256xf32>
}
