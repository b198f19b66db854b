//===- glmc.cpp - the glmc driver -----------------------------------------===//
//
// glmc compiles a GLM-5.3 pack (config + manifest + index, no weight bytes)
// into a plan for N Sparks, and carries the pack tools: synth, quantize,
// verify, dequant. Errors on bad input print one line and exit 1.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "compiler/driver/commands.h"
#include "runtime/base/error.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  CLI::App app{"glmc: ahead-of-time compiler and pack tools for quantized "
               "GLM-5.3 / GLM-5.3-Flash packs (EXL3, exlr8)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", glm::plan::versionText());
  int rc = 0;
  glmc::addSynthCommand(app, rc);
  glmc::addQuantizeCommand(app, rc);
  glmc::addVerifyCommand(app, rc);
  glmc::addDequantCommand(app, rc);
#ifdef GLM_WITH_MLIR
  glmc::addCompileCommand(app, rc, std::vector<std::string>(argv, argv + argc));
#endif
  glmc::addInspectCommand(app, rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  } catch (const glm::rt::Error &e) {
    std::fprintf(stderr, "glmc: error: %s\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    // Library errors (filesystem, JSON, allocation) end as a message too,
    // never as std::terminate.
    std::fprintf(stderr, "glmc: error: %s\n", e.what());
    return 1;
  }
  return rc;
}
