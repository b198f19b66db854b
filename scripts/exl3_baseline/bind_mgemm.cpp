// scripts/exl3_baseline/bind_mgemm.cpp: Python binding of exllamav3's
// multi-matrix EXL3 GEMM (exl3_mgemm: one launch for a list of quantized
// matrices, with expert indices and an optional weighted reduction) and its
// silu_mul activation: the three-launch batch-1 MoE path of earlier
// exllamav3 releases. Compiled by build.py with the wheel's own sources; only
// the binding is ours.
#include <torch/extension.h>

#include "activation.cuh"
#include "quant/exl3_gemm.cuh"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("exl3_mgemm", &exl3_mgemm, "exllamav3 multi-matrix EXL3 GEMM",
        py::arg("A"), py::arg("B"), py::arg("C"), py::arg("suh"),
        py::arg("A_had"), py::arg("svh"), py::arg("indices"),
        py::arg("weights"), py::arg("K"), py::arg("force_shape_idx"),
        py::arg("mcg"), py::arg("mul1"), py::arg("min_index"),
        py::arg("max_index"), py::arg("force_num_sms"),
        py::arg("num_tokens") = 1, py::arg("size_n_list") = py::none(),
        py::arg("c_ptrs") = py::none(), py::arg("n_stride_list") = py::none(),
        py::arg("had_src_list") = py::none(), py::arg("num_had_src") = 0);
  m.def("silu_mul", &silu_mul, "exllamav3 z = silu(x) * y");
}
