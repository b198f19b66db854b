//===- nccl_comm.cpp - DeviceComm over NCCL with an aborting watchdog -----===//
#include "runtime/dist/nccl_comm.h"

#include "runtime/base/error.h"

#ifdef GLM_DIST_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace glm::rt::dist {

#ifndef GLM_DIST_HAVE_NCCL

bool haveNccl() { return false; }

std::unique_ptr<DeviceComm> makeNcclDeviceComm(HostComm &, int, double) {
  fail("this glm-engine was built without NCCL: more than one cuda rank "
       "needs a build with -DGLM_WITH_CUDA=ON and libnccl (found beside the "
       "CUDA toolkit)");
}

#else

bool haveNccl() { return true; }

namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class NcclDeviceComm : public DeviceComm {
public:
  NcclDeviceComm(HostComm &control, int device, double timeout)
      : ctl_(control), rank_(control.rank()), size_(control.size()) {
    cudaError_t ce = cudaSetDevice(device);
    check(ce == cudaSuccess, "rank ", rank_, ": cudaSetDevice(", device,
          "): ", cudaGetErrorString(ce), " (--device must name a GPU of "
          "this host)");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0)
      checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<ncclUniqueId> all(size_);
    ctl_.allGather(&id, all.data(), sizeof id);
    id = all[0];
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
      checkNccl(r, "ncclCommInitRankConfig");
    settle("ncclCommInitRankConfig", (int64_t)(timeout * 1000));
    // Every rank's communicator is ready before any collective.
    ctl_.barrier();
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclDeviceComm() override {
    stop_ = true;
    if (watchdog_.joinable())
      watchdog_.join();
    std::lock_guard<std::mutex> lk(mu_);
    if (comm_ && !aborted_) {
      // A clean finalize flushes outstanding work; bounded so a dead peer
      // cannot hold the process.
      ncclResult_t r = ncclCommFinalize(comm_);
      int64_t until = nowMs() + 10000;
      while (r == ncclInProgress && nowMs() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ncclCommGetAsyncError(comm_, &r);
      }
      if (r == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allReduceSum(float *data, size_t count, void *stream) override {
    checkHealthy();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!aborted_) {
        ncclResult_t r = ncclAllReduce(data, data, count, ncclFloat, ncclSum,
                                       comm_, (cudaStream_t)stream);
        if (r != ncclSuccess && r != ncclInProgress)
          recordFailure(r, "ncclAllReduce");
      }
    }
    settle("ncclAllReduce", -1);
  }

  void allGather(const float *send, float *recv, size_t count,
                 void *stream) override {
    checkHealthy();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!aborted_) {
        ncclResult_t r = ncclAllGather(send, recv, count, ncclFloat, comm_,
                                       (cudaStream_t)stream);
        if (r != ncclSuccess && r != ncclInProgress)
          recordFailure(r, "ncclAllGather");
      }
    }
    settle("ncclAllGather", -1);
  }

  void checkHealthy() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_.empty())
        throw Error(error_);
    }
    try {
      ctl_.checkHealthy();
    } catch (const Error &e) {
      abortWith(e.what());
      throw;
    }
  }

private:
  void checkNccl(ncclResult_t r, const char *call) {
    if (r != ncclSuccess)
      fail("rank ", rank_, ": ", call, " failed: ", ncclGetErrorString(r),
           detail(), "; exiting");
  }

  std::string detail() {
    const char *last = comm_ ? ncclGetLastError(comm_) : nullptr;
    return last && *last ? std::string(" (") + last + ")" : std::string();
  }

  /// The control plane's failure message, waiting up to `ms` for it: when
  /// NCCL fails because a peer died, the control plane names the peer.
  std::string controlFailure(int ms) {
    for (int waited = 0;; waited += 20) {
      try {
        ctl_.checkHealthy();
      } catch (const Error &e) {
        return e.what();
      }
      if (waited >= ms)
        return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  /// Under mu_: remembers an NCCL failure (named by the control plane when
  /// it knows which peer died) and aborts the communicator.
  void recordFailure(ncclResult_t r, const char *call) {
    if (error_.empty())
      error_ = controlFailure(1000);
    if (error_.empty())
      error_ = "rank " + std::to_string(rank_) + ": " + call +
               " failed: " + ncclGetErrorString(r) + detail() +
               " (a peer rank may have died); exiting";
    if (comm_ && !aborted_) {
      aborted_ = true;
      ncclCommAbort(comm_);
    }
  }

  void abortWith(const std::string &message) {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_.empty())
      error_ = message;
    if (comm_ && !aborted_) {
      aborted_ = true;
      ncclCommAbort(comm_);
    }
  }

  /// Polls a nonblocking call to completion; `limitMs` < 0: no limit but
  /// the control plane's (a dead peer is reported there within its
  /// timeout).
  void settle(const char *call, int64_t limitMs) {
    const int64_t until = limitMs < 0 ? INT64_MAX : nowMs() + limitMs;
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_.empty())
          throw Error(error_);
        ncclResult_t st = ncclSuccess;
        if (comm_ && !aborted_)
          ncclCommGetAsyncError(comm_, &st);
        if (st == ncclSuccess)
          return;
        if (st != ncclInProgress) {
          recordFailure(st, call);
          throw Error(error_);
        }
      }
      checkHealthy();
      if (nowMs() > until) {
        abortWith("rank " + std::to_string(rank_) + ": " + call +
                  " did not complete within " +
                  std::to_string(limitMs / 1000) +
                  " s (is every rank started, on its own GPU?); exiting");
        checkHealthy();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (aborted_)
          return;
        ncclResult_t st = ncclSuccess;
        ncclCommGetAsyncError(comm_, &st);
        if (st != ncclSuccess && st != ncclInProgress) {
          recordFailure(st, "NCCL");
          return;
        }
      }
      try {
        ctl_.checkHealthy();
      } catch (const Error &e) {
        abortWith(e.what());
        return;
      }
    }
  }

  HostComm &ctl_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  std::mutex mu_; // guards comm_ calls, aborted_, error_
  bool aborted_ = false;
  std::string error_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

} // namespace

std::unique_ptr<DeviceComm> makeNcclDeviceComm(HostComm &control, int device,
                                               double timeout) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  return std::make_unique<NcclDeviceComm>(control, device, timeout);
}

#endif

} // namespace glm::rt::dist
