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

// Locking: ncclMu_ serialises NCCL calls on comm_ (the caller's thread and
// the watchdog); errMu_ guards the failure message. ncclCommAbort runs on
// the watchdog thread only and under no lock: it sets NCCL's abort flag (the
// kernels waiting for a dead peer return) and then waits until every CUDA
// graph that captured a collective is destroyed, which the caller's thread
// does while the error unwinds through the executor.
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
    if (rank_ == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      check(r == ncclSuccess, "rank 0: ncclGetUniqueId failed: ",
            ncclGetErrorString(r), "; exiting");
    }
    std::vector<ncclUniqueId> all(size_);
    ctl_.allGather(&id, all.data(), sizeof id);
    id = all[0];
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg);
    // Polled, so a peer that dies during init is reported, not waited for.
    const int64_t until = nowMs() + (int64_t)(timeout * 1000);
    if (comm_ && (r == ncclSuccess || r == ncclInProgress)) {
      for (;;) {
        ncclCommGetAsyncError(comm_, &r);
        if (r != ncclInProgress)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::string why = controlFailure(0);
        if (why.empty() && nowMs() > until)
          why = "rank " + std::to_string(rank_) + ": NCCL init did not "
                "complete within " + std::to_string((int)timeout) +
                " s (is every rank started, each on its own GPU?); exiting";
        if (!why.empty()) {
          ncclCommAbort(comm_); // no graph exists yet: returns
          throw Error(why);
        }
      }
    }
    if (r != ncclSuccess) {
      std::string why = "rank " + std::to_string(rank_) +
                        ": ncclCommInitRankConfig failed: " +
                        ncclGetErrorString(r) + detail() + "; exiting";
      if (comm_)
        ncclCommAbort(comm_);
      throw Error(why);
    }
    // Every rank's communicator is ready before any collective.
    ctl_.barrier();
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclDeviceComm() override {
    stop_ = true;
    if (watchdog_.joinable())
      watchdog_.join();
    if (aborting_)
      return; // the watchdog aborted (and freed) the communicator
    // A clean finalize flushes outstanding work; bounded so a dead peer
    // cannot hold the process. Graphs that captured collectives must be
    // gone by now (NCCL waits for them).
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

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allReduceSum(float *data, size_t count, void *stream) override {
    enqueue("ncclAllReduce", [&] {
      return ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_,
                           (cudaStream_t)stream);
    });
  }

  void allReduceSumI64(long long *data, size_t count, void *stream) override {
    enqueue("ncclAllReduce", [&] {
      return ncclAllReduce(data, data, count, ncclInt64, ncclSum, comm_,
                           (cudaStream_t)stream);
    });
  }

  void allGather(const float *send, float *recv, size_t count,
                 void *stream) override {
    enqueue("ncclAllGather", [&] {
      return ncclAllGather(send, recv, count, ncclFloat, comm_,
                           (cudaStream_t)stream);
    });
  }

  void checkHealthy() override {
    std::string why = error();
    if (why.empty())
      why = controlFailure(0);
    if (!why.empty()) {
      requestAbort(why);
      throw Error(why);
    }
  }

private:
  std::string detail() {
    const char *last = comm_ ? ncclGetLastError(comm_) : nullptr;
    return last && *last ? std::string(" (") + last + ")" : std::string();
  }

  std::string error() {
    std::lock_guard<std::mutex> lk(errMu_);
    return error_;
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

  /// Records the failure; the watchdog aborts the communicator.
  void requestAbort(const std::string &message) {
    std::lock_guard<std::mutex> lk(errMu_);
    if (error_.empty())
      error_ = message;
  }

  std::string ncclFailure(ncclResult_t r, const char *call) {
    std::string why = controlFailure(1000);
    if (!why.empty())
      return why;
    std::lock_guard<std::mutex> lk(ncclMu_);
    return "rank " + std::to_string(rank_) + ": " + call + " failed: " +
           ncclGetErrorString(r) + (aborting_ ? "" : detail()) +
           " (a peer rank may have died); exiting";
  }

  /// Enqueues one collective and polls the nonblocking call to completion
  /// (a dead peer is reported by the control plane within its timeout).
  template <class Call> void enqueue(const char *name, Call call) {
    checkHealthy();
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lk(ncclMu_);
      if (aborting_)
        r = ncclInvalidUsage;
      else
        r = call();
    }
    for (;;) {
      if (r != ncclSuccess && r != ncclInProgress) {
        std::string why = error();
        if (why.empty())
          why = ncclFailure(r, name);
        requestAbort(why);
        throw Error(why);
      }
      {
        std::lock_guard<std::mutex> lk(ncclMu_);
        if (aborting_)
          r = ncclInvalidUsage;
        else
          ncclCommGetAsyncError(comm_, &r);
      }
      if (r == ncclSuccess)
        return;
      if (r == ncclInProgress) {
        checkHealthy();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ncclResult_t st = ncclSuccess;
      {
        std::lock_guard<std::mutex> lk(ncclMu_);
        ncclCommGetAsyncError(comm_, &st);
      }
      if (st != ncclSuccess && st != ncclInProgress)
        requestAbort(ncclFailure(st, "NCCL"));
      std::string why = error();
      if (why.empty())
        why = controlFailure(0);
      if (!why.empty()) {
        requestAbort(why);
        {
          std::lock_guard<std::mutex> lk(ncclMu_);
          aborting_ = true; // no NCCL call on comm_ starts after this
        }
        ncclCommAbort(comm_);
        return;
      }
    }
  }

  HostComm &ctl_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  std::mutex ncclMu_, errMu_;
  std::atomic<bool> aborting_{false}, stop_{false};
  std::string error_; // guarded by errMu_
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
