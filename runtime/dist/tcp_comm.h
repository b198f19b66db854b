//===- tcp_comm.h - the control plane: ranks joined over TCP --------------===//
//
// Rank 0 listens on the coordinator address; every other rank connects to it
// (a star). On joining, each rank states its rank, the world size and a hash
// of what it runs (plan, pack, backend); rank 0 refuses a rank whose world or
// hash differs, and every rank learns the others' pids and hosts. The same
// sockets then carry allGather/barrier (gathered at rank 0, sent back whole)
// and heartbeats from a thread of each rank, so a rank busy computing or
// loading weights still counts as alive.
//
// Failure: a peer whose socket closes without a goodbye (it exited or was
// killed) or that sends nothing for `timeout` seconds (stopped, hung host,
// lost network) makes every rank's next or current call throw Error
// "rank 2 (pid 1234 on host) stopped responding during step 17: ...;
// exiting". Rank 0 relays the first failure to all ranks, so each prints the
// same culprit. A rank that fails on its own calls abort(message) so that the
// others print its message. Nothing waits longer than `timeout` after a
// failure (rank 0 waits up to `joinTimeout` for the others to join).
//
// Thread-safety: one thread calls the collectives; the internal threads
// (reader per socket, heartbeat/watchdog) are owned and joined here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/dist/comm.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace glm::rt::dist {

struct TcpConfig {
  int rank = 0;
  int world = 1;
  std::string coordinator = "127.0.0.1:29400"; // HOST:PORT of rank 0
  uint64_t planHash = 0;    // must agree across ranks
  std::string planLabel;    // names what was hashed, for refusal messages
  double timeout = 30;      // seconds without a sign of life = dead peer
  double joinTimeout = 300; // seconds rank 0 waits for all ranks to join
  /// Rank 0 only: a socket already listening on the coordinator's port
  /// (`glm-engine launch` binds it before starting the ranks and hands it
  /// to rank 0, so no other socket can take the port in between); -1:
  /// rank 0 binds the coordinator address itself.
  int listenFd = -1;
};

/// The environment variable through which launch hands rank 0 its
/// listening socket (a file descriptor number).
inline constexpr const char *kCoordinatorFdEnv = "GLM_COORDINATOR_FD";

/// Splits "HOST:PORT" (HOST may be a name, an IPv4 address or [IPv6]);
/// throws Error naming `what` on a malformed value. Port 0 (rank 0 listens
/// on a port the system picks and prints it) only with allowZero.
void parseHostPort(const std::string &s, std::string &host, int &port,
                   const char *what = "--coordinator", bool allowZero = false);

/// A socket listening on 127.0.0.1:port (0: a free port, which `port` then
/// holds), close-on-exec. The caller owns it.
int listenLoopback(int &port);

class TcpHostComm : public HostComm {
public:
  /// Joins the ranks (blocks until all joined or throws Error).
  static std::unique_ptr<TcpHostComm> join(const TcpConfig &config);
  ~TcpHostComm() override;
  TcpHostComm(const TcpHostComm &) = delete;
  TcpHostComm &operator=(const TcpHostComm &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  void allGather(const void *send, void *recv, size_t bytes) override;
  void barrier() override;
  void checkHealthy() override;
  void setStep(int64_t step) override { step_ = step; }

  /// The failure message, "" while healthy (never throws).
  std::string healthError();
  /// Tells the peers this rank stops because of `message` (a whole
  /// sentence naming this rank); they throw it. Idempotent.
  void abort(const std::string &message);
  /// Clean end: peers will not treat this rank's exit as a failure. Call
  /// after the last collective.
  void finish();
  /// "rank 2 (pid 1234 on host)".
  std::string describe(int rank) const;
  int64_t pid(int rank) const { return peers_[rank].pid; }

private:
  struct Peer {
    int fd = -1;
    int64_t pid = 0;
    std::string host;
    std::atomic<int64_t> lastSeenNs{0}; // steady clock
    std::atomic<int64_t> step{-1};
    std::atomic<bool> left{false};      // said goodbye
    // DATA payloads with their collective number (guarded by mu_).
    std::deque<std::pair<uint32_t, std::vector<char>>> inbox;
    std::timed_mutex writeMu;
    std::thread reader;
  };

  TcpHostComm(const TcpConfig &config);
  void joinAsRoot();
  void joinAsPeer();
  void startThreads();
  void readerLoop(int r);
  void heartbeatLoop();
  /// Records the first failure, tells the peers (rank 0: all of them;
  /// others: rank 0), wakes waiting calls. `culprit` (or -1) is skipped.
  void failWith(const std::string &message, int culprit);
  void sendMsg(int r, uint32_t type, uint32_t aux, const void *data,
               size_t len);
  bool trySendMsg(int r, uint32_t type, uint32_t aux, const void *data,
                  size_t len);
  std::vector<char> waitData(int r, const char *what);
  std::string stepText(int64_t step) const;
  [[noreturn]] void throwError();
  std::vector<int> activePeers() const;

  int rank_, world_;
  bool multiHost_ = false;
  TcpConfig cfg_;
  std::vector<Peer> peers_; // by rank; own entry has fd -1
  std::atomic<int64_t> step_{-1};
  uint32_t seq_ = 0;        // collectives done
  std::mutex mu_;
  std::condition_variable cv_;
  std::string error_;       // guarded by mu_
  std::atomic<bool> failing_{false}, stop_{false}, finished_{false};
  std::thread heartbeat_;
};

} // namespace glm::rt::dist
