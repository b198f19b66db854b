//===- dist_options.h - run as one rank of several processes --------------===//
//
// `glm-engine run ... --rank R --world N --coordinator HOST:PORT` makes the
// process rank R of N: it joins the others over the TCP control plane
// (runtime/dist/tcp_comm.h) before loading weights, computes only its own
// units and exchanges the rest (cpu backend: HostComm; cuda backend: NCCL
// through the same plane). `glm-engine launch` starts the N processes of one
// host this way; across hosts each host runs its ranks by hand.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace glm::rt {
struct EngineOptions;

struct DistOptions {
  int rank = 0;
  int world = 0;           // 0/1: a single process
  std::string coordinator; // HOST:PORT of rank 0
  double rankTimeout = 30; // seconds without a sign of life = dead
  double joinTimeout = 300;
  int device = -1;         // cuda device of this rank (-1: the default)
};

/// Adds --rank, --world, --coordinator, --rank-timeout, --join-timeout and
/// --device to `sub`.
void addDistOptions(CLI::App &sub, DistOptions &o);

/// Runs `body` (which loads the engine from `engine` and generates). With
/// --world > 1 it first joins the ranks (the plan hash covers the plan or
/// pack, --manifest and --backend) and hands the control plane to the
/// executor through engine.hostComm (--backend cuda: also an NCCL
/// communicator on engine.device through engine.deviceComm, made before
/// `body` and destroyed after it); when `body` throws, the other ranks are
/// told this rank's error (they exit naming it) and the error is rethrown;
/// on success the rank leaves cleanly.
int runAsRank(const DistOptions &d, EngineOptions &engine,
              const std::function<int()> &body);

} // namespace glm::rt
