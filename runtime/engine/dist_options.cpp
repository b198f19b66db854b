//===- dist_options.cpp - run as one rank of several processes ------------===//
#include "runtime/engine/dist_options.h"

#include "runtime/base/error.h"
#include "runtime/base/cli_numbers.h"
#include "runtime/base/files.h"
#include "runtime/base/hash.h"
#include "runtime/base/numbers.h"
#include "runtime/dist/nccl_comm.h"
#include "runtime/dist/tcp_comm.h"
#include "runtime/engine/setup.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <unistd.h>

namespace glm::rt {

// TcpHostComm::join's limit; a week of seconds (the heartbeat code turns
// seconds into int64 nanoseconds); CUDA device ordinals.
constexpr int64_t kMaxWorld = 1024;
constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;
constexpr int64_t kMaxDevice = 1023;

void addDistOptions(CLI::App &sub, DistOptions &o) {
  const char *group = "Ranks (one process per rank; see `glm-engine launch`)";
  sub.add_option("--rank", o.rank,
                 "This process's rank in 0..WORLD-1 (rank 0 listens on "
                 "--coordinator and prints the output)")
      ->check(cliInt(0, kMaxWorld - 1))
      ->group(group);
  sub.add_option("--world", o.world,
                 "Number of rank processes (the plan's Spark count); with "
                 "more than 1 the ranks join over --coordinator")
      ->check(cliInt(1, kMaxWorld))
      ->group(group);
  sub.add_option("--coordinator", o.coordinator,
                 "HOST:PORT where rank 0 listens and the others connect "
                 "(e.g. 10.0.0.1:29400; needed with --world > 1). Rank 0 "
                 "takes HOST:0 as a free port and prints it")
      ->group(group);
  sub.add_option("--rank-timeout", o.rankTimeout,
                 "Seconds without a sign of life after which a peer rank "
                 "counts as dead: every rank then exits with an error naming "
                 "it (a rank that exits is noticed at once)")
      ->check(cliNumber(0, kMaxTimeoutSeconds, /*loOpen=*/true))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--join-timeout", o.joinTimeout,
                 "Seconds the ranks wait for each other at startup")
      ->check(cliNumber(0, kMaxTimeoutSeconds, /*loOpen=*/true))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--device", o.device,
                 "CUDA device ordinal of this rank (--backend cuda; launch "
                 "gives rank r device r)")
      ->check(cliInt(0, kMaxDevice))
      ->group(group);
}

namespace {

/// What every rank must agree on: the plan file's bytes (or, without a
/// plan, the pack's config.json), the manifest and the backend.
void planIdentity(const EngineOptions &e, uint64_t &hash, std::string &label) {
  std::string content;
  if (e.plan != "-") {
    std::string bytes = readFileBounded(e.plan, kMaxPlanBytes, "a plan");
    content = "plan " + hex64(xxh64(bytes.data(), bytes.size()));
    label = "plan " + e.plan + " (xxh64 " + content.substr(5) + ")";
  } else {
    auto cfg = std::filesystem::path(e.pack) / "config.json";
    std::string h = "none";
    if (std::filesystem::exists(cfg)) {
      std::string bytes =
          readFileBounded(cfg.string(), kMaxConfigBytes, "the model config");
      h = hex64(xxh64(bytes.data(), bytes.size()));
    }
    content = "pack " + h;
    label = "pack " + e.pack + " without a plan (config.json xxh64 " + h +
            ", --sparks " + std::to_string(e.sparks) + ")";
  }
  const std::string backend = effectiveBackend(e.backend, e.plan);
  content += "|" + std::to_string(e.sparks) + "|" + e.manifest + "|" +
             backend;
  label += ", --backend " + backend;
  if (!e.manifest.empty())
    label += ", --manifest " + e.manifest;
  hash = xxh64(content.data(), content.size());
}

} // namespace

int runAsRank(const DistOptions &d, EngineOptions &engine,
              const std::function<int()> &body) {
  if (d.world <= 1) {
    check(d.rank == 0, "--rank ", d.rank, " needs --world N > ", d.rank);
    if (d.device >= 0)
      engine.device = d.device;
    return body();
  }
  check(d.rank < d.world, "--rank ", d.rank, " is not in 0..", d.world - 1,
        " (--world ", d.world, ")");
  check(!d.coordinator.empty(), "--world ", d.world,
        " needs --coordinator HOST:PORT (where rank 0 listens; "
        "`glm-engine launch` picks one on this host)");
  // Without a plan the rank count is --sparks; with one it is the plan's
  // (checked by loadEngine against the comm's size).
  if (engine.plan == "-") {
    check(engine.sparks == 0 || engine.sparks == d.world, "--sparks ",
          engine.sparks, " and --world ", d.world,
          " differ: one process runs each of the --sparks ranks");
    engine.sparks = d.world;
  }
  dist::TcpConfig tc;
  tc.rank = d.rank;
  tc.world = d.world;
  tc.coordinator = d.coordinator;
  tc.timeout = d.rankTimeout;
  tc.joinTimeout = d.joinTimeout;
  if (const char *fd = std::getenv(dist::kCoordinatorFdEnv); fd && d.rank == 0)
    tc.listenFd = int(parseIntIn(fd, 0, 1 << 20, dist::kCoordinatorFdEnv));
  planIdentity(engine, tc.planHash, tc.planLabel);
  std::unique_ptr<dist::TcpHostComm> comm = dist::TcpHostComm::join(tc);
  engine.hostComm = comm.get();
  engine.device = d.device >= 0 ? d.device : d.rank;
  std::unique_ptr<dist::DeviceComm> nccl; // outlives the engine in body()
  int rc = 0;
  try {
    if (effectiveBackend(engine.backend, engine.plan) == "cuda") {
      nccl = dist::makeNcclDeviceComm(*comm, engine.device, d.joinTimeout);
      engine.deviceComm = nccl.get();
    }
    rc = body();
  } catch (const std::exception &e) {
    // A failure of ours (not a relayed one) goes to the peers first.
    if (comm->healthError().empty())
      comm->abort("rank " + std::to_string(d.rank) + " (pid " +
                  std::to_string(getpid()) + ") failed: " + e.what() +
                  "; exiting");
    engine.hostComm = nullptr;
    engine.deviceComm = nullptr;
    // The process exits with this error: a communicator whose abort may
    // still be draining is left to the exit rather than waited for.
    (void)nccl.release();
    throw;
  }
  nccl.reset();
  comm->finish();
  engine.hostComm = nullptr;
  engine.deviceComm = nullptr;
  return rc;
}

} // namespace glm::rt
