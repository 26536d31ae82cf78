// ProcessGroup: the ranks of a data-parallel job and the collectives between them. Every
// collective is asynchronous: it returns a Work to wait on, so the Reducer can launch a bucket's
// all-reduce and go on with backward. Every byte a rank sends is counted, per collective kind
// and in total, so the bytes on the wire are measured rather than estimated.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac::comm {

enum class ReduceOp { sum, avg, max };

// A segment of int64 words that hold small integers packed side by side (comm/packed_fields.h),
// summed field by field: `values` fields of `bits` each, every rank adding at most `rank_max` to a
// field. Groups that send partial sums (the MPI group's ring and doubling) then send a sum of k
// ranks in the bits that k x rank_max needs; the result is the plain sum's. values == 0: an
// ordinary segment.
struct PackedSum {
  int64_t values = 0;
  int bits = 0;
  int64_t rank_max = 0;
};

// One tensor of a coalesced all-reduce, with its own reduction. `purpose` (a string literal, or
// null) names what it carries, so that the bytes it costs inside a shared message can be told
// apart (bytes_sent_for): the step's finiteness verdict riding on a gradient bucket, say.
struct ReduceSegment {
  Tensor tensor;
  ReduceOp op = ReduceOp::sum;
  const char* purpose = nullptr;
  PackedSum packed{};
};

// How an all-reduce moves its data. The ring sends 2 (P - 1) / P of the message per rank in
// 2 (P - 1) exchanges: the least bytes, the most round trips. Recursive doubling sends all of it
// log2 P times in log2 P exchanges (two more where P is not a power of two): the fewest round
// trips, so it wins for small messages, where the round trips are the cost. `automatic` takes
// doubling up to kDoublingMaxBytes and the ring above (on 2 ranks, where the two send the same
// bytes, doubling at every size): on the testbed (bench-allreduce --sizes,
// docs/results.md) doubling was 3.8x faster at 1 kB on 8 ranks at 2.5 Mbit/s and 4.7x on 4 at
// 5 Mbit/s, and the ring 1.4x and 1.6x faster at 4 kB; the two crossed near 2 kB. (On faster
// links the crossing moves up with the bandwidth-delay product; below it the ring only costs
// round trips.)
// `mpi` (the MPI group only) hands each segment to the MPI library's own MPI_Iallreduce, which
// picks its algorithm by size and rank count: measured against these (bench-allreduce
// --algorithms ring,doubling,mpi), it is not chosen automatically; the bytes it sends are the
// library's and are not counted.
enum class AllReduceAlgorithm { automatic, ring, doubling, mpi };

// How packed sums (PackedSum) travel in the groups that send partial sums (the MPI group):
// `coded`, the default, sends each run as Rice codes or as fields, whichever is shorter
// (comm/coded_fields.h); `fields` always in fields as wide as the sums so far need. The sums that
// arrive are the same.
enum class PackedWire { coded, fields };
constexpr int64_t kDoublingMaxBytes = 2048;

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
  // Several all-reduces in one collective: each segment is reduced with its own op, with the
  // result all_reduce would give it alone under the same algorithm, but every exchange carries a
  // piece of each segment, so the segments cost the round trips of one message (a compressor's
  // codes, its fp32 values and its scales; the step's verdict on the last bucket). The algorithm
  // is chosen by the message's total size. This version runs them as separate all-reduces; the
  // groups with peers override it.
  virtual WorkPtr all_reduce_coalesced(std::vector<ReduceSegment> segments);
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
  // The clock starts when a collective could start running: at its launch, or when the one before
  // it ended, whichever is later, so a queue of slow collectives is not taken for a hung peer.
  // Any thread may change it while collectives run (the pruner and the checkpoint writer extend
  // it).
  virtual void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout_s() const { return timeout_s_.load(); }

  // Which algorithm all-reduces use from now on (automatic unless set): for measuring them
  // against each other (bench-allreduce) and for tests. Groups that leave the choice to a library
  // (NCCL) ignore it.
  void set_all_reduce_algorithm(AllReduceAlgorithm algorithm) { algorithm_ = algorithm; }
  AllReduceAlgorithm all_reduce_algorithm() const { return algorithm_; }
  // How packed sums travel from now on (coded unless set): for measuring the two against each
  // other and for tests of the fields' byte formulas.
  void set_packed_wire(PackedWire wire) { packed_wire_ = wire; }
  PackedWire packed_wire() const { return packed_wire_; }

  // Bytes this rank has sent, in all and by collective ("all_reduce", "broadcast", ...).
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  std::map<std::string, uint64_t> bytes_by_collective() const;
  // Of those, the bytes of segments sent with this `purpose` (ReduceSegment::purpose), counted by
  // the MPI and NCCL groups.
  uint64_t bytes_sent_for(const std::string& purpose) const;
  // Exchanges this rank has completed: rounds of sending to and receiving from a peer, each of
  // which waits for the one before it. A message's latency is paid once per exchange, so on a
  // slow or distant link this, not bytes, is what a small collective costs. (NCCL does not say
  // how many it makes: its group counts none.)
  uint64_t exchanges() const { return exchanges_.load(); }
  // CPU seconds the group's communication thread has spent running collectives, and the times it
  // woke from a sleep to look for a message. Where ranks share cores this is what communication
  // takes from compute in the process itself. (Groups without such a thread count neither.)
  double communication_cpu_s() const { return 1e-9 * static_cast<double>(comm_cpu_ns_.load()); }
  uint64_t wakeups() const { return wakeups_.load(); }

 protected:
  void count_bytes(const std::string& collective, uint64_t bytes);
  // Part of bytes already counted, for a segment with a purpose.
  void count_purpose(const char* purpose, uint64_t bytes);
  void count_exchange() { ++exchanges_; }
  void count_communication_cpu(double seconds) {
    comm_cpu_ns_ += static_cast<uint64_t>(std::max(0.0, seconds) * 1e9);
  }
  void count_wakeup() { ++wakeups_; }

 private:
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> exchanges_{0};
  std::atomic<uint64_t> comm_cpu_ns_{0};
  std::atomic<uint64_t> wakeups_{0};
  std::atomic<AllReduceAlgorithm> algorithm_{AllReduceAlgorithm::automatic};
  std::atomic<PackedWire> packed_wire_{PackedWire::coded};
  std::atomic<double> timeout_s_{0.0};
  mutable std::mutex bytes_mutex_;
  std::map<std::string, uint64_t> bytes_by_collective_;
  std::map<std::string, uint64_t> bytes_by_purpose_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// Refuses a segment whose PackedSum does not describe its tensor, or whose sums over `world`
// ranks would overflow its fields.
void check_packed_sum(const ReduceSegment& segment, int world);

// Raises the group's timeout by `extra_s` for one scope, for collectives launched within it, where
// a peer is known to be busy for about that long (scoring a pruning event, writing a checkpoint);
// puts it back after. No timeout (0) stays none.
class TimeoutAllowance {
 public:
  TimeoutAllowance(ProcessGroup& group, double extra_s)
      : group_(group), before_(group.timeout_s()) {
    if (before_ > 0) group_.set_timeout(before_ + extra_s);
  }
  ~TimeoutAllowance() { group_.set_timeout(before_); }
  TimeoutAllowance(const TimeoutAllowance&) = delete;
  TimeoutAllowance& operator=(const TimeoutAllowance&) = delete;

 private:
  ProcessGroup& group_;
  double before_;
};

// A Work that is done when every one of `works` is (waits for them in order).
WorkPtr all_of(std::vector<WorkPtr> works);

// True when `failed` is true on any rank (one 4-byte all-reduce): after a part of a shared step
// that can fail on one rank alone (scoring a pruning event, writing a checkpoint), every rank
// learns it and all stop together.
bool any_rank_failed(ProcessGroup& group, bool failed);

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
