//===- serve_command.cpp - `glm-engine serve`: the OpenAI-compatible API --===//
//
// The server lives in runtime/serve (its own owner); this file only wires the
// loaded engine into it. Until runtime/serve/server.h exists the subcommand
// is not registered.
//
//===----------------------------------------------------------------------===//
#include "runtime/engine/commands.h"

namespace glm::rt {

void addServeCommand(CLI::App &, int &) {}

} // namespace glm::rt
