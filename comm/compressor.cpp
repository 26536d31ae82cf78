#include "comm/compressor.h"

#include <chrono>

namespace pac::comm {

void Compressor::timed(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  ++kernels_;
  codec_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Compressor::keep_for_undo(const Tensor& state) {
  Undo& u = undo_tensors_[state.raw_data()];
  if (!u.copy.defined() || u.copy.numel() != state.numel()) {
    u.state = state;
    u.copy = Tensor::empty(state.shape(), state.dtype(), state.device());
  }
  u.copy.copy_(state);
  u.armed = true;
}

void Compressor::keep_for_undo(uint64_t& counter) {
  undo_unsigned_.emplace_back(&counter, counter);
}
void Compressor::keep_for_undo(int64_t& counter) { undo_signed_.emplace_back(&counter, counter); }

void Compressor::end_step(bool applied) {
  // A state not recorded this step belongs to a layout that is gone (a bucket re-laid out at a
  // mask change): its entry, which would keep the state and its copy allocated, goes.
  for (auto it = undo_tensors_.begin(); it != undo_tensors_.end();) {
    Undo& u = it->second;
    if (!u.armed) {
      it = undo_tensors_.erase(it);
      continue;
    }
    if (!applied) u.state.copy_(u.copy);
    u.armed = false;
    ++it;
  }
  // In reverse, so a counter recorded twice gets its oldest value.
  if (!applied) {
    for (auto it = undo_unsigned_.rbegin(); it != undo_unsigned_.rend(); ++it)
      *it->first = it->second;
    for (auto it = undo_signed_.rbegin(); it != undo_signed_.rend(); ++it) *it->first = it->second;
  }
  undo_unsigned_.clear();
  undo_signed_.clear();
}

std::string bucket_state_key(int bucket, const std::string& what) {
  return "bucket" + std::to_string(bucket) + "." + what;
}

void save_per_bucket(StateDict& out, const std::string& what,
                     const std::map<int, Tensor>& tensors) {
  for (const auto& [index, t] : tensors) out[bucket_state_key(index, what)] = t;
}

void save_per_bucket(StateDict& out, const std::string& what,
                     const std::map<int, uint64_t>& counters) {
  for (const auto& [index, n] : counters)
    out[bucket_state_key(index, what)] = counter_tensor(static_cast<int64_t>(n));
}

void load_per_bucket(StateReader& read, const std::string& what, const std::vector<Bucket>& buckets,
                     std::map<int, Tensor>& tensors) {
  for (const auto& bucket : buckets) {
    std::string key = bucket_state_key(bucket.index, what);
    // A checkpoint is read into host memory; the state lives where its bucket does.
    if (read.has(key))
      tensors[bucket.index] = read.tensor(key, bucket.flat.shape()).to(bucket.flat.device());
  }
}

void load_per_bucket(StateReader& read, const std::string& what, const std::vector<Bucket>& buckets,
                     std::map<int, uint64_t>& counters) {
  for (const auto& bucket : buckets) {
    std::string key = bucket_state_key(bucket.index, what);
    if (read.has(key)) counters[bucket.index] = static_cast<uint64_t>(read.counter(key));
  }
}

void Compressor::load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                            ProcessGroup& group) {
  (void)buckets, (void)group;
  StateReader("compressor " + name(), state).finish();  // a stateless compressor takes none
}

namespace {

class ThenWork : public Work {
 public:
  ThenWork(WorkPtr inner, std::function<void()> after)
      : inner_(std::move(inner)), after_(std::move(after)) {}
  void wait() override {
    inner_->wait();
    if (after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
  }

 private:
  WorkPtr inner_;
  std::function<void()> after_;
};

}  // namespace

WorkPtr all_reduce_with_riders(Bucket& bucket, ProcessGroup& group,
                               std::vector<ReduceSegment> segments) {
  for (auto& rider : bucket.riders) segments.push_back(rider);
  bucket.riders.clear();
  return group.all_reduce_coalesced(std::move(segments));
}

WorkPtr then(WorkPtr inner, std::function<void()> after) {
  return std::make_shared<ThenWork>(std::move(inner), std::move(after));
}

}  // namespace pac::comm
