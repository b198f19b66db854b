//===- commands.h - glmc subcommands, one registration function each ------===//
//
// Each subcommand lives in its own file and adds itself to the CLI11 app; the
// callback runs the command and returns the process exit code through `rc`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace glmc {

void addSynthCommand(CLI::App &app, int &rc);
void addQuantizeCommand(CLI::App &app, int &rc);
void addVerifyCommand(CLI::App &app, int &rc);
void addDequantCommand(CLI::App &app, int &rc);
void addInspectCommand(CLI::App &app, int &rc); // needs no MLIR
#ifdef GLM_WITH_MLIR
/// `argv`: the command line as typed, which the plan records.
void addCompileCommand(CLI::App &app, int &rc,
                       const std::vector<std::string> &argv);
#endif

} // namespace glmc
