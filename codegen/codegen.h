//===- codegen.h - kernel specs to CUDA C++ source, and NVRTC -------------===//
//
// The lowering of kernel-level ops to CUDA: a KernelSpec (template family,
// template arguments, target archs) becomes a tiny deterministic instantiation
// unit that includes the family's template (codegen/templates/*.cuh, embedded
// in the binary and handed to NVRTC as headers) and declares one extern "C"
// __global__ entry whose name encodes the arguments:
//   glm_expert_gemv_trellis_k3_mcg_e4m3_b1_t256
// The source does not depend on the arch: one KernelDef carries binaries for
// every target arch. compileWithNvrtc turns it into PTX and CUBIN (no GPU
// needed). No MLIR here; the emit-kernels pass calls buildKernel().
//
// Thread-safety: all functions are reentrant (NVRTC programs are per call).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plans/plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace glm::codegen {

using KeyValues = glm::plan::KeyValues;

/// What the compiler asks for. `args` keys are the family's template
/// parameter names (see FamilyInfo); values are decimal or symbolic strings.
struct KernelSpec {
  std::string family;             // "expert_gemv_trellis", "rms_norm", ...
  KeyValues args;                 // {"K":"3","codebook":"mcg",...}
  std::vector<std::string> archs; // "sm_90", "sm_121"
};

/// One compile-time parameter of a family.
struct TemplateParam {
  std::string name;                 // key in KernelSpec::args
  std::string tag;                  // prefix in the kernel name ("k", "b")
  std::vector<std::string> allowed; // accepted values, in name form
  /// Symbolic values -> the C++ template argument (e.g. "mcg" -> "1");
  /// empty = the value is used as is.
  std::map<std::string, std::string> cxx;
  /// "0"/"1" flag: the name piece is `tag` or "no" + tag.
  bool boolean = false;
  /// A set of widths written as ascending digits 1..8 ("234"); the C++
  /// argument is the bit mask (bit K set), the name piece tag + digits.
  bool digitSet = false;
  /// Value taken when a spec leaves the parameter out (empty = required);
  /// the kernel name shows the parameter only when it differs from it.
  std::string defaultValue;
};

/// One kernel family = one template header.
struct FamilyInfo {
  std::string family;      // "expert_gemv_trellis"
  std::string header;      // "expert_gemv_trellis.cuh"
  std::string function;    // device template: "glm::expertGemvTrellis"
  std::string paramsMacro; // macro with the kernel's parameter list
  std::string argsMacro;   // macro forwarding those parameters
  std::vector<TemplateParam> params; // template parameters, in order
  /// Runtime kernel parameters in order: the ABI the plan's ArgDefs follow
  /// (kRuntimeAbi). Pointers first by convention, then ints.
  std::vector<std::string> kernelParams;
  std::string threadsParam; // template param that is the block size
  /// Template param giving __launch_bounds__'s minimum resident blocks per
  /// SM (a register cap); "" = none, value "0" = none.
  std::string minBlocksParam;
  /// NVRTC options this family needs beyond nvrtcOptions(), e.g.
  /// "--fmad=false" for the helper families whose CPU twins round every
  /// product and sum separately (no contracted multiply-add).
  std::vector<std::string> nvrtcExtra;
};

/// Every family, in a fixed order.
const std::vector<FamilyInfo> &families();
/// Throws glm::rt::Error listing the known families.
const FamilyInfo &familyInfo(const std::string &family);

/// Checks the spec against its family (every parameter present, allowed
/// values, no unknown keys, archs known); throws Error saying which.
void validateSpec(const KernelSpec &spec);
/// The extern "C" entry name: glm_<family>_<tag><value>_..., validated.
std::string kernelName(const KernelSpec &spec);
/// The instantiation unit (deterministic: same spec, same bytes).
std::string generateSource(const KernelSpec &spec);

/// The body of `#define MACRO ...` in `text`, continuation lines joined
/// ("" when `text` does not define it). Reads the templates' parameter lists.
std::string macroBody(const std::string &text, const std::string &macro);

/// Template headers embedded at build time: file name -> text.
const std::map<std::string, std::string> &embeddedTemplates();

/// NVRTC options used for every kernel (arch and include path excluded).
std::vector<std::string> nvrtcOptions();
/// The options of the unit `source`: nvrtcOptions() plus the nvrtcExtra of
/// the family whose template it includes (generateSource's units include
/// exactly one family header; other sources get nvrtcOptions()). What
/// buildKernel records, compileWithNvrtc passes and cache keys hash.
std::vector<std::string> nvrtcOptionsFor(const std::string &source);
/// Hash of (source, options, arch, NVRTC version), 16 hex digits.
std::string cacheKey(const std::string &source,
                     const std::vector<std::string> &options,
                     const std::string &arch, const std::string &nvrtcVer);

/// True when this build links NVRTC.
bool nvrtcAvailable();
/// "13.0", or "none" without NVRTC.
std::string nvrtcVersion();

struct CompiledKernel {
  std::string arch;
  std::string ptx;
  std::vector<uint8_t> cubin;
  std::string log; // NVRTC log (warnings)
};

struct CompileOptions {
  /// Where a failing source is saved ("" = $GLM_REPRO_DIR or the temp dir).
  std::string reproducerDir;
  /// CUDA include dir for cuda_fp16.h etc. ("" = found at build time).
  std::string cudaInclude;
  /// Also produce CUBIN (ptxas for the real arch). false: PTX for the
  /// virtual arch only (compute_NN), which the runtime JITs at load.
  bool cubin = true;
};

/// Compiles `source` for `arch` ("sm_90", "sm_121"); `name` names the kernel
/// in errors and the reproducer file. On failure throws Error with the NVRTC
/// log, the options and the path of the saved reproducer source.
/// Without NVRTC in the build: throws Error saying so.
CompiledKernel compileWithNvrtc(const std::string &source,
                                const std::string &name,
                                const std::string &arch,
                                const CompileOptions &opt = {});

/// The kernel cache glmc and glm-engine share: $GLMC_KERNEL_CACHE ("off":
/// none), else $XDG_CACHE_HOME/glmc/kernels, else $HOME/.cache/glmc/kernels;
/// created on first use; "" when none is usable.
std::string kernelCacheDir();

/// compileWithNvrtc through the kernel cache: entries are keyed by cacheKey
/// (source, nvrtcOptionsFor(source), arch or arch+"ptx" for PTX-only, NVRTC
/// version), so a hit is the bytes NVRTC would produce. `hit` (optional)
/// says whether NVRTC was skipped.
CompiledKernel compileCached(const std::string &source,
                             const std::string &name, const std::string &arch,
                             bool cubin = true, bool *hit = nullptr);

/// Whether plan kernel `k` was built from the templates, NVRTC options and
/// NVRTC version of this binary (its recorded cache key, over the archs of
/// its binaries, is the one this codegen computes): a runtime reuses a
/// plan's PTX/CUBIN only then, since a kernel's source names its template
/// but does not contain it.
bool builtByThisCodegen(const glm::plan::KernelDef &k);

/// Spec -> plan kernel: name, template args, source, hashes, options and,
/// when `compile` (and NVRTC is present), PTX/CUBIN for every spec arch.
/// launch.blockX is set from the threads parameter; the grid is per op.
glm::plan::KernelDef buildKernel(const KernelSpec &spec, bool compile = true,
                                 const CompileOptions &opt = {});

} // namespace glm::codegen
