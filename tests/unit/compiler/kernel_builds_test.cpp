//===- kernel_builds_test.cpp - the background NVRTC job queue ------------===//
//
// glm-emit-kernels{async} leaves its NVRTC builds in a KernelBuilds queue
// that glm-emit-plan waits on: every job runs once, its result lands at its
// own index whatever the finishing order, an exception becomes that
// kernel's error, and destroying the queue early skips the jobs not yet
// started instead of running them.
//
//===----------------------------------------------------------------------===//
#include "compiler/mlir/KernelBuilds.h"
#include "runtime/base/error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

using glmc::KernelBuildResult;
using glmc::KernelBuilds;
using Job = std::function<void(KernelBuildResult &)>;

TEST(KernelBuilds, EveryJobOnceResultsByIndex) {
  KernelBuilds builds(nullptr);
  EXPECT_FALSE(builds.started());
  std::atomic<int> runs{0};
  std::vector<Job> jobs;
  for (int i = 0; i < 17; ++i)
    jobs.push_back([i, &runs](KernelBuildResult &r) {
      // Early jobs take longest, so they finish after later ones.
      std::this_thread::sleep_for(std::chrono::milliseconds(17 - i));
      r.name = "k" + std::to_string(i);
      r.archs = {"sm_121"};
      r.ptx = {std::string(size_t(i), 'p')};
      r.cubin = {""};
      ++runs;
    });
  builds.start({}, std::move(jobs), 3);
  EXPECT_TRUE(builds.started());
  builds.wait();
  EXPECT_EQ(runs.load(), 17);
  ASSERT_EQ(builds.results().size(), 17u);
  for (int i = 0; i < 17; ++i) {
    EXPECT_EQ(builds.results()[i].name, "k" + std::to_string(i));
    EXPECT_EQ(builds.results()[i].ptx[0].size(), size_t(i));
    EXPECT_TRUE(builds.results()[i].error.empty());
  }
  builds.wait(); // a second wait returns at once
}

TEST(KernelBuilds, AnExceptionIsThatKernelsError) {
  KernelBuilds builds(nullptr);
  std::vector<Job> jobs;
  jobs.push_back([](KernelBuildResult &r) { r.name = "good"; });
  jobs.push_back([](KernelBuildResult &r) {
    r.name = "bad";
    glm::rt::fail("codegen: NVRTC could not compile kernel bad");
  });
  builds.start({}, std::move(jobs), 2);
  builds.wait();
  EXPECT_TRUE(builds.results()[0].error.empty());
  EXPECT_NE(builds.results()[1].error.find("could not compile kernel bad"),
            std::string::npos);
}

TEST(KernelBuilds, DestroyingSkipsJobsNotStarted) {
  std::atomic<int> runs{0};
  std::atomic<bool> firstStarted{false};
  {
    KernelBuilds builds(nullptr);
    std::vector<Job> jobs;
    for (int i = 0; i < 50; ++i)
      jobs.push_back([&runs, &firstStarted](KernelBuildResult &) {
        firstStarted = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++runs;
      });
    builds.start({}, std::move(jobs), 1);
    // Wait for the worker to be inside a job (a loaded CI machine may take
    // longer than any fixed nap to start the thread), then drop the queue.
    while (!firstStarted)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } // a failed pipeline drops the analysis without waiting for all 50
  EXPECT_GE(runs.load(), 1);
  EXPECT_LT(runs.load(), 50);
}

TEST(KernelBuilds, NoJobsIsNoWait) {
  KernelBuilds builds(nullptr);
  builds.start({}, {}, 2);
  builds.wait();
  EXPECT_TRUE(builds.results().empty());
}
