// randomk: each step every rank keeps the same k = ratio * n random coordinates of the bucket (the
// indices come from a generator seeded by (seed, step, bucket), so no index is ever sent) and
// all-reduces just those k values. With error feedback (the default) what was not sent is kept in
// a residual and added to the next gradient; without it the kept values are scaled by n / k, which
// makes the estimate unbiased.
#include <algorithm>

#include "comm/compressors/builtin.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

class RandomK : public Compressor {
 public:
  RandomK(double ratio, bool error_feedback, uint64_t seed)
      : ratio_(ratio), error_feedback_(error_feedback), seed_(seed) {}
  std::string name() const override { return "randomk"; }

  // The indices are drawn on the host (the same on every rank and device); everything else is
  // an op on the bucket's device, so GPU buckets never visit the host.
  bool runs_on_gpu() const override { return true; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Tensor flat = bucket.flat;
    const Device device = flat.device();
    int64_t n = flat.numel();
    int64_t k = std::clamp<int64_t>(static_cast<int64_t>(ratio_ * n), 1, n);
    Tensor index;  // i32 [k]: the chosen positions, ascending
    Tensor values = Tensor::empty({k}, DType::f32, device);
    keep_for_undo(steps_[bucket.index]);
    timed([&] {
      if (error_feedback_) keep_for_undo(residual_for(bucket));
      uint64_t step = steps_[bucket.index]++;
      Generator g(seed_ ^ (step * 0x9e3779b97f4a7c15ull) ^ (uint64_t(bucket.index) << 48));
      // Floyd's sampling: k distinct indices in O(k) draws.
      std::vector<int64_t> chosen;
      chosen.reserve(k);
      std::vector<bool> taken(n, false);
      for (int64_t j = n - k; j < n; ++j) {
        int64_t t = static_cast<int64_t>(g.below(j + 1));
        if (taken[t]) t = j;
        taken[t] = true;
        chosen.push_back(t);
      }
      std::sort(chosen.begin(), chosen.end());
      // Pinned for a GPU bucket: the copy is then queued on the stream instead of waited for.
      Tensor host =
          device.is_cpu() ? Tensor::empty({k}, DType::i32) : Tensor::empty_pinned({k}, DType::i32);
      for (int64_t j = 0; j < k; ++j) host.data<int32_t>()[j] = static_cast<int32_t>(chosen[j]);
      index = host.to(device);
      if (error_feedback_) add_(flat, residual_for(bucket));
      index_gather_(values, flat, index);
      if (!error_feedback_) scale_(values, static_cast<float>(n) / static_cast<float>(k));
      if (error_feedback_) {
        // The residual is everything not sent this step.
        Tensor& residual = residual_for(bucket);
        residual.copy_(flat);
        index_scatter_(residual, Tensor::zeros({k}, DType::f32, device), index);
      }
    });
    return then(group.all_reduce(values, ReduceOp::avg), [this, flat, values, index]() mutable {
      timed([&] {
        flat.zero_();
        index_scatter_(flat, values, index);
      });
    });
  }

  StateDict state() const override {
    StateDict out;
    save_per_bucket(out, "residual", residuals_);
    save_per_bucket(out, "steps", steps_);
    return out;
  }

  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup&) override {
    StateReader read("compressor randomk", state);
    load_per_bucket(read, "residual", buckets, residuals_);
    load_per_bucket(read, "steps", buckets, steps_);
    read.finish();
  }

  // The step count picks the coordinates on every rank alike; the residual is each rank's own.
  RankStateRule rank_state_rule(const std::string& what) const override {
    return what == "residual" ? RankStateRule::mean : RankStateRule::shared;
  }

  // The residual was laid out for the old sizes; the step counter stays.
  void layout_changed(const Bucket& bucket) override { residuals_.erase(bucket.index); }

 private:
  Tensor& residual_for(const Bucket& bucket) {
    Tensor& r = residuals_[bucket.index];
    if (!r.defined()) r = Tensor::zeros(bucket.flat.shape(), DType::f32, bucket.flat.device());
    return r;
  }

  double ratio_;
  bool error_feedback_;
  uint64_t seed_;
  std::map<int, Tensor> residuals_;
  std::map<int, uint64_t> steps_;
};

}  // namespace

std::unique_ptr<Compressor> make_randomk(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "randomk", options);
  double ratio = read.number("ratio", 0.01);
  bool error_feedback = read.flag("error_feedback", true);
  auto seed = static_cast<uint64_t>(read.integer("seed", 0));
  read.finish();
  PAC_CHECK(ratio > 0.0 && ratio <= 1.0, "randomk: ratio must be in (0, 1], got {}", ratio);
  return std::make_unique<RandomK>(ratio, error_feedback, seed);
}

}  // namespace pac::comm
