//===- sass_profile.h - SASS instruction counts per pipe, from nvdisasm ---===//
//
// The static shape of a compiled kernel that the performance model needs:
// how many instructions of each execution pipe it has, and which of its
// loops streams the data (the longest innermost loop with global loads),
// so the model can scale that loop by the bytes a
// launch reads. Parses the text `nvdisasm` prints for a CUBIN; pure
// functions (running nvdisasm is codegen/disassemble.h's job).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace glm::plan {

/// Execution pipes by the classes of the CUDA Best Practices Guide's
/// arithmetic-instruction throughput table (§12.1.1), plus memory, tensor,
/// control and the uniform datapath (neither table-rated nor free: they
/// count toward issue).
enum class Pipe : uint8_t {
  Fp32,    // FFMA, FADD, FMUL
  Half2,   // HFMA2, HADD2, HMUL2 (packed half / bf16)
  Imad,    // IMAD*, IMUL
  Logic,   // the ALU: LOP3, shifts, PRMT, SEL, compares, LEA, MOV, F2FP, ...
  IntAdd,  // IADD3, integer min/max
  Cvt16,   // f16 -> f32 conversion (HADD2.F32, F2F.F32.F16)
  F2fp,    // other conversions (F2F narrowing, I2F, I2I, FRND)
  F2i,     // float -> int (F2I)
  Shuffle, // SHFL
  Mufu,    // MUFU (exp2, rsqrt, rcp, ...)
  Memory,  // global / shared / local loads and stores, atomics
  Tensor,  // HMMA, IMMA, QMMA, HGMMA
  Control, // branches, barriers, EXIT, S2R, constant loads
  Uniform, // U* instructions of the uniform datapath
  Count
};
constexpr size_t kPipes = size_t(Pipe::Count);
const char *pipeName(Pipe p);

/// The pipe an opcode ("IMAD.WIDE.U32", "LDG.E.128.CONSTANT") issues to.
Pipe pipeOf(std::string_view opcode);

using PipeCounts = std::array<double, kPipes>;
double total(const PipeCounts &c);

/// An innermost loop that loads from global memory: one streams a launch's
/// data. Its bytes per thread per iteration are its global loads', except
/// in a loop that stages through cp.async (LDGSTS): those bytes only, as
/// its plain loads are then operands (activations) beside the stream.
struct StreamLoop {
  PipeCounts hot{};        // its instructions once
  uint32_t loadBytes = 0;  // streamed bytes per thread per iteration
  uint32_t begin = 0;      // its first instruction (code order)
  uint32_t length = 0;     // instructions from its first to its back edge
  bool tensor = false;     // it has tensor-core instructions
};

/// One kernel function of a CUBIN.
struct SassKernel {
  std::string name;
  PipeCounts all{};       // every instruction once (padding NOPs excluded)
  /// The streaming loop: the longest of `streams` with tensor instructions,
  /// else the longest (none: loopLoadBytes = 0, hot all zero).
  PipeCounts hot{};
  uint32_t loopLoadBytes = 0; // its loadBytes
  uint32_t loops = 0;         // back edges (loops) of the function
  /// Every streaming loop in code order. A kernel compiled with one path
  /// per trellis width (moe_trellis "k234") has one per width, ascending.
  std::vector<StreamLoop> streams;
};

/// The kernels of one `nvdisasm` listing, by function name. Throws
/// glm::rt::Error naming `source` when the text holds no function.
std::map<std::string, SassKernel> parseSass(const std::string &text,
                                            const std::string &source);

} // namespace glm::plan
