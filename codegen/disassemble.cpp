//===- disassemble.cpp - SASS of a plan kernel, through nvdisasm ----------===//
#include "codegen/disassemble.h"

#include "codegen/codegen.h"
#include "runtime/base/error.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace glm::codegen {

namespace fs = std::filesystem;

namespace {

std::string runCapture(const std::string &cmd, int *status) {
  std::string out;
  *status = -1;
  if (FILE *p = ::popen(cmd.c_str(), "r")) {
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
      out.append(buf, n);
    *status = ::pclose(p);
  }
  return out;
}

bool executable(const fs::path &p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::string quote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

} // namespace

std::string findNvdisasm() {
  static const std::string found = [] {
    if (const char *e = std::getenv("GLMC_NVDISASM"); e && *e)
      return std::string(e);
    if (const char *path = std::getenv("PATH")) {
      std::istringstream is(path);
      std::string dir;
      while (std::getline(is, dir, ':'))
        if (!dir.empty() && executable(fs::path(dir) / "nvdisasm"))
          return (fs::path(dir) / "nvdisasm").string();
    }
    for (const char *d : {"/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin"})
      if (executable(fs::path(d) / "nvdisasm"))
        return (fs::path(d) / "nvdisasm").string();
    // pip install nvidia-cuda-nvdisasm: nvidia/cu13/bin/nvdisasm.
    int st = 0;
    std::string dir = runCapture(
        "python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' "
        "2>/dev/null",
        &st);
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r'))
      dir.pop_back();
    if (st == 0 && !dir.empty())
      for (const char *sub : {"cu13/bin/nvdisasm", "cuda_nvdisasm/bin/nvdisasm"})
        if (executable(fs::path(dir) / sub))
          return (fs::path(dir) / sub).string();
    return std::string();
  }();
  return found;
}

std::string disassemble(const std::vector<uint8_t> &cubin,
                        const std::string &what) {
  const std::string tool = findNvdisasm();
  rt::check(!tool.empty(), what,
            ": nvdisasm not found (the SASS model needs it): run "
            "scripts/setup, `pip install nvidia-cuda-nvdisasm`, or set "
            "GLMC_NVDISASM to the toolkit's nvdisasm");
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  rt::check(!ec, what, ": no temporary directory for nvdisasm");
  static int serial = 0;
  fs::path in = dir / ("glmc-sass-" + std::to_string(::getpid()) + "-" +
                       std::to_string(serial++) + ".cubin");
  {
    std::ofstream f(in, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(cubin.data()),
            std::streamsize(cubin.size()));
    rt::check(bool(f), what, ": cannot write ", in.string());
  }
  int st = 0;
  std::string text =
      runCapture(quote(tool) + " -c " + quote(in.string()) + " 2>&1", &st);
  fs::remove(in, ec);
  rt::check(st == 0, what, ": ", tool, " failed (status ", st, "): ",
            text.substr(0, 400));
  return text;
}

glm::plan::SassKernel sassProfile(const glm::plan::KernelDef &k,
                                  const std::string &arch) {
  rt::check(nvrtcAvailable(), k.name,
            ": this glmc was built without NVRTC, so it cannot compile the "
            "kernel for ", arch, " to count its SASS");
  CompiledKernel c = compileCached(k.source, k.name, arch, /*cubin=*/true);
  rt::check(!c.cubin.empty(), k.name, ": NVRTC gave no CUBIN for ", arch);
  auto fns = glm::plan::parseSass(disassemble(c.cubin, k.name), k.name);
  auto it = fns.find(k.name);
  rt::check(it != fns.end(), k.name, ": the ", arch,
            " CUBIN has no function of that name");
  return it->second;
}

} // namespace glm::codegen
