//===- nccl_comm_gpu_test.cpp - NcclDeviceComm between two GPUs -----------===//
//
// Two rank processes (this binary re-executed with GLM_NCCL_TEST_* in the
// environment, so each starts CUDA fresh) join over the TCP control plane
// and an NcclDeviceComm on GPUs 0 and 1:
//  - allReduceSum and allGather give the exact expected values, also when
//    captured into a CUDA graph and replayed;
//  - rank 1 killed (SIGKILL) while rank 0 waits in an all-reduce: rank 0's
//    stream synchronisation returns (the watchdog aborted the communicator)
//    and checkHealthy() throws naming rank 1, well within the timeout.
// Skips without two GPUs or without NCCL in the build.
//
//===----------------------------------------------------------------------===//
#include "runtime/base/error.h"
#include "runtime/dist/nccl_comm.h"
#include "runtime/dist/tcp_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#ifdef GLM_DIST_HAVE_NCCL
#include <cuda_runtime.h>

using namespace glm::rt;

namespace {

const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

#define CUDA_OK(x)                                                           \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess)                                                   \
      fail(#x, ": ", cudaGetErrorString(e_));                                \
  } while (0)

/// One rank's work; returns the process exit code.
int childMain(int rank, int port, const std::string &mode) {
  dist::TcpConfig tc;
  tc.rank = rank;
  tc.world = 2;
  tc.coordinator = "127.0.0.1:" + std::to_string(port);
  tc.planHash = 7;
  tc.planLabel = "nccl test";
  tc.timeout = 10;
  tc.joinTimeout = 60;
  if (const char *fd = std::getenv(dist::kCoordinatorFdEnv); fd && rank == 0)
    tc.listenFd = std::atoi(fd);
  auto ctl = dist::TcpHostComm::join(tc);
  auto dc = dist::makeNcclDeviceComm(*ctl, rank, 120);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 1 << 20;
  float *buf = nullptr, *gath = nullptr;
  CUDA_OK(cudaMalloc(&buf, n * 4));
  CUDA_OK(cudaMalloc(&gath, 2 * n * 4));
  std::vector<float> h(n), back(2 * n);
  auto fill = [&](int round) {
    for (size_t i = 0; i < n; ++i) // small integers: sums are exact
      h[i] = (float)((i % 97) + 1000 * rank + round);
    CUDA_OK(cudaMemcpy(buf, h.data(), n * 4, cudaMemcpyHostToDevice));
  };
  int bad = 0;
  auto checkSum = [&](int round, const char *what) {
    CUDA_OK(cudaMemcpy(back.data(), buf, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      float want = (float)(2 * (i % 97) + 1000 + 2 * round);
      if (back[i] != want) {
        std::fprintf(stderr, "rank %d %s: [%zu] = %g, want %g\n", rank, what,
                     i, back[i], want);
        ++bad;
        return;
      }
    }
  };

  fill(1);
  dc->allReduceSum(buf, n, s);
  CUDA_OK(cudaStreamSynchronize(s));
  dc->checkHealthy();
  checkSum(1, "allReduceSum");

  if (mode == "kill") {
    if (rank == 1) {
      ctl->barrier();
      kill(getpid(), SIGKILL);
    }
    ctl->barrier();
    // Rank 1 is gone (or going): this all-reduce, replayed from a graph as
    // the executor does, can never complete.
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    try {
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      dc->allReduceSum(buf, n, s);
      CUDA_OK(cudaStreamEndCapture(s, &g));
      CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
      for (int i = 0; i < 100; ++i) {
        cudaGraphLaunch(ge, s);
        cudaStreamSynchronize(s); // returns once the comm is aborted
        dc->checkHealthy();
      }
    } catch (const Error &e) {
      msg = e.what();
    }
    double secs = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    std::fprintf(stderr, "rank 0 after the kill (%.2f s): %s\n", secs,
                 msg.c_str());
    bool named = msg.find("rank 1 (pid") != std::string::npos;
    std::fflush(stderr);
    _exit(named && secs < 10 ? 0 : 1); // the aborted comm is not reusable
  }

  fill(2);
  dc->allGather(buf, gath, n, s);
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpy(back.data(), gath, 2 * n * 4, cudaMemcpyDeviceToHost));
  for (int r = 0; r < 2 && !bad; ++r)
    for (size_t i = 0; i < n; ++i)
      if (back[r * n + i] != (float)((i % 97) + 1000 * r + 2)) {
        std::fprintf(stderr, "rank %d allGather: [%d][%zu] = %g\n", rank, r,
                     i, back[r * n + i]);
        ++bad;
        break;
      }

  // Captured into a graph and replayed twice.
  fill(3);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  dc->allReduceSum(buf, n, s);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_OK(cudaGraphLaunch(ge, s));
  CUDA_OK(cudaStreamSynchronize(s));
  checkSum(3, "graph allReduceSum");
  fill(4);
  CUDA_OK(cudaGraphLaunch(ge, s));
  CUDA_OK(cudaStreamSynchronize(s));
  checkSum(4, "graph replay allReduceSum");
  dc->checkHealthy();
  ctl->barrier();
  std::fprintf(stderr, "rank %d: %s\n", rank, bad ? "FAIL" : "all exact");
  // NCCL frees a communicator only after the graphs that captured it.
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
  dc.reset();
  std::fprintf(stderr, "rank %d: communicator destroyed\n", rank);
  ctl->finish();
  return bad ? 1 : 0;
}

/// Runs the two ranks as processes; returns their exit statuses.
std::vector<int> runRanks(const std::string &mode, std::string &log) {
  // Rank 0's socket listens before the ranks start, as launch does it.
  int port = 0;
  const int listenFd = dist::listenLoopback(port);
  std::vector<pid_t> pids;
  std::string logPath = "/tmp/glm_nccl_test_" + std::to_string(getpid());
  for (int r = 0; r < 2; ++r) {
    std::fflush(nullptr);
    pid_t p = fork();
    if (p == 0) {
      setenv("GLM_NCCL_TEST_RANK", std::to_string(r).c_str(), 1);
      setenv("GLM_NCCL_TEST_PORT", std::to_string(port).c_str(), 1);
      setenv("GLM_NCCL_TEST_MODE", mode.c_str(), 1);
      if (r == 0)
        setenv(dist::kCoordinatorFdEnv, std::to_string(dup(listenFd)).c_str(),
               1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      std::string out = logPath + "." + std::to_string(r);
      freopen(out.c_str(), "w", stderr);
      execl("/proc/self/exe", "nccl_rank",
            "--gtest_filter=NcclCommGpu.ChildRank", (char *)nullptr);
      _exit(127);
    }
    pids.push_back(p);
  }
  close(listenFd);
  // A hung rank must fail the test, not hang it: 90 s, then SIGKILL.
  std::vector<int> st(2);
  std::vector<bool> done(2, false);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (!(done[0] && done[1])) {
    for (int r = 0; r < 2; ++r)
      if (!done[r] && waitpid(pids[r], &st[r], WNOHANG) == pids[r])
        done[r] = true;
    if (std::chrono::steady_clock::now() > until) {
      for (int r = 0; r < 2; ++r)
        if (!done[r]) {
          log += "rank " + std::to_string(r) + " hung: killed after 90 s\n";
          kill(pids[r], SIGKILL);
        }
      until = std::chrono::steady_clock::time_point::max();
    }
    usleep(20000);
  }
  for (int r = 0; r < 2; ++r) {
    std::string path = logPath + "." + std::to_string(r);
    if (FILE *f = std::fopen(path.c_str(), "r")) {
      char line[1024];
      while (std::fgets(line, sizeof line, f))
        if (std::string(line).find("rank ") == 0)
          log += line;
      std::fclose(f);
    }
    std::remove(path.c_str());
  }
  return st;
}

bool twoGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n >= 2;
}

} // namespace

TEST(NcclCommGpu, ChildRank) {
  if (!*env("GLM_NCCL_TEST_RANK"))
    GTEST_SKIP() << "a rank of the tests below (re-executed)";
  int rc = 1;
  try {
    rc = childMain(std::atoi(env("GLM_NCCL_TEST_RANK")),
                   std::atoi(env("GLM_NCCL_TEST_PORT")),
                   env("GLM_NCCL_TEST_MODE"));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rank %s error: %s\n", env("GLM_NCCL_TEST_RANK"),
                 e.what());
  }
  std::fflush(stderr);
  _exit(rc);
}

TEST(NcclCommGpu, AllReduceAndAllGatherExactOnTwoGpus) {
  if (*env("GLM_NCCL_TEST_RANK") || !twoGpus())
    GTEST_SKIP() << "needs 2 GPUs";
  std::string log;
  auto st = runRanks("ok", log);
  std::printf("%s", log.c_str());
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0)
        << "rank " << r << ":\n"
        << log;
  std::printf("[gpu-case] nccl allreduce+allgather+graph 2 GPUs %s\n",
              HasFailure() ? "FAIL" : "PASS");
}

TEST(NcclCommGpu, KilledRankAbortsThePeersCollective) {
  if (*env("GLM_NCCL_TEST_RANK") || !twoGpus())
    GTEST_SKIP() << "needs 2 GPUs";
  std::string log;
  auto t0 = std::chrono::steady_clock::now();
  auto st = runRanks("kill", log);
  double secs = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  std::printf("%s", log.c_str());
  EXPECT_TRUE(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL);
  EXPECT_TRUE(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 0)
      << "rank 0 did not report rank 1's death in time:\n"
      << log;
  EXPECT_LT(secs, 120.0);
  std::printf("[gpu-case] nccl killed rank -> peer error (%.1f s) %s\n", secs,
              HasFailure() ? "FAIL" : "PASS");
}

#else

TEST(NcclCommGpu, AllReduceAndAllGatherExactOnTwoGpus) {
  GTEST_SKIP() << "built without NCCL";
}

#endif
