// The NCCL process group: GPU tensors are reduced by NCCL on the communication stream; host
// tensors (settings checks, evaluation sums, mask agreement) go through the MPI group that also
// starts the job and broadcasts NCCL's unique id. The GPU is chosen from the local rank before
// any other CUDA call of the framework.
//
// Ordering is by CUDA events, as in PyTorch's NCCL backend: a collective first makes the
// communication stream wait for everything the compute stream has queued (the gradients being
// produced), and Work::wait() makes the compute stream wait for the collective, without blocking
// the host. A bucket's all-reduce thus overlaps the rest of backward on the GPU.
//
// Since no host thread waits for a collective, a watchdog thread does: it polls each queued
// collective's completion event, and NCCL's asynchronous error state. A collective still running
// after --comm-timeout (a peer died or hung), or an asynchronous NCCL error, ends the process
// with the same kind of message as the MPI group's, after ncclCommAbort, so that mpirun stops the
// job instead of every rank hanging.
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/process_group.h"

#ifdef PAC_WITH_NCCL
#include <nccl.h>

#include "core/cuda/check.h"
#include "core/cuda/context.h"

#define NCCL_CHECK(call) PAC_LIBRARY_CHECK(call, ncclSuccess, ncclGetErrorString)
#endif

namespace pac::comm {

#ifndef PAC_WITH_NCCL
ProcessGroupPtr make_nccl_group() {
  PAC_FAIL("--backend nccl: this build has no NCCL process group (it needs CUDA, MPI and NCCL)");
}
#else

namespace {

ncclDataType_t nccl_type(DType dtype, const char* collective) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    default:
      PAC_FAIL("{}: NCCL has no {} type (f32, f64, f16, bf16, i8, u8, i32, i64)", collective,
               dtype_name(dtype));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// A collective queued on the communication stream. It keeps its tensors alive; wait() orders the
// compute stream after it.
class NcclWork : public Work {
 public:
  NcclWork(cudaEvent_t done, std::vector<Tensor> keep) : done_(done), keep_(std::move(keep)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;
  void wait() override { CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(), done_, 0)); }

 private:
  cudaEvent_t done_;
  std::vector<Tensor> keep_;
};

void require_gpu() {
  PAC_CHECK(cuda_device_count() > 0, "--backend nccl: no GPU is visible to this process");
}

class NcclGroup : public ProcessGroup {
 public:
  // The GPU check comes before the MPI group exists: a failed start must not finalize MPI.
  NcclGroup() : host_((require_gpu(), make_mpi_group())) {
    device_ = host_->local_rank() % cuda_device_count();
    cuda::set_device(device_);
    ncclUniqueId id{};
    if (host_->rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor id_bytes = Tensor::empty({static_cast<int64_t>(sizeof(id))}, DType::u8);
    std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
    host_->broadcast(id_bytes, 0)->wait();
    std::memcpy(&id, id_bytes.raw_data(), sizeof(id));
    NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watchdog_.join();
    // ncclCommDestroy waits for the collectives still queued, which never end when a peer is gone
    // (the group is destroyed early on an error path): then the communicator is aborted instead.
    bool pending = false;
    for (auto& q : queued_) {
      pending = pending || cudaEventQuery(q.done) != cudaSuccess;
      cudaEventDestroy(q.done);
    }
    if (comm_ == nullptr) return;
    if (pending || std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  void set_timeout(double seconds) override {
    ProcessGroup::set_timeout(seconds);
    host_->set_timeout(seconds);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  std::string backend() const override { return "nccl"; }

  // The byte counts are what a ring moves per rank (NCCL may pick a tree; the volume is the same
  // to within the latency terms).
  WorkPtr all_reduce(Tensor t, ReduceOp op) override {
    if (!t.is_cuda()) return host_->all_reduce(t, op);
    count_bytes("all_reduce", ring_bytes(t.nbytes()) * 2);
    return launch("all_reduce", {t}, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(),
                               nccl_type(t.dtype(), "all_reduce"), nccl_op(op), comm_, s));
    });
  }

  // One NCCL group call: the segments' all-reduces are launched together, and NCCL fuses them.
  WorkPtr all_reduce_coalesced(std::vector<ReduceSegment> segments) override {
    std::vector<Tensor> keep;
    for (const auto& s : segments) {
      if (!s.tensor.is_cuda()) return ProcessGroup::all_reduce_coalesced(std::move(segments));
      keep.push_back(s.tensor);
    }
    for (const auto& s : segments) {
      count_bytes("all_reduce", ring_bytes(s.tensor.nbytes()) * 2);
      count_purpose(s.purpose, ring_bytes(s.tensor.nbytes()) * 2);
    }
    return launch("all_reduce", keep, [&](cudaStream_t stream) {
      NCCL_CHECK(ncclGroupStart());
      for (const auto& s : segments) {
        Tensor t = s.tensor;
        NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(),
                                 nccl_type(t.dtype(), "all_reduce"), nccl_op(s.op), comm_, stream));
      }
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  WorkPtr broadcast(Tensor t, int root) override {
    if (!t.is_cuda()) return host_->broadcast(t, root);
    PAC_CHECK(root >= 0 && root < size(), "broadcast: root {} is not a rank of {}", root, size());
    if (rank() != (root + size() - 1) % size()) count_bytes("broadcast", t.nbytes());
    return launch("broadcast", {t}, [&](cudaStream_t s) {
      NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, s));
    });
  }

  WorkPtr all_gather(Tensor in, Tensor out) override {
    if (!in.is_cuda()) return host_->all_gather(in, out);
    PAC_CHECK(out.numel() == in.numel() * size() && out.dtype() == in.dtype() && out.is_cuda(),
              "all_gather: output {} must hold {} x {} on the GPU", out.str(), size(), in.str());
    count_bytes("all_gather", in.nbytes() * (size() - 1));
    return launch("all_gather", {in, out}, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), in.nbytes(), ncclUint8, comm_, s));
    });
  }

  // NCCL has no variable-size all-gather: every rank broadcasts its part into place, in one
  // group call.
  WorkPtr all_gather_v(Tensor in, Tensor out, std::vector<int64_t> counts) override {
    if (!in.is_cuda()) return host_->all_gather_v(in, out, counts);
    PAC_CHECK(static_cast<int>(counts.size()) == size() && counts[rank()] == in.numel(),
              "all_gather_v: counts do not match the group or this rank's {}", in.str());
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    PAC_CHECK(out.numel() == total && out.dtype() == in.dtype() && out.is_cuda(),
              "all_gather_v: output {} must hold {} elements on the GPU", out.str(), total);
    count_bytes("all_gather", in.nbytes() * (size() - 1));
    size_t elem = dtype_size(in.dtype());
    return launch("all_gather_v", {in, out}, [&](cudaStream_t s) {
      NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        char* dst = static_cast<char*>(out.raw_data()) + offset * elem;
        const void* src = r == rank() ? in.raw_data() : dst;
        NCCL_CHECK(ncclBroadcast(src, dst, counts[r] * elem, ncclUint8, r, comm_, s));
        offset += counts[r];
      }
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  WorkPtr reduce_scatter(Tensor in, Tensor out, ReduceOp op) override {
    if (!in.is_cuda()) return host_->reduce_scatter(in, out, op);
    PAC_CHECK(in.numel() == out.numel() * size() && in.dtype() == out.dtype() && out.is_cuda(),
              "reduce_scatter: input {} must hold {} x output {} on the GPU", in.str(), size(),
              out.str());
    count_bytes("reduce_scatter", out.nbytes() * (size() - 1));
    return launch("reduce_scatter", {in, out}, [&](cudaStream_t s) {
      NCCL_CHECK(ncclReduceScatter(in.raw_data(), out.raw_data(), out.numel(),
                                   nccl_type(in.dtype(), "reduce_scatter"), nccl_op(op), comm_, s));
    });
  }

  void barrier() override {
    cuda::synchronize();
    CUDA_CHECK(cudaStreamSynchronize(cuda::comm_stream()));
    host_->barrier();
  }

 private:
  uint64_t ring_bytes(size_t nbytes) const {
    return static_cast<uint64_t>(nbytes) * (size() - 1) / size();
  }

  // Orders the communication stream after the compute stream, queues the collective there, and
  // returns a Work that orders the compute stream after it.
  template <class Queue>
  WorkPtr launch(const char* collective, std::vector<Tensor> keep, Queue queue) {
    cudaStream_t compute = cuda::compute_stream(), comm = cuda::comm_stream();
    cudaEvent_t ready = nullptr, done = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, compute));
    CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait has been queued
    queue(comm);
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, comm));
    // The watchdog's own event: the Work's may be destroyed before the collective ends.
    cudaEvent_t watched = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&watched, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(watched, comm));
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      queued_.push_back({watched, collective, std::chrono::steady_clock::now()});
    }
    return std::make_shared<NcclWork>(done, std::move(keep));
  }

  // Polls the queued collectives' events and NCCL's error state every 50 ms (see the header).
  void watch() {
    cudaSetDevice(device_);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(watch_mutex_);
      if (stopping_) return;
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        give_up(fmt::format("NCCL reported an asynchronous error: {}", ncclGetErrorString(async)));
      }
      while (!queued_.empty() && cudaEventQuery(queued_.front().done) == cudaSuccess) {
        cudaEventDestroy(queued_.front().done);
        queued_.pop_front();
        front_since_ = std::chrono::steady_clock::now();
      }
      // The oldest unfinished collective is timed from when it could start: its launch, or the
      // end of the one before it (a streaming DiLoCo fragment runs for several steps by design,
      // and what queues behind it must not be taken for hung).
      const double limit = timeout_s();
      if (limit > 0 && !queued_.empty()) {
        const auto since = std::max(queued_.front().queued, front_since_);
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
        if (waited > limit) {
          give_up(
              fmt::format("{} has made no progress for {:.0f} s; a peer rank has died or hung "
                          "(this rank's ring neighbours are ranks {} and {})",
                          queued_.front().collective, waited, (rank() + size() - 1) % size(),
                          (rank() + 1) % size()));
        }
      }
    }
  }

  // As the MPI group does: the process cannot unwind a thread stuck in a collective, so it says
  // why and exits, and mpirun stops the job.
  [[noreturn]] void give_up(const std::string& why) {
    std::fprintf(stderr,
                 "pactrain: rank %d: %s. Aborting NCCL and exiting, so that mpirun stops the job "
                 "(--comm-timeout sets the limit).\n",
                 rank(), why.c_str());
    std::fflush(stderr);
    ncclCommAbort(comm_);
    std::_Exit(3);
  }

  struct Queued {
    cudaEvent_t done;
    const char* collective;
    std::chrono::steady_clock::time_point queued;
  };

  ProcessGroupPtr host_;
  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  std::thread watchdog_;
  std::mutex watch_mutex_;
  bool stopping_ = false;
  std::deque<Queued> queued_;  // collectives not yet seen finished, oldest first
  std::chrono::steady_clock::time_point front_since_{};  // when the oldest became the oldest
};

}  // namespace

ProcessGroupPtr make_nccl_group() { return std::make_shared<NcclGroup>(); }

#endif

}  // namespace pac::comm
