//===- nvrtc.cpp - CUDA C++ to PTX/CUBIN with NVRTC (no GPU needed) -------===//
//
// The embedded templates are passed as NVRTC headers, so a plan's kernels
// compile from the binary alone. A failure saves the source to a reproducer
// file and reports the log and options, so anyone can rerun it with nvcc.
//
//===----------------------------------------------------------------------===//
#include "codegen/codegen.h"
#include "runtime/base/error.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#ifdef GLM_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace glm::codegen {

namespace fs = std::filesystem;

#ifdef GLM_HAVE_NVRTC

bool nvrtcAvailable() { return true; }

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

static std::string saveReproducer(const std::string &source,
                                  const std::string &name,
                                  const std::string &arch,
                                  const CompileOptions &opt) {
  std::string dir = opt.reproducerDir;
  if (dir.empty()) {
    const char *env = std::getenv("GLM_REPRO_DIR");
    std::error_code ec;
    dir = env && *env ? env : fs::temp_directory_path(ec).string();
    if (dir.empty())
      dir = ".";
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Templates go next to the unit so `nvcc -I DIR` reproduces the build.
  for (const auto &[file, text] : embeddedTemplates()) {
    std::ofstream t(fs::path(dir) / file, std::ios::trunc);
    t << text;
  }
  fs::path path = fs::path(dir) / (name + "." + arch + ".cu");
  std::ofstream f(path, std::ios::trunc);
  f << source;
  return f ? path.string() : std::string("(could not write ") +
                                 path.string() + ")";
}

CompiledKernel compileWithNvrtc(const std::string &source,
                                const std::string &name,
                                const std::string &arch,
                                const CompileOptions &opt) {
  const auto &templates = embeddedTemplates();
  std::vector<const char *> hdrSrc, hdrName;
  for (const auto &[file, text] : templates) {
    hdrName.push_back(file.c_str());
    hdrSrc.push_back(text.c_str());
  }
  std::vector<std::string> options = nvrtcOptionsFor(source);
  // PTX only: the virtual arch (compute_NN), so NVRTC skips ptxas, about
  // half its time on the big templates; the runtime JITs the PTX.
  options.push_back("--gpu-architecture=" +
                    (opt.cubin || arch.rfind("sm_", 0) != 0
                         ? arch
                         : "compute_" + arch.substr(3)));
  const std::string inc =
      opt.cudaInclude.empty() ? std::string(GLM_CUDA_INCLUDE_DIR)
                              : opt.cudaInclude;
  options.push_back("-I" + inc);
  // CUDA 13 keeps <nv/target> and friends under include/cccl.
  if (fs::exists(fs::path(inc) / "cccl"))
    options.push_back("-I" + (fs::path(inc) / "cccl").string());
  std::vector<const char *> optPtr;
  for (const std::string &o : options)
    optPtr.push_back(o.c_str());
  auto optText = [&] {
    std::string s;
    for (const std::string &o : options)
      s += " " + o;
    return s;
  };

  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(
      &prog, source.c_str(), (name + ".cu").c_str(), int(hdrSrc.size()),
      hdrSrc.data(), hdrName.data());
  rt::check(rc == NVRTC_SUCCESS, "codegen: nvrtcCreateProgram for ", name,
            " failed: ", nvrtcGetErrorString(rc));
  struct Guard {
    nvrtcProgram *p;
    ~Guard() { nvrtcDestroyProgram(p); }
  } guard{&prog};

  rc = nvrtcCompileProgram(prog, int(optPtr.size()), optPtr.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize)
    nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  if (rc != NVRTC_SUCCESS) {
    std::string repro = saveReproducer(source, name, arch, opt);
    rt::fail("codegen: NVRTC ", nvrtcVersion(), " could not compile kernel ",
             name, " for ", arch, " (", nvrtcGetErrorString(rc),
             ")\noptions:", optText(), "\nreproducer: ", repro,
             " (headers beside it)\nlog:\n", log);
  }

  CompiledKernel out;
  out.arch = arch;
  out.log = log;
  size_t ptxSize = 0;
  rt::check(nvrtcGetPTXSize(prog, &ptxSize) == NVRTC_SUCCESS,
            "codegen: nvrtcGetPTXSize failed for ", name);
  std::string ptx(ptxSize, '\0');
  rt::check(nvrtcGetPTX(prog, ptx.data()) == NVRTC_SUCCESS,
            "codegen: nvrtcGetPTX failed for ", name);
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  out.ptx = std::move(ptx);
  if (opt.cubin) {
    size_t cubinSize = 0;
    rt::check(nvrtcGetCUBINSize(prog, &cubinSize) == NVRTC_SUCCESS,
              "codegen: nvrtcGetCUBINSize failed for ", name, " (", arch,
              " must be a real arch like sm_90)");
    out.cubin.resize(cubinSize);
    rt::check(nvrtcGetCUBIN(prog, reinterpret_cast<char *>(out.cubin.data())) ==
                  NVRTC_SUCCESS,
              "codegen: nvrtcGetCUBIN failed for ", name);
  }
  return out;
}

#else // !GLM_HAVE_NVRTC

bool nvrtcAvailable() { return false; }
std::string nvrtcVersion() { return "none"; }

CompiledKernel compileWithNvrtc(const std::string &, const std::string &name,
                                const std::string &arch,
                                const CompileOptions &) {
  rt::fail("codegen: cannot compile kernel ", name, " for ", arch,
           ": this build has no NVRTC (install the CUDA toolkit and "
           "reconfigure, or compile the plan with kernels left to the "
           "runtime's JIT)");
}

#endif

} // namespace glm::codegen
