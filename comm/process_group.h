// ProcessGroup: the ranks of a data-parallel job and the collectives between them. Every
// collective is asynchronous: it returns a Work to wait on, so the Reducer can launch a bucket's
// all-reduce and go on with backward. Every byte a rank sends is counted, per collective kind
// and in total, so the bytes on the wire are measured rather than estimated.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac::comm {

enum class ReduceOp { sum, avg, max };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // rethrows the collective's error, if any
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual std::string backend() const = 0;

  // In place on `t` (f32, f16, bf16, i8, i16 or i32; avg only for floating types).
  virtual WorkPtr all_reduce(Tensor t, ReduceOp op) = 0;
  virtual WorkPtr broadcast(Tensor t, int root) = 0;
  // out [size * n] = every rank's `in` [n], in rank order.
  virtual WorkPtr all_gather(Tensor in, Tensor out) = 0;
  // out = concatenation of every rank's `in`, whose lengths are `counts` (elements, per rank).
  virtual WorkPtr all_gather_v(Tensor in, Tensor out, std::vector<int64_t> counts) = 0;
  // in [size * n] reduced across ranks; rank r keeps block r in out [n].
  virtual WorkPtr reduce_scatter(Tensor in, Tensor out, ReduceOp op) = 0;
  virtual void barrier() = 0;

  // How long waiting for one collective may take before the process gives up, taking the peers
  // for dead or hung (0: forever). Only groups with peers use it; a group that delegates to
  // another passes it on.
  virtual void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout_s() const { return timeout_s_; }

  // Bytes this rank has sent, in all and by collective ("all_reduce", "broadcast", ...).
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  std::map<std::string, uint64_t> bytes_by_collective() const;

 protected:
  void count_bytes(const std::string& collective, uint64_t bytes);

 private:
  std::atomic<uint64_t> bytes_sent_{0};
  double timeout_s_ = 0.0;
  mutable std::mutex bytes_mutex_;
  std::map<std::string, uint64_t> bytes_by_collective_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// True when `value` is the same on every rank (one small all-reduce; every rank gets the answer,
// so every rank can stop together). Used to check settings, masks and checksums.
bool all_ranks_equal(ProcessGroup& group, uint64_t value);

// True when this process was started by mpirun/mpiexec (or srun with PMIx).
bool launched_by_mpi();
// "auto" picks, under an MPI launcher, nccl when the model is on a GPU and mpi otherwise, and
// local outside one; "local", "mpi", "nccl" force one. `device` is where the model lives.
ProcessGroupPtr make_process_group(const std::string& backend, Device device = Device::cpu());
ProcessGroupPtr make_local_group();
ProcessGroupPtr make_mpi_group();   // throws when the build has no MPI
ProcessGroupPtr make_nccl_group();  // throws when the build lacks CUDA or MPI

}  // namespace pac::comm
