//===- dist_test.cpp - the TCP control plane and cpu ranks over it --------===//
//
// Ranks as threads (collectives, refusal, abort relay, the cpu forward split
// over 3 ranks) and as forked processes (a peer that exits, one that is
// stopped, rank 0 dying): every failure is reported within the timeout with
// the culprit's rank and pid.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/cpu/forward.h"
#include "runtime/dist/tcp_comm.h"
#include "cpu_test_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace glm::rt;
using namespace glm::rt::dist;

namespace {

/// Rank 0's socket, listening before any rank starts (as `glm-engine
/// launch` does): a port picked and released could be taken by another
/// test's socket before rank 0 binds it. Rank 0's join closes it.
struct Coordinator {
  int port = 0;
  int fd = listenLoopback(port);
};

TcpConfig config(int rank, int world, const Coordinator &co,
                 double timeout = 10) {
  TcpConfig c;
  c.rank = rank;
  c.world = world;
  c.coordinator = "127.0.0.1:" + std::to_string(co.port);
  if (rank == 0)
    c.listenFd = co.fd;
  c.planHash = 42;
  c.planLabel = "plan A";
  c.timeout = timeout;
  c.joinTimeout = 20;
  return c;
}

/// Runs body(rank) on `world` threads; returns each rank's error ("" = ok).
std::vector<std::string>
onThreads(int world, const std::function<void(int)> &body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (auto &t : ts)
    t.join();
  return errors;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

} // namespace

TEST(Dist, AllGatherAndBarrierAcrossFourRanks) {
  const Coordinator port;
  const int world = 4;
  auto errors = onThreads(world, [&](int r) {
    auto comm = TcpHostComm::join(config(r, world, port));
    EXPECT_EQ(comm->rank(), r);
    EXPECT_EQ(comm->size(), world);
    for (int round = 0; round < 50; ++round) {
      // Sizes vary by round, from empty to larger than a socket buffer.
      const size_t n = round == 3 ? 0 : (size_t)(round * 977) % 300000 + 1;
      std::vector<uint32_t> send(n), recv(n * world);
      for (size_t i = 0; i < n; ++i)
        send[i] = (uint32_t)(r * 1000003 + round * 7 + i);
      comm->allGather(send.data(), recv.data(), n * 4);
      for (int q = 0; q < world; ++q)
        for (size_t i = 0; i < n; i += 97)
          ASSERT_EQ(recv[q * n + i], (uint32_t)(q * 1000003 + round * 7 + i))
              << "round " << round << " from rank " << q;
      comm->barrier();
    }
    comm->checkHealthy();
    comm->finish();
  });
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(Dist, CoordinatorPortIsABoundedInteger) {
  std::string host;
  int port = 0;
  parseHostPort("[::1]:29400", host, port, "--coordinator");
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 29400);
  for (const char *bad : {"h:0", "h:65536", "h:70000", "h: 5", "h:5x",
                          "h:99999999999999999999"}) {
    std::string e;
    try {
      parseHostPort(bad, host, port, "--coordinator");
    } catch (const glm::rt::Error &err) {
      e = err.what();
    }
    EXPECT_NE(e.find(std::string("--coordinator \"") + bad + "\": the port: "),
              std::string::npos)
        << bad << ": " << e;
    EXPECT_NE(e.find("is not an integer in 1..65535"), std::string::npos) << e;
  }
}

/// The Error a join throws, "" when it joins.
static std::string joinError(const TcpConfig &c) {
  try {
    TcpHostComm::join(c);
  } catch (const Error &err) {
    return err.what();
  }
  return "";
}

TEST(Dist, PortZeroIsRankZerosAlone) {
  // A peer cannot connect to "port 0": it is told where the port comes from.
  TcpConfig c = config(1, 2, Coordinator{});
  c.coordinator = "127.0.0.1:0";
  std::string e = joinError(c);
  EXPECT_NE(e.find("rank 1: --coordinator 127.0.0.1:0 has port 0, which "
                   "only rank 0 may take"),
            std::string::npos)
      << e;
  // A handed-over descriptor that is not listening on the port is refused
  // before any rank waits on it.
  const Coordinator other;
  TcpConfig r0 = config(0, 2, Coordinator{});
  r0.listenFd = socket(AF_INET, SOCK_STREAM, 0);
  e = joinError(r0);
  close(r0.listenFd);
  EXPECT_NE(e.find("is not a socket listening on " + r0.coordinator),
            std::string::npos)
      << e;
  r0.listenFd = other.fd; // listening, on another port
  e = joinError(r0);
  close(other.fd);
  EXPECT_NE(e.find("is not a socket listening on"), std::string::npos) << e;
}

TEST(Dist, OneRankNeedsNoTransport) {
  TcpConfig one;
  one.world = 1;
  auto comm = TcpHostComm::join(one);
  int v = 7, out = 0;
  comm->allGather(&v, &out, sizeof v);
  EXPECT_EQ(out, 7);
  comm->barrier();
}

TEST(Dist, RefusesAnotherPlanAndAnotherWorld) {
  const Coordinator port;
  auto errors = onThreads(2, [&](int r) {
    TcpConfig c = config(r, 2, port);
    if (r == 1) {
      c.planHash = 43;
      c.planLabel = "plan B";
    }
    TcpHostComm::join(c);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank 1 (pid"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("runs plan B but rank 0 runs plan A"),
              std::string::npos)
        << errors[r];
  }
  const Coordinator port2;
  errors = onThreads(2, [&](int r) {
    TcpHostComm::join(config(r, r == 0 ? 2 : 3, port2));
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("--world 3 but rank 0 with --world 2"),
              std::string::npos)
        << errors[r];
}

TEST(Dist, JoinTimesOutNamingTheMissingRank) {
  TcpConfig c = config(0, 3, Coordinator{});
  c.joinTimeout = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  try {
    TcpHostComm::join(c);
    FAIL() << "joined without peers";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("missing: rank 1, 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(secondsSince(t0), 3.0);
}

TEST(Dist, AbortIsRelayedToEveryRank) {
  const Coordinator port;
  const int world = 3;
  auto errors = onThreads(world, [&](int r) {
    auto comm = TcpHostComm::join(config(r, world, port));
    int v = r;
    std::vector<int> all(world);
    comm->allGather(&v, all.data(), sizeof v);
    if (r == 2) {
      comm->abort("rank 2 failed: boom; exiting");
      return;
    }
    for (;;) // blocks until the abort arrives
      comm->allGather(&v, all.data(), sizeof v);
  });
  EXPECT_EQ(errors[2], "");
  EXPECT_EQ(errors[0], "rank 2 failed: boom; exiting");
  EXPECT_EQ(errors[1], "rank 2 failed: boom; exiting");
}

TEST(Dist, CpuForwardAcrossThreeRanksIsBitIdenticalToOne) {
  using namespace glm::rt::cpu;
  ModelConfig c = cputest::tinyConfig();
  MapWeightSource src = cputest::tinyWeights(c, 99);
  auto w = ModelWeights::load(c, src);
  // Past index_topk so sparse selection runs too.
  std::vector<int64_t> toks;
  for (int i = 0; i < 12; ++i)
    toks.push_back((i * 17 + 3) % c.vocabSize);
  auto run = [&](CpuForward &fwd) {
    Session s = fwd.newSession();
    std::vector<float> all;
    for (int64_t t : toks) {
      auto lg = fwd.step(s, t);
      all.insert(all.end(), lg.begin(), lg.end());
    }
    return all;
  };
  CpuForward one(w, TpLayout::fromRule(c, 1));
  const std::vector<float> base = run(one);
  const Coordinator port;
  const int world = 3;
  std::vector<std::vector<float>> got(world);
  auto errors = onThreads(world, [&](int r) {
    auto comm = TcpHostComm::join(config(r, world, port));
    CpuForward fwd(w, TpLayout::fromRule(c, world), comm.get());
    got[r] = run(fwd);
    comm->finish();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "");
    ASSERT_EQ(got[r].size(), base.size());
    EXPECT_EQ(0, std::memcmp(got[r].data(), base.data(), 4 * base.size()))
        << "rank " << r << " differs from one process";
  }
}

// Process tests: fork before any comm thread exists in this process; the
// child never returns into gtest.

namespace {

/// Forks a rank running `child` (exit code = its return), returns its pid.
pid_t forkRank(const std::function<int()> &child) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = child();
    } catch (...) {
      rc = 2;
    }
    _exit(rc);
  }
  return pid;
}

/// Rank 0 here: collectives until the comm throws; returns the message.
std::string gatherUntilError(TcpHostComm &comm, double &seconds,
                             std::chrono::steady_clock::time_point t0) {
  try {
    int v = 0;
    std::vector<int> all(comm.size());
    for (;;)
      comm.allGather(&v, all.data(), sizeof v);
  } catch (const Error &e) {
    seconds = secondsSince(t0);
    return e.what();
  }
}

} // namespace

TEST(Dist, PeerThatExitsIsNamedAtOnce) {
  const Coordinator port;
  pid_t child = forkRank([&] {
    auto comm = TcpHostComm::join(config(1, 2, port));
    comm->setStep(17);
    int v = 1;
    std::vector<int> all(2);
    for (int i = 0; i < 3; ++i)
      comm->allGather(&v, all.data(), sizeof v);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(3); // dies between collectives, no goodbye
    return 0;
  });
  auto comm = TcpHostComm::join(config(0, 2, port, /*timeout=*/30));
  auto t0 = std::chrono::steady_clock::now();
  double secs = 0;
  std::string msg = gatherUntilError(*comm, secs, t0);
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(msg, "rank 1 (pid " + std::to_string(child) +
                     ") stopped responding during step 17: its connection "
                     "closed (the process exited or was killed); exiting");
  EXPECT_LT(secs, 5.0) << "EOF must not wait for the 30 s timeout";
  EXPECT_THROW(comm->checkHealthy(), Error);
}

TEST(Dist, StoppedPeerIsNamedWithinTheTimeout) {
  const Coordinator port;
  pid_t child = forkRank([&] {
    auto comm = TcpHostComm::join(config(1, 2, port, 1.0));
    comm->setStep(5);
    int v = 1;
    std::vector<int> all(2);
    comm->allGather(&v, all.data(), sizeof v);
    raise(SIGSTOP); // a hung rank: alive, silent
    return 0;
  });
  auto comm = TcpHostComm::join(config(0, 2, port, 1.0));
  auto t0 = std::chrono::steady_clock::now();
  double secs = 0;
  std::string msg = gatherUntilError(*comm, secs, t0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_NE(msg.find("rank 1 (pid " + std::to_string(child) +
                     ") stopped responding during step 5: nothing heard"),
            std::string::npos)
      << msg;
  EXPECT_LT(secs, 4.0) << "--rank-timeout is 1 s";
}

TEST(Dist, PeersNoticeRankZeroDying) {
  const Coordinator port;
  pid_t child = forkRank([&] {
    auto comm = TcpHostComm::join(config(0, 2, port));
    int v = 0;
    std::vector<int> all(2);
    comm->allGather(&v, all.data(), sizeof v);
    kill(getpid(), SIGKILL);
    return 0;
  });
  close(port.fd); // the child (rank 0) holds it
  auto comm = TcpHostComm::join(config(1, 2, port));
  auto t0 = std::chrono::steady_clock::now();
  double secs = 0;
  std::string msg = gatherUntilError(*comm, secs, t0);
  waitpid(child, nullptr, 0);
  EXPECT_NE(msg.find("rank 0 (pid " + std::to_string(child) + ")"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("connection closed"), std::string::npos) << msg;
  EXPECT_LT(secs, 5.0);
}

TEST(Dist, CleanFinishIsNotAFailure) {
  const Coordinator port;
  pid_t child = forkRank([&] {
    auto comm = TcpHostComm::join(config(1, 2, port, 1.0));
    comm->barrier();
    comm->finish();
    return 0;
  });
  auto comm = TcpHostComm::join(config(0, 2, port, 1.0));
  comm->barrier();
  int st = -1;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  // Long past the peer's exit and the timeout: still healthy.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_NO_THROW(comm->checkHealthy());
  comm->finish();
}
