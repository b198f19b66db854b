//===- main.cpp - glm-engine: run, serve (and later bench, launch) --------===//
//
// glm-engine executes a plan compiled by glmc on a pack. Errors on bad input
// print one line and exit 1.
//
//===----------------------------------------------------------------------===//
#include "plans/plan.h"
#include "runtime/base/error.h"
#include "runtime/engine/commands.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char **argv) {
  CLI::App app{"glm-engine: run GLM-5.3 plans compiled by glmc on a pack "
               "(backend cpu: the reference executor)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", "glm-engine: " + glm::plan::versionText());
  int rc = 0;
  glm::rt::addRunCommand(app, rc);
  glm::rt::addServeCommand(app, rc);
  glm::rt::addBenchCommand(app, rc);
  glm::rt::addLaunchCommand(app, rc);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  } catch (const glm::rt::Error &e) {
    std::fprintf(stderr, "glm-engine: error: %s\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "glm-engine: error: %s\n", e.what());
    return 1;
  }
  return rc;
}
