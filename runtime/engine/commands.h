//===- commands.h - glm-engine subcommands, one registration each ---------===//
//
// Each subcommand adds itself to the CLI11 app; its callback runs the command
// and stores the exit code in `rc`. bench and launch (CUDA backend, issue 5)
// register here the same way when they exist.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace glm::rt {

void addRunCommand(CLI::App &app, int &rc);
/// `serve`: added when runtime/serve provides the server entry point.
void addServeCommand(CLI::App &app, int &rc);
/// `bench`: device benchmarks (runtime/cuda/bench.h; errors without CUDA).
void addBenchCommand(CLI::App &app, int &rc);
/// `launch`: N rank processes of this host (launch_command.cpp).
void addLaunchCommand(CLI::App &app, int &rc);
/// Starts `sparks` rank processes of this binary, each running `rankArgs`
/// (a subcommand and its arguments) with --rank/--world/--coordinator
/// added, as `launch` does; `devices`: the cuda ordinal of each ("" =
/// 0..N-1). Returns launch's exit code.
int launchRanks(int sparks, const std::string &devices,
                std::vector<std::string> rankArgs);

} // namespace glm::rt
