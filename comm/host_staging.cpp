#include "comm/host_staging.h"

#include <map>

namespace pac::comm {

namespace {

class HostStaged : public Compressor {
 public:
  explicit HostStaged(std::unique_ptr<Compressor> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::string describe_buckets() const override { return inner_->describe_buckets(); }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Bucket& mirror = mirror_of(bucket);
    timed([&] { mirror.flat.copy_(bucket.flat); });  // waits for the GPU to finish the gradient
    // The inner compressor's encode runs now and its decode when the work is waited for; both
    // count as this compressor's codec time and passes.
    double codec_before = inner_->codec_seconds();
    uint64_t kernels_before = inner_->kernels();
    WorkPtr work = inner_->reduce(mirror, group);
    return then(work, [this, &bucket, &mirror, codec_before, kernels_before] {
      timed([&] { bucket.flat.copy_(mirror.flat); });
      codec_seconds_ += inner_->codec_seconds() - codec_before;
      kernels_ += inner_->kernels() - kernels_before;
    });
  }

  double wire_bytes_per_value(const nn::Parameter& p, int world) const override {
    return inner_->wire_bytes_per_value(p, world);
  }
  void layout_changed(const Bucket& bucket) override {
    mirrors_.erase(bucket.index);
    inner_->layout_changed(mirror_of(bucket));
  }
  void end_step(bool applied) override {
    inner_->end_step(applied);
    Compressor::end_step(applied);
  }

  StateDict state() const override { return inner_->state(); }
  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup& group) override {
    std::vector<Bucket> mirrors;
    for (const Bucket& b : buckets) mirrors.push_back(mirror_of(b));
    inner_->load_state(state, mirrors, group);
  }

 private:
  // The host copy of a bucket: same index and entries, its flat buffer in pinned memory (plain
  // host memory for a bucket already there, which only tests do).
  Bucket& mirror_of(const Bucket& bucket) {
    auto it = mirrors_.find(bucket.index);
    if (it != mirrors_.end()) return it->second;
    Bucket mirror;
    mirror.index = bucket.index;
    mirror.entries = bucket.entries;
    mirror.flat = Tensor::zeros(bucket.flat.shape());
    if (bucket.flat.is_cuda()) mirror.flat = mirror.flat.pin_memory();
    return mirrors_.emplace(bucket.index, std::move(mirror)).first->second;
  }

  std::unique_ptr<Compressor> inner_;
  std::map<int, Bucket> mirrors_;  // a map: pending work holds references to its mirror
};

}  // namespace

std::unique_ptr<Compressor> stage_on_host(std::unique_ptr<Compressor> inner) {
  return std::make_unique<HostStaged>(std::move(inner));
}

}  // namespace pac::comm
