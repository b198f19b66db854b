//===- disassemble.h - SASS of a plan kernel, through nvdisasm ------------===//
//
// The performance model (plans/perf_model.h) counts a kernel's SASS per
// pipe. Here: compile the kernel's source for an arch to a CUBIN (NVRTC,
// through the kernel cache), disassemble it with the toolkit's nvdisasm and
// profile it (plans/sass_profile.h). No GPU needed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"
#include "plans/sass_profile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace glm::codegen {

/// The nvdisasm to run: $GLMC_NVDISASM, else `nvdisasm` on PATH, else the
/// CUDA toolkit's, else the one pip's nvidia-cuda-nvdisasm installs for
/// python3 (scripts/setup). "" when there is none.
std::string findNvdisasm();

/// `nvdisasm -c` of a CUBIN. Throws glm::rt::Error naming `what` when
/// nvdisasm is missing or fails.
std::string disassemble(const std::vector<uint8_t> &cubin,
                        const std::string &what);

/// The SASS profile of plan kernel `k` compiled for `arch` ("sm_121").
/// Throws glm::rt::Error naming the kernel when NVRTC or nvdisasm fail.
glm::plan::SassKernel sassProfile(const glm::plan::KernelDef &k,
                                  const std::string &arch);

} // namespace glm::codegen
