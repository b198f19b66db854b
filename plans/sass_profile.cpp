//===- sass_profile.cpp - SASS instruction counts per pipe ----------------===//
#include "plans/sass_profile.h"

#include "runtime/base/error.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

namespace glm::plan {

const char *pipeName(Pipe p) {
  switch (p) {
  case Pipe::Fp32: return "fp32";
  case Pipe::Half2: return "half2";
  case Pipe::Imad: return "imad";
  case Pipe::Logic: return "logic";
  case Pipe::IntAdd: return "int_add";
  case Pipe::Cvt16: return "cvt_f16_f32";
  case Pipe::F2fp: return "convert";
  case Pipe::F2i: return "cvt_f2i";
  case Pipe::Shuffle: return "shuffle";
  case Pipe::Mufu: return "mufu";
  case Pipe::Memory: return "memory";
  case Pipe::Tensor: return "tensor";
  case Pipe::Control: return "control";
  case Pipe::Uniform: return "uniform";
  case Pipe::Count: break;
  }
  return "?";
}

double total(const PipeCounts &c) {
  double t = 0;
  for (double v : c)
    t += v;
  return t;
}

namespace {

bool startsWith(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool hasPart(std::string_view op, std::string_view part) {
  // "HADD2.F32" has part "F32"; parts are dot-separated.
  size_t pos = 0;
  while (pos <= op.size()) {
    size_t dot = op.find('.', pos);
    std::string_view p = op.substr(pos, dot == op.npos ? op.npos : dot - pos);
    if (p == part)
      return true;
    if (dot == op.npos)
      break;
    pos = dot + 1;
  }
  return false;
}

/// Bytes one thread moves in a global load ("LDG.E.128" 16, ".64" 8,
/// ".U8" 1, ".U16" 2, else 4); 0 for every other opcode.
uint32_t globalLoadBytes(std::string_view op) {
  if (!startsWith(op, "LDG.") && op != "LDG" && !startsWith(op, "LDGSTS"))
    return 0;
  if (hasPart(op, "128"))
    return 16;
  if (hasPart(op, "64"))
    return 8;
  if (hasPart(op, "U8") || hasPart(op, "S8"))
    return 1;
  if (hasPart(op, "U16") || hasPart(op, "S16"))
    return 2;
  return 4;
}

struct Instr {
  std::string opcode;
  std::string target; // branch target label, "" = none
  size_t index = 0;
};

struct Function {
  std::string name;
  std::vector<Instr> code;
  std::map<std::string, size_t> labels; // label → index of the next instr
};

/// "        /*00c0*/   @!P1 BRA `(.L_x_2) ;" → opcode "BRA", target.
bool parseInstr(const std::string &line, Instr &in) {
  size_t c = line.find("*/");
  if (line.find("/*") == std::string::npos || c == std::string::npos)
    return false;
  std::string rest = line.substr(c + 2);
  std::istringstream is(rest);
  std::string tok;
  if (!(is >> tok))
    return false;
  if (tok[0] == '@' && !(is >> tok))
    return false;
  while (!tok.empty() && (tok.back() == ';'))
    tok.pop_back();
  if (tok.empty() || !std::isupper(static_cast<unsigned char>(tok[0])))
    return false;
  in.opcode = tok;
  size_t b = rest.find("`(");
  if (b != std::string::npos) {
    size_t e = rest.find(')', b);
    if (e != std::string::npos)
      in.target = rest.substr(b + 2, e - b - 2);
  }
  return true;
}

SassKernel profile(const Function &f) {
  SassKernel k;
  k.name = f.name;
  // Padding after the final trap loop: "BRA self" then NOPs.
  for (const Instr &in : f.code)
    if (in.opcode != "NOP")
      k.all[size_t(pipeOf(in.opcode))] += 1;
  // Loops: back edges (a branch to a label at or before it, not to itself).
  struct Loop {
    size_t begin, end;
  };
  std::vector<Loop> loops;
  for (const Instr &in : f.code) {
    if (in.target.empty())
      continue;
    auto it = f.labels.find(in.target);
    if (it == f.labels.end() || it->second >= in.index)
      continue;
    loops.push_back({it->second, in.index});
  }
  k.loops = uint32_t(loops.size());
  // The streaming loops: the innermost loops that load from global memory.
  // The kernel's streaming loop is the longest of those with tensor-core
  // instructions (the weights' decode + MMA loop of the trellis kernels,
  // longer epilogue loops beside it load little), else the longest (a
  // kernel that prefetches weights into shared memory in a short copy loop
  // does its work in the long one, whose own loads pace it too).
  for (const Loop &l : loops) {
    bool inner = std::none_of(loops.begin(), loops.end(), [&](const Loop &o) {
      return &o != &l && o.begin >= l.begin && o.end <= l.end &&
             (o.begin != l.begin || o.end != l.end);
    });
    if (!inner)
      continue;
    StreamLoop s;
    s.begin = uint32_t(l.begin);
    s.length = uint32_t(l.end - l.begin + 1);
    uint32_t loads = 0, staged = 0;
    for (size_t i = l.begin; i <= l.end; ++i) {
      const std::string &op = f.code[i].opcode;
      loads += globalLoadBytes(op);
      if (startsWith(op, "LDGSTS"))
        staged += globalLoadBytes(op);
      if (op != "NOP")
        s.hot[size_t(pipeOf(op))] += 1;
    }
    if (loads == 0)
      continue;
    s.loadBytes = staged ? staged : loads;
    s.tensor = s.hot[size_t(Pipe::Tensor)] > 0;
    k.streams.push_back(s);
  }
  const StreamLoop *hot = nullptr;
  for (const StreamLoop &s : k.streams)
    if (!hot || std::make_pair(s.tensor, s.length) >
                    std::make_pair(hot->tensor, hot->length))
      hot = &s;
  if (hot) {
    k.hot = hot->hot;
    k.loopLoadBytes = hot->loadBytes;
  }
  std::sort(k.streams.begin(), k.streams.end(),
            [](const StreamLoop &a, const StreamLoop &b) {
              return a.begin < b.begin;
            });
  return k;
}

} // namespace

Pipe pipeOf(std::string_view op) {
  const std::string_view base = op.substr(0, op.find('.'));
  if (!base.empty() && base[0] == 'U' && base != "UNKNOWN")
    return Pipe::Uniform; // UIADD3, ULDC, UMOV, ... (the uniform datapath)
  if (base == "R2UR" || base == "S2UR" || base == "REDUX" || base == "LDCU" ||
      base == "VOTEU")
    return Pipe::Uniform;
  if (base == "FFMA" || base == "FADD" || base == "FMUL" ||
      base == "FFMA32I" || base == "FADD32I" || base == "FMUL32I" ||
      base == "FSWZADD")
    return Pipe::Fp32;
  if (base == "HADD2" || base == "HFMA2" || base == "HMUL2" ||
      base == "HMNMX2" || base == "HSETP2" || base == "HSET2" ||
      base == "HFMA2_32I") {
    // HADD2.F32 widens half to float; HFMA2.MMA is a register move the
    // compiler places on the FMA pipe.
    if (base == "HADD2" && hasPart(op, "F32"))
      return Pipe::Cvt16;
    return Pipe::Half2;
  }
  if (base == "IMAD" || base == "IMUL" || base == "IMAD32I" ||
      base == "IMUL32I" || base == "IDP" || base == "IDP4A")
    return Pipe::Imad;
  if (base == "IADD3" || base == "IADD" || base == "IADD32I" ||
      base == "IMNMX" || base == "VIMNMX" || base == "VIADD" ||
      base == "VIADDMNMX" || base == "IABS")
    return Pipe::IntAdd;
  if (base == "F2F") {
    const bool widen = op.find(".F32.F16") != op.npos ||
                       op.find(".F32.BF16") != op.npos;
    return widen ? Pipe::Cvt16 : Pipe::F2fp;
  }
  // F2FP (f32 -> f16 / bf16 packing, the E4M3 round trip) issues to the
  // ALU at its rate on the H200: ncu's ALU share of the dense_trellis
  // launches is the logic instructions plus F2FP (docs/perf.md "Session
  // 27"). The other conversions keep the 16-a-clock rate of the Best
  // Practices Guide's table.
  if (base == "F2FP")
    return Pipe::Logic;
  if (base == "I2F" || base == "I2I" || base == "FRND")
    return Pipe::F2fp;
  if (base == "F2I")
    return Pipe::F2i;
  if (base == "SHFL")
    return Pipe::Shuffle;
  if (base == "MUFU")
    return Pipe::Mufu;
  if (base == "LDG" || base == "STG" || base == "LDS" || base == "STS" ||
      base == "LDSM" || base == "STSM" || base == "LDGSTS" || base == "LD" ||
      base == "ST" || base == "LDL" || base == "STL" || base == "ATOM" ||
      base == "ATOMS" || base == "ATOMG" || base == "RED" ||
      base == "LDGDEPBAR" || base == "MEMBAR" || base == "CCTL" ||
      base == "SYNCS" || base == "MATCH")
    return Pipe::Memory;
  if (base == "HMMA" || base == "IMMA" || base == "QMMA" || base == "HGMMA" ||
      base == "IGMMA" || base == "QGMMA" || base == "BMMA" || base == "DMMA" ||
      base == "OMMA")
    return Pipe::Tensor;
  if (base == "BRA" || base == "BRX" || base == "JMP" || base == "CALL" ||
      base == "RET" || base == "EXIT" || base == "BAR" || base == "BSSY" ||
      base == "BSYNC" || base == "WARPSYNC" || base == "BPT" ||
      base == "BREAK" || base == "BMOV" || base == "YIELD" ||
      base == "DEPBAR" || base == "NOP" || base == "S2R" || base == "CS2R" ||
      base == "LDC" || base == "ACQBULK" || base == "ELECT" ||
      base == "ERRBAR" || base == "NANOSLEEP" || base == "KILL" ||
      base == "WARPGROUP" || base == "ENDCOLLECTIVE" || base == "PREEXIT")
    return Pipe::Control;
  // LOP3, SHF, PRMT, SEL, ISETP, FSETP, FSEL, FMNMX, LEA, MOV, P2R, R2P,
  // PLOP3, POPC, FLO, BREV, BMSK, I2FP (fast int→float), VOTE, ...
  return Pipe::Logic;
}

std::map<std::string, SassKernel> parseSass(const std::string &text,
                                            const std::string &source) {
  std::map<std::string, SassKernel> out;
  std::vector<Function> fns;
  std::istringstream is(text);
  std::string line;
  const std::string header = "//--------------------- .text.";
  while (std::getline(is, line)) {
    if (line.rfind(header, 0) == 0) {
      std::string name = line.substr(header.size());
      name = name.substr(0, name.find_first_of(" \t-"));
      fns.push_back({name, {}, {}});
      continue;
    }
    if (line.rfind("//---", 0) == 0) {
      fns.push_back({"", {}, {}}); // a non-code section ends the function
      continue;
    }
    if (fns.empty() || fns.back().name.empty())
      continue;
    Function &f = fns.back();
    // A label line: ".L_x_2:" (the function's own "name:" labels too).
    std::string t = line;
    t.erase(0, t.find_first_not_of(" \t"));
    if (!t.empty() && t.back() == ':' && t.find(' ') == std::string::npos) {
      f.labels[t.substr(0, t.size() - 1)] = f.code.size();
      continue;
    }
    Instr in;
    if (parseInstr(line, in)) {
      in.index = f.code.size();
      f.code.push_back(std::move(in));
    }
  }
  for (const Function &f : fns)
    if (!f.name.empty() && !f.code.empty())
      out[f.name] = profile(f);
  rt::check(!out.empty(), source,
            ": no kernel code in the disassembly (expected nvdisasm output "
            "of a CUBIN)");
  return out;
}

} // namespace glm::plan
