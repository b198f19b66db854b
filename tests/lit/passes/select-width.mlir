// RUN: glmc-opt %S/Inputs/model.mlir -glm-select-width | FileCheck %s
// RUN: glmc-opt %s -split-input-file -glm-select-width -verify-diagnostics | FileCheck %s --check-prefix=UNI

// The manifest's per-part widths land on the bank; mixed widths keep the
// type's width at `?`; the manifest op is consumed.
// CHECK: glm.experts @model.layers.1.mlp.experts : !glm.trellis<?, mcg, row_major, e4m3>
// CHECK-SAME: widths = array<i32: 6, 6, 6, 6, 8, 8,
// CHECK-NOT: glm.manifest

// -----

// One width for the whole layer resolves the type.
// UNI: glm.experts @uniform : !glm.trellis<2.5, mul1, row_major, fp16>
// UNI-SAME: widths = array<i32: 5, 5, 5>
glm.experts @uniform : !glm.trellis<?, mul1, row_major, fp16> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0>, sides = array<i64>}
glm.manifest {name = "k2.5", layers = array<i64: 3>, available = array<i32: 5>, widths = [array<i32: 5, 5, 5>]}

// -----

// expected-error @+2 {{layer 4 has no width: the manifest does not list it}}
// expected-note @+1 {{pass --manifest NAME|FILE naming a manifest that covers every MoE layer}}
glm.experts @l4 : !glm.trellis<?, mcg, row_major, e4m3> {layer = 4 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0>, sides = array<i64>}
glm.manifest {name = "home", layers = array<i64>, available = array<i32: 6>, widths = []}

// -----

// expected-error @+1 {{manifest lists 2 widths for layer 3, the bank has 3 parts}}
glm.experts @short : !glm.trellis<?, mcg, row_major, e4m3> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0>, sides = array<i64>}
glm.manifest {name = "home", layers = array<i64: 3>, available = array<i32: 6>, widths = [array<i32: 6, 6>]}

// -----

// expected-error @+1 {{manifest width 2.5 of part 0 is not allowed for codebook mcg}}
glm.experts @badcb : !glm.trellis<?, mcg, row_major, e4m3> {layer = 3 : i64, experts = 1 : i64, shared = 0 : i64, halves = 1 : i64, parts_per_proj = 1 : i64, hidden = 128 : i64, inter = 128 : i64, parts = array<i64: 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 2, 1, 0, 0>, sides = array<i64>}
glm.manifest {name = "home", layers = array<i64: 3>, available = array<i32: 5>, widths = [array<i32: 5, 5, 5>]}
