// scripts/exl3_baseline/bind_coop.cpp: Python binding of exllamav3's fused
// decode MoE entry point (exl3_moe_coop: gate/up + activation in one launch,
// down + weighted reduction in a second), compiled by build.py together with
// the sources of exllamav3's wheel that implement it. Only the binding is ours:
// the kernels and their front end are exllamav3's, unchanged.
#include <torch/extension.h>

#include "quant/exl3_moe_coop.cuh"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("exl3_moe_coop", &exl3_moe_coop,
        "exllamav3 fused decode MoE: (x, sel, rw) -> out (two launches)");
  m.def("ctr_len", &exl3_moe_coop_ctr_len,
        "int32 counter scratch length (slots_max, bsz_max, I, Ho)");
}
