// signsgd: EF-signSGD (Karimireddy et al. 2019, "Error feedback fixes SignSGD and other gradient
// compression schemes"). Each rank adds its residual to the gradient, p = g + e, and sends one
// bit per entry, the sign of p, with one scale, mean |p|; it keeps what that loses,
// e = p - scale * sign(p), for the next step. Signs cannot be summed as bits, so the ranks
// all-gather [scale | sign bits] (1/32 of dense's bytes per rank, times P - 1 on a ring) and each
// decodes the average of scale_r * sign_r. Options: error_feedback (default true). On GPU buckets
// the message is built and read by kernels (signsgd_kernels.h), the same bytes as on the CPU.
#include <cmath>
#include <cstring>
#include <map>

#include "comm/compressors/builtin.h"
#include "comm/compressors/signsgd_kernels.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

class SignSgd : public Compressor {
 public:
  explicit SignSgd(bool error_feedback) : error_feedback_(error_feedback) {}
  std::string name() const override { return "signsgd"; }
  bool runs_on_gpu() const override { return true; }
  double wire_bytes_per_value(const nn::Parameter&, int) const override { return 1.0 / 8; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    if (bucket.flat.is_cuda()) return reduce_on_gpu(bucket, group);
    const int64_t n = bucket.flat.numel();
    const int64_t message = 4 + (n + 7) / 8;  // bytes: the scale, then the sign bits
    Tensor& residual = residuals_[bucket.index];
    if (!residual.defined()) residual = Tensor::zeros({n});
    Tensor mine = Tensor::zeros({message}, DType::u8);
    Tensor all = Tensor::empty({message * group.size()}, DType::u8);
    timed([&] {
      if (error_feedback_) keep_for_undo(residual);
      float* g = bucket.flat.data<float>();
      float* e = residual.data<float>();
      double l1 = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        if (error_feedback_) g[i] += e[i];  // p = g + e, built in the bucket
        l1 += std::abs(g[i]);
      }
      float scale = static_cast<float>(l1 / std::max<int64_t>(n, 1));
      uint8_t* out = mine.data<uint8_t>();
      std::memcpy(out, &scale, 4);
      for (int64_t i = 0; i < n; ++i) {
        bool negative = g[i] < 0.0f;
        if (negative) out[4 + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        if (error_feedback_) e[i] = g[i] - (negative ? -scale : scale);
      }
    });
    int world = group.size();
    Tensor flat = bucket.flat;
    return then(group.all_gather(mine, all), [this, flat, all, n, message, world]() mutable {
      timed([&] {
        float* g = flat.data<float>();
        std::fill(g, g + n, 0.0f);
        for (int r = 0; r < world; ++r) {
          const uint8_t* in = all.data<uint8_t>() + r * message;
          float scale;
          std::memcpy(&scale, in, 4);
          float share = scale / static_cast<float>(world);
          for (int64_t i = 0; i < n; ++i) g[i] += (in[4 + i / 8] >> (i % 8)) & 1u ? -share : share;
        }
      });
    });
  }

  StateDict state() const override {
    StateDict out;
    save_per_bucket(out, "residual", residuals_);
    return out;
  }

  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup&) override {
    StateReader read("compressor signsgd", state);
    load_per_bucket(read, "residual", buckets, residuals_);
    read.finish();
  }

  // Its only state, the residual, is each rank's own.
  RankStateRule rank_state_rule(const std::string&) const override { return RankStateRule::mean; }

  // The residual was laid out for the old sizes.
  void layout_changed(const Bucket& bucket) override { residuals_.erase(bucket.index); }

 private:
  WorkPtr reduce_on_gpu(Bucket& bucket, ProcessGroup& group) {
    const Device device = bucket.flat.device();
    const int64_t n = bucket.flat.numel();
    const int64_t message = 4 + (n + 7) / 8;
    Tensor& residual = residuals_[bucket.index];
    if (!residual.defined()) residual = Tensor::zeros({n}, DType::f32, device);
    if (residual.device() != device) residual = residual.to(device);  // from a checkpoint
    Tensor mine = Tensor::zeros({message}, DType::u8, device);
    Tensor all = Tensor::empty({message * group.size()}, DType::u8, device);
    Tensor flat = bucket.flat;
    timed([&] {
      if (error_feedback_) {
        keep_for_undo(residual);
        add_(flat, residual);  // p = g + e, built in the bucket
      }
      const Tensor l1 = sum(abs(flat));
      gpu::sign_pack(flat.data<float>(), l1.data<float>(), n, mine.data<uint8_t>(),
                     error_feedback_ ? residual.data<float>() : nullptr);
    });
    const int world = group.size();
    return then(group.all_gather(mine, all), [this, flat, all, n, message, world]() mutable {
      timed([&] { gpu::sign_unpack(all.data<uint8_t>(), message, world, n, flat.data<float>()); });
    });
  }

  bool error_feedback_;
  std::map<int, Tensor> residuals_;  // per bucket index: e, what the signs have not sent yet
};

}  // namespace

std::unique_ptr<Compressor> make_signsgd(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "signsgd", options);
  bool error_feedback = read.flag("error_feedback", true);
  read.finish();
  return std::make_unique<SignSgd>(error_feedback);
}

}  // namespace pac::comm
