#include "comm/process_group.h"

#include <cstdlib>

#include "comm/packed_fields.h"

namespace pac::comm {

std::map<std::string, uint64_t> ProcessGroup::bytes_by_collective() const {
  std::lock_guard<std::mutex> lock(bytes_mutex_);
  return bytes_by_collective_;
}

namespace {

class AllOf : public Work {
 public:
  explicit AllOf(std::vector<WorkPtr> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& w : works_) w->wait();
  }

 private:
  std::vector<WorkPtr> works_;
};

}  // namespace

WorkPtr all_of(std::vector<WorkPtr> works) { return std::make_shared<AllOf>(std::move(works)); }

WorkPtr ProcessGroup::all_reduce_coalesced(std::vector<ReduceSegment> segments) {
  std::vector<WorkPtr> works;
  for (auto& s : segments) works.push_back(all_reduce(s.tensor, s.op));
  return all_of(std::move(works));
}

void check_packed_sum(const ReduceSegment& s, int world) {
  const PackedSum& p = s.packed;
  if (p.values == 0) return;
  PAC_CHECK(p.bits >= 1 && p.bits <= 63 && p.rank_max >= 1,
            "all_reduce: packed fields of {} bits whose ranks add at most {} each; expected 1 to "
            "63 bits and a positive largest value",
            p.bits, p.rank_max);
  PAC_CHECK(s.tensor.dtype() == DType::i64 && s.op == ReduceOp::sum,
            "all_reduce: packed fields are summed int64 words; got {} with {}",
            dtype_name(s.tensor.dtype()), s.op == ReduceOp::max ? "max" : "avg");
  PAC_CHECK(s.tensor.numel() == packed_words(p.values, p.bits),
            "all_reduce: {} fields of {} bits fill {} words; the tensor has {}", p.values, p.bits,
            packed_words(p.values, p.bits), s.tensor.numel());
  PAC_CHECK(bits_for(p.rank_max * world) <= p.bits,
            "all_reduce: {} ranks adding up to {} each reach {}, which {}-bit fields cannot hold",
            world, p.rank_max, p.rank_max * world, p.bits);
}

uint64_t ProcessGroup::bytes_sent_for(const std::string& purpose) const {
  std::lock_guard<std::mutex> lock(bytes_mutex_);
  auto it = bytes_by_purpose_.find(purpose);
  return it == bytes_by_purpose_.end() ? 0 : it->second;
}

void ProcessGroup::count_purpose(const char* purpose, uint64_t bytes) {
  if (purpose == nullptr || bytes == 0) return;
  std::lock_guard<std::mutex> lock(bytes_mutex_);
  bytes_by_purpose_[purpose] += bytes;
}

void ProcessGroup::count_bytes(const std::string& collective, uint64_t bytes) {
  bytes_sent_ += bytes;
  std::lock_guard<std::mutex> lock(bytes_mutex_);
  bytes_by_collective_[collective] += bytes;
}

bool any_rank_failed(ProcessGroup& group, bool failed) {
  Tensor flag = Tensor::full({1}, failed ? 1.0f : 0.0f);
  group.all_reduce(flag, ReduceOp::max)->wait();
  return flag.item() != 0.0f;
}

bool all_ranks_equal(ProcessGroup& group, uint64_t value) {
  if (group.size() == 1) return true;
  // Four 16-bit pieces and their negations: max over ranks of -x is -(min of x), so the maximum
  // and the minimum arrive in one all-reduce, exact in i32.
  std::vector<float> pieces;
  for (int i = 0; i < 4; ++i) pieces.push_back(static_cast<float>((value >> (16 * i)) & 0xffff));
  for (int i = 0; i < 4; ++i) pieces.push_back(-pieces[i]);
  Tensor t = Tensor::from_vector(pieces, {8}).to(DType::i32);
  group.all_reduce(t, ReduceOp::max)->wait();
  const int32_t* v = t.data<int32_t>();
  for (int i = 0; i < 4; ++i) {
    if (v[i] != -v[i + 4]) return false;
  }
  return true;
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

ProcessGroupPtr make_process_group(const std::string& backend, Device device) {
  if (backend == "local") return make_local_group();
  if (backend == "mpi") return make_mpi_group();
  if (backend == "auto") {
    if (!launched_by_mpi()) return make_local_group();
    return device.is_cpu() ? make_mpi_group() : make_nccl_group();
  }
  if (backend == "nccl") {
    PAC_CHECK(!device.is_cpu(), "--backend nccl reduces GPU tensors; train with --device cuda");
    return make_nccl_group();
  }
  PAC_FAIL("--backend '{}' is not known; expected auto, local, mpi or nccl", backend);
}

}  // namespace pac::comm
