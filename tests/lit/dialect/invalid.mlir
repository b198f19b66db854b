// RUN: glmc-opt %s -split-input-file -verify-diagnostics
// Every verifier of the glm dialect rejects what types cannot express.

// expected-error @+1 {{trellis width 2.5 is not allowed for codebook mcg}}
glm.weight @w : !glm.trellis<2.5, mcg, row_major, e4m3> {name = "w", shape = array<i64: 16, 16>, ranges = array<i64: 0, 0, 80, 0>}

// -----

// expected-error @+1 {{trellis width 9 is not allowed for codebook mul1}}
glm.weight @w : !glm.trellis<9, mul1, row_major, fp16> {name = "w", shape = array<i64: 16, 16>, ranges = array<i64: 0, 0, 80, 0>}

// -----

// expected-error @+1 {{layout must be hf, exl3 or exlr8, got 'gguf'}}
glm.pack @pack {layout = "gguf", dir = "/p", files = [], roles = [], config_hash = "", index_hash = "", manifest_hash = "", manifest = ""}

// -----

// expected-error @+1 {{trellis weight shape must be 2-D in 16x16 tiles, got [100, 128]}}
glm.weight @w : !glm.trellis<3, mcg, row_major, e4m3> {name = "w", shape = array<i64: 100, 128>, ranges = array<i64: 0, 0, 80, 0>}

// -----

glm.pack @pack {layout = "exlr8", dir = "/p", files = ["a"], roles = ["data"], config_hash = "", index_hash = "", manifest_hash = "", manifest = ""}
// expected-error @+1 {{ranges entry 0 names file 3 but the pack lists 1}}
glm.weight @w : !glm.dense<bf16> {name = "w", shape = array<i64: 4>, ranges = array<i64: 3, 0, 8, 0>}

// -----

// expected-error @+1 {{'w' has no byte range}}
glm.weight @w : !glm.dense<bf16> {name = "w", shape = array<i64: 4>, ranges = array<i64>}

// -----

// expected-error @+1 {{halves must be ceil(inter / 128) = 2, got 3}}
glm.experts @bank : !glm.dense<bf16> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 3 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 256 : i64, parts = array<i64>, sides = array<i64>}

// -----

// expected-error @+1 {{expects 3 parts (15 values), got 5 values}}
glm.experts @bank : !glm.dense<bf16> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0>, sides = array<i64>}

// -----

// expected-error @+1 {{part 2 has width 4.5, not allowed for codebook mcg}}
glm.experts @bank : !glm.trellis<?, mcg, row_major, e4m3> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0>, sides = array<i64>, widths = array<i32: 6, 6, 9>}

// -----

// expected-error @+1 {{part 1 names sides [0, 2) of 1}}
glm.experts @bank : !glm.dense<bf16> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 2, 0, 2, 1, 0, 0>, sides = array<i64: 0, 9, 1, 0>}

// -----

// expected-error @+1 {{layer 3 asks for width 5 but the pack stores only [4, 6] (twice the bits)}}
glm.manifest {name = "home", layers = array<i64: 3>, available = array<i32: 4, 6>, widths = [array<i32: 4, 10>]}

// -----

func.func @f(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{eps must be positive, got 0}}
  %y = glm.rms_norm %x {weight = @n, eps = 0.0 : f64} : tensor<?x256xf32>
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>, %s: tensor<?x?xi32>) {
  // expected-error @+1 {{interleaved RoPE needs an even qk_rope, got 15}}
  %a = glm.mla %h, %s {layer = 0 : i64, heads = 4 : i64, q_lora = 64 : i64, kv_lora = 64 : i64, qk_nope = 32 : i64, qk_rope = 15 : i64, v_head = 32 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64, q_a = @qa, q_a_norm = @qan, q_b = @qb, kv_a = @kva, kv_a_norm = @kvan, kv_b = @kvb, o = @o} : (tensor<?x256xf32>, tensor<?x?xi32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>, %s: tensor<?x?xi32>) {
  // expected-error @+1 {{shard has 8 units but the op has 4}}
  %a = glm.mla %h, %s {layer = 0 : i64, heads = 4 : i64, q_lora = 64 : i64, kv_lora = 64 : i64, qk_nope = 32 : i64, qk_rope = 16 : i64, v_head = 32 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64, q_a = @qa, q_a_norm = @qan, q_b = @qb, kv_a = @kva, kv_a_norm = @kvan, kv_b = @kvb, o = @o, shard = #glm.shard<heads, ranks = 2, units = 8, layer = 0>} : (tensor<?x256xf32>, tensor<?x?xi32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>) {
  // expected-error @+1 {{full indexer needs 5 weights (wq_b, wk, k_norm, k_norm_bias, weights_proj), got 1}}
  %s = glm.dsa_indexer full %h {layer = 0 : i64, heads = 4 : i64, head_dim = 32 : i64, rope = 16 : i64, topk = 8 : i64, weights = [@a]} : (tensor<?x256xf32>) -> tensor<?x?xi32>
  return
}

// -----

func.func @f(%s0: tensor<?x?xi32>) {
  // expected-error @+1 {{shared indexer has no weights, got 1}}
  %s = glm.dsa_indexer shared %s0 {layer = 3 : i64, heads = 4 : i64, head_dim = 32 : i64, rope = 16 : i64, topk = 8 : i64, weights = [@a]} : (tensor<?x?xi32>) -> tensor<?x?xi32>
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>) {
  // expected-error @+1 {{top_k 9 must be in [1, experts = 4]}}
  %i, %w = glm.router %h {weight = @g, bias = @b, experts = 4 : i64, top_k = 9 : i64, scale = 2.5 : f64, renormalize = true} : (tensor<?x256xf32>) -> (tensor<?x9xi32>, tensor<?x9xf32>)
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>) {
  // expected-error @+1 {{result has 3 columns, expected top_k = 2}}
  %i, %w = glm.router %h {weight = @g, bias = @b, experts = 4 : i64, top_k = 2 : i64, scale = 2.5 : f64, renormalize = true} : (tensor<?x256xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return
}

// -----

func.func @f(%h: tensor<?x256xf32>, %i: tensor<?x2xi32>, %w: tensor<?x3xf32>) {
  // expected-error @+1 {{differ in shape}}
  %m = glm.moe %h, %i, %w {experts = @bank, layer = 1 : i64} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x3xf32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%l: tensor<?x512xf32>) {
  // expected-error @+1 {{needs temperature >= 0 and top_p in (0, 1], got 1, 0}}
  %n = glm.sample %l {eos = array<i64: 1>, temperature = 1.0 : f64, top_p = 0.0 : f64} : (tensor<?x512xf32>) -> tensor<?xi32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>, %i: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{width 2.5 is not allowed for codebook mcg}}
  %p = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 256 : i64, inter = 256 : i64, halves = 2 : i64, widths = array<i32: 5>, codebook = #glm.codebook<mcg>, e4m3 = true, shard = #glm.shard<halves, ranks = 3, units = 2, layer = 3>} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%x: tensor<?x200xf32>, %i: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{hidden 200 must be a multiple of 128 (Hadamard blocks)}}
  %p = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 200 : i64, inter = 256 : i64, halves = 2 : i64, widths = array<i32: 6>, codebook = #glm.codebook<mcg>, e4m3 = true, shard = #glm.shard<halves, ranks = 3, units = 2, layer = 3>} : (tensor<?x200xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x200xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>, %i: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{shard must be by halves with units = 2}}
  %p = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 256 : i64, inter = 256 : i64, halves = 2 : i64, widths = array<i32: 6>, codebook = #glm.codebook<mcg>, e4m3 = true, shard = #glm.shard<heads, ranks = 3, units = 2, layer = 3>} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>, %i: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{needs either a codebook (trellis experts) or a dense_format, not both or neither}}
  %p = glm.fused_expert_gemv %x, %i, %w {bank = @bank, layer = 3 : i64, experts = 4 : i64, shared = 1 : i64, top_k = 2 : i64, hidden = 256 : i64, inter = 256 : i64, halves = 2 : i64, widths = array<i32>, e4m3 = false, shard = #glm.shard<halves, ranks = 3, units = 2, layer = 3>} : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{input has 256 columns, weight has in = 128}}
  %q = glm.dense_gemv %x {weight = @qb, format = !glm.dense<bf16>, out = 64 : i64, in = 128 : i64} : (tensor<?x256xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{trellis weight [72, 256] is not made of 16x16 tiles}}
  %q = glm.dense_gemv %x {weight = @qb, format = !glm.trellis<4, mcg, row_major, e4m3>, out = 72 : i64, in = 256 : i64} : (tensor<?x256xf32>) -> tensor<?x72xf32>
  return
}

// -----

func.func @f(%q: tensor<?x192xf32>, %kv: tensor<?x80xf32>, %sel: tensor<?x?xi32>) {
  // expected-error @+1 {{kv has 80 columns, expected kv_lora + qk_rope = 48}}
  %a = glm.attention_decode %q, %kv, %sel {layer = 0 : i64, heads = 4 : i64, kv_lora = 32 : i64, qk_nope = 32 : i64, qk_rope = 16 : i64, v_head = 32 : i64, rope_theta = 8.0e+06 : f64, eps = 1.0e-05 : f64, kv_b = @kvb, kv_norm = @kvan, shard = #glm.shard<heads, ranks = 2, units = 4, layer = 0>} : (tensor<?x192xf32>, tensor<?x80xf32>, tensor<?x?xi32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{rank count must be at least 1, got 0}}
  %r = glm.allreduce %x {ranks = 0 : i64} : tensor<?x256xf32>
  return
}

// -----

func.func @f(%x: tensor<?x256xf32>) {
  // expected-error @+1 {{rank count must be at least 1, got 0}}
  %a = glm.mlp %x {layer = 0 : i64, inter = 512 : i64, gate = @g, up = @u, down = @d, shard = #glm.shard<halves, ranks = 0, units = 4, layer = 0>} : (tensor<?x256xf32>) -> tensor<?x256xf32>
  return
}

// -----

// GLM-5.3-Flash ops.
func.func @kda_weights(%h: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{needs 15 weights}}
  %a = glm.kda %h {layer = 0 : i64, heads = 4 : i64, head_dim = 16 : i64, conv_kernel = 4 : i64, eps = 1.0e-05 : f64, weights = [@q]} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

func.func @kda_bound(%h: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{lower_bound must be negative}}
  %a = glm.kda %h {layer = 0 : i64, heads = 4 : i64, head_dim = 16 : i64, conv_kernel = 4 : i64, lower_bound = 5.0 : f64, eps = 1.0e-05 : f64, weights = [@a, @a, @a, @a, @a, @a, @a, @a, @a, @a, @a, @a, @a, @a, @a]} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

func.func @hc_pre_mix(%X: tensor<?x256xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{mix holds pre (4), post (4) and comb (16): 24 columns, got 16}}
  %u, %m = glm.hc_pre %X {layer = 0 : i64, site = "attn", streams = 4 : i64, sinkhorn_iters = 20 : i64, hc_eps = 1.0e-06 : f64, eps = 1.0e-05 : f64, fn = @f, base = @b, scale = @s} : (tensor<?x256xf32>) -> (tensor<?x64xf32>, tensor<?x16xf32>)
  return %u : tensor<?x64xf32>
}

// -----

func.func @hc_pre_site(%X: tensor<?x256xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{site must be "attn" or "ffn"}}
  %u, %m = glm.hc_pre %X {layer = 0 : i64, site = "mlp", streams = 4 : i64, sinkhorn_iters = 20 : i64, hc_eps = 1.0e-06 : f64, eps = 1.0e-05 : f64, fn = @f, base = @b, scale = @s} : (tensor<?x256xf32>) -> (tensor<?x64xf32>, tensor<?x24xf32>)
  return %u : tensor<?x64xf32>
}

// -----

func.func @hc_post_width(%X: tensor<?x256xf32>, %y: tensor<?x32xf32>, %m: tensor<?x24xf32>) -> tensor<?x256xf32> {
  // expected-error @+1 {{4 streams of width 32 need 128 columns, got 256}}
  %r = glm.hc_post %X, %y, %m {layer = 0 : i64, streams = 4 : i64} : (tensor<?x256xf32>, tensor<?x32xf32>, tensor<?x24xf32>) -> tensor<?x256xf32>
  return %r : tensor<?x256xf32>
}

// -----

func.func @kpool_topk(%h: tensor<?x64xf32>) -> tensor<?x?xi32> {
  // expected-error @+1 {{kpool 3 must be positive and divide topk 8}}
  %s = glm.dsa_indexer full %h {layer = 3 : i64, heads = 4 : i64, head_dim = 16 : i64, rope = 0 : i64, topk = 8 : i64, kpool = 3 : i64, weights = [@a, @a, @a, @a, @a, @a, @a]} : (tensor<?x64xf32>) -> tensor<?x?xi32>
  return %s : tensor<?x?xi32>
}

// -----

func.func @kpool_weights(%h: tensor<?x64xf32>) -> tensor<?x?xi32> {
  // expected-error @+1 {{full indexer needs 7 weights}}
  %s = glm.dsa_indexer full %h {layer = 3 : i64, heads = 4 : i64, head_dim = 16 : i64, rope = 0 : i64, topk = 8 : i64, kpool = 4 : i64, weights = [@a, @a, @a, @a, @a]} : (tensor<?x64xf32>) -> tensor<?x?xi32>
  return %s : tensor<?x?xi32>
}

// -----

func.func @swiglu_limit(%x: tensor<?x256xf32>) -> tensor<?x256xf32> {
  // expected-error @+1 {{swiglu_limit must be positive}}
  %a = glm.mlp %x {layer = 0 : i64, inter = 512 : i64, gate = @g, up = @u, down = @d, swiglu_limit = -1.0 : f64} : (tensor<?x256xf32>) -> tensor<?x256xf32>
  return %a : tensor<?x256xf32>
}

// -----

func.func @kda_decode_b(%q: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{b has one column per head (4), got 64}}
  %o = glm.kda_decode %q, %q, %q, %q, %q, %b {layer = 0 : i64, heads = 4 : i64, head_dim = 16 : i64, conv_kernel = 4 : i64, eps = 1.0e-05 : f64, weights = [@a, @b, @c, @d, @e, @f], shard = #glm.shard<heads, ranks = 1, units = 4, layer = 0>} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
