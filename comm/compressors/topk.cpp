// topk (Top-k sparsification with error feedback): every rank adds its residual to the gradient,
// keeps its own k = ratio * n entries of largest magnitude, and all-gathers their values and
// indices; the average is scattered back. What was not sent stays in the residual for the next
// step. 1-D parameters (biases, norms) are all-reduced densely, as DGC does.
// Deep Gradient Compression's options (Lin et al. 2018):
//   momentum=M     momentum correction: accumulate the velocity u = M u + g instead of g, so the
//                  momentum is applied before sparsification; the optimizer's momentum (give
//                  the same M) then moves only the weight decay, as in DGC's optimizer;
//   masking=B      momentum factor masking: clear u where an entry was sent (default true);
//   warmup_steps=N the density falls exponentially from 25% to `ratio` over the first N steps;
//   warmup_epochs=E, epoch_steps=S
//                  the paper's warm-up, by epoch: densities 25%, 6.25%, 1.5625%, 0.39%, ...
//                  (sparsity 75%, 93.75%, 98.4375%, 99.6%), each for one epoch of S steps, for
//                  the first E epochs, then `ratio` (99.9% sparsity: ratio=0.001);
//   clip=C         local gradient clipping to norm C / sqrt(world size) before accumulating.
// On GPU buckets the same steps run as kernels (topk_kernels.h): a radix select instead of
// nth_element, the same values and indices on the wire.
#include <algorithm>
#include <cmath>

#include "comm/compressors/builtin.h"
#include "comm/compressors/topk_kernels.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

class TopK : public Compressor {
 public:
  struct Options {
    double ratio = 0.01, momentum = 0.0, clip = 0.0;
    bool masking = true;
    int64_t warmup_steps = 0;
    int64_t warmup_epochs = 0, epoch_steps = 0;
  };
  explicit TopK(const Options& options) : o_(options) {}
  std::string name() const override { return "topk"; }
  bool runs_on_gpu() const override { return true; }
  bool applies_momentum() const override { return o_.momentum > 0.0; }

  // A weight sends its ratio of values as (index, value) pairs; a 1-D parameter goes dense.
  double wire_bytes_per_value(const nn::Parameter& p, int) const override {
    return p.shape().size() <= 1 ? 4.0 : 8.0 * o_.ratio;
  }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    if (bucket.flat.is_cuda()) return reduce_on_gpu(bucket, group);
    Tensor flat = bucket.flat;
    State& st = state_for(bucket);
    const int64_t k = next_k(st);
    int world = group.size();
    auto values = Tensor::empty({k}), indices = Tensor::empty({k}, DType::i32);
    auto dense = Tensor::empty({static_cast<int64_t>(st.dense_positions.size())});
    timed([&] {
      keep_for_undo(st.residual);
      if (o_.momentum > 0.0) keep_for_undo(st.velocity);
      float* acc = flat.data<float>();
      float* r = st.residual.data<float>();
      int64_t n = flat.numel();
      if (o_.clip > 0.0) {
        double norm = 0.0;
        for (int64_t i = 0; i < n; ++i) norm += double(acc[i]) * acc[i];
        double limit = o_.clip / std::sqrt(static_cast<double>(world));
        if (std::sqrt(norm) > limit) {
          float scale = static_cast<float>(limit / (std::sqrt(norm) + 1e-12));
          for (int64_t i = 0; i < n; ++i) acc[i] *= scale;
        }
      }
      if (o_.momentum > 0.0) {  // momentum correction: accumulate the velocity
        float* u = st.velocity.data<float>();
        float m = static_cast<float>(o_.momentum);
        for (int64_t i = 0; i < n; ++i) acc[i] = u[i] = m * u[i] + acc[i];
      }
      for (int64_t i = 0; i < n; ++i) acc[i] += r[i];
      std::vector<int32_t> order(st.sparse_positions);
      std::nth_element(order.begin(), order.begin() + k, order.end(),
                       [&](int32_t a, int32_t b) { return std::abs(acc[a]) > std::abs(acc[b]); });
      std::copy(acc, acc + n, r);  // everything is residual until it is sent
      float* u = o_.momentum > 0.0 && o_.masking ? st.velocity.data<float>() : nullptr;
      for (int64_t j = 0; j < k; ++j) {
        values.data<float>()[j] = acc[order[j]];
        indices.data<int32_t>()[j] = order[j];
        r[order[j]] = 0.0f;
        if (u) u[order[j]] = 0.0f;  // momentum factor masking
      }
      for (size_t j = 0; j < st.dense_positions.size(); ++j) {
        dense.data<float>()[j] = acc[st.dense_positions[j]];
        r[st.dense_positions[j]] = 0.0f;
      }
    });
    auto all_values = Tensor::empty({k * world}),
         all_indices = Tensor::empty({k * world}, DType::i32);
    std::vector<WorkPtr> pending{group.all_gather(values, all_values),
                                 group.all_gather(indices, all_indices)};
    if (dense.numel() > 0) pending.push_back(group.all_reduce(dense, ReduceOp::avg));
    auto last = pending.back();
    return then(last, [this, flat, all_values, all_indices, dense, pending, world, &st]() mutable {
      for (auto& w : pending) w->wait();
      timed([&] {
        flat.zero_();
        float* out = flat.data<float>();
        float share = 1.0f / static_cast<float>(world);
        for (int64_t j = 0, m = all_values.numel(); j < m; ++j) {
          out[all_indices.data<int32_t>()[j]] += all_values.data<float>()[j] * share;
        }
        for (size_t j = 0; j < st.dense_positions.size(); ++j) {
          out[st.dense_positions[j]] = dense.data<float>()[j];
        }
      });
    });
  }

  StateDict state() const override {
    StateDict out;
    for (const auto& [index, st] : states_) {
      out[bucket_state_key(index, "residual")] = st.residual;
      out[bucket_state_key(index, "velocity")] = st.velocity;
      out[bucket_state_key(index, "steps")] = counter_tensor(st.steps);
    }
    return out;
  }

  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup&) override {
    StateReader read("compressor topk", state);
    for (const auto& bucket : buckets) {
      if (!read.has(bucket_state_key(bucket.index, "steps"))) continue;
      State& st = state_for(bucket);
      read.copy_into(bucket_state_key(bucket.index, "residual"), st.residual);
      read.copy_into(bucket_state_key(bucket.index, "velocity"), st.velocity);
      st.steps = read.counter(bucket_state_key(bucket.index, "steps"));
    }
    read.finish();
  }

  // The residual and the momentum-corrected velocity are each rank's own; the step count (the
  // warm-up's clock) is every rank's.
  RankStateRule rank_state_rule(const std::string& what) const override {
    return what == "steps" ? RankStateRule::shared : RankStateRule::mean;
  }

  // Residual, velocity and positions were laid out for the old sizes; the step count (the
  // warm-up's clock) stays.
  void layout_changed(const Bucket& bucket) override {
    auto it = states_.find(bucket.index);
    if (it == states_.end()) return;
    int64_t steps = it->second.steps;
    it->second = State();
    it->second.steps = steps;
  }

 private:
  struct State {
    Tensor residual, velocity;
    std::vector<int32_t> sparse_positions, dense_positions;
    Tensor sparse_on_device, dense_on_device;  // the same positions, for GPU buckets
    int64_t steps = 0;
  };

  // This step's k, from the warm-up's density; advances the step count.
  int64_t next_k(State& st) {
    keep_for_undo(st.steps);
    const int64_t candidates = static_cast<int64_t>(st.sparse_positions.size());
    const double density = density_at(st.steps++);
    if (candidates == 0) return 0;
    return std::clamp<int64_t>(static_cast<int64_t>(density * candidates), 1, candidates);
  }

  // The CPU path's steps as kernels, with nothing copied to or from the host.
  WorkPtr reduce_on_gpu(Bucket& bucket, ProcessGroup& group) {
    const Device device = bucket.flat.device();
    Tensor flat = bucket.flat;
    State& st = state_for(bucket);
    if (st.residual.device() != device) {  // from a checkpoint, or a first step
      st.residual = st.residual.to(device);
      st.velocity = st.velocity.to(device);
    }
    if (!st.sparse_on_device.defined()) {
      st.sparse_on_device = on_device(st.sparse_positions, device);
      st.dense_on_device = on_device(st.dense_positions, device);
    }
    const int64_t k = next_k(st), m = st.sparse_on_device.numel();
    const int world = group.size();
    auto values = Tensor::empty({k}, DType::f32, device);
    auto indices = Tensor::empty({k}, DType::i32, device);
    auto dense = Tensor::empty({st.dense_on_device.numel()}, DType::f32, device);
    timed([&] {
      keep_for_undo(st.residual);
      if (o_.momentum > 0.0) keep_for_undo(st.velocity);
      Tensor sum_squares;
      if (o_.clip > 0.0) sum_squares = sum(mul(flat, flat));
      gpu::topk_accumulate(flat.data<float>(), flat.numel(),
                           o_.clip > 0.0 ? sum_squares.data<float>() : nullptr,
                           static_cast<float>(o_.clip / std::sqrt(static_cast<double>(world))),
                           o_.momentum > 0.0 ? st.velocity.data<float>() : nullptr,
                           static_cast<float>(o_.momentum), st.residual.data<float>());
      if (k > 0) {
        Tensor scratch = Tensor::empty({gpu::topk_select_scratch_bytes(m)}, DType::u8, device);
        gpu::topk_select(flat.data<float>(), st.sparse_on_device.data<int32_t>(), m, k,
                         indices.data<int32_t>(), scratch.data<uint8_t>());
        gpu::topk_take(flat.data<float>(), indices.data<int32_t>(), k, values.data<float>(),
                       st.residual.data<float>(),
                       o_.momentum > 0.0 && o_.masking ? st.velocity.data<float>() : nullptr);
      }
      gpu::topk_take(flat.data<float>(), st.dense_on_device.data<int32_t>(), dense.numel(),
                     dense.data<float>(), st.residual.data<float>(), nullptr);
    });
    auto all_values = Tensor::empty({k * world}, DType::f32, device),
         all_indices = Tensor::empty({k * world}, DType::i32, device);
    std::vector<WorkPtr> pending{group.all_gather(values, all_values),
                                 group.all_gather(indices, all_indices)};
    if (dense.numel() > 0) pending.push_back(group.all_reduce(dense, ReduceOp::avg));
    auto last = pending.back();
    Tensor dense_positions = st.dense_on_device;
    return then(last, [this, flat, all_values, all_indices, dense, dense_positions, pending, k,
                       world]() mutable {
      for (auto& w : pending) w->wait();
      timed([&] {
        flat.zero_();
        // Rank by rank, as the CPU path sums them: within one rank the indices are distinct.
        const float share = 1.0f / static_cast<float>(world);
        for (int r = 0; r < world; ++r) {
          gpu::topk_scatter_add(all_values.data<float>() + r * k,
                                all_indices.data<int32_t>() + r * k, k, share, flat.data<float>());
        }
        gpu::topk_scatter(dense.data<float>(), dense_positions.data<int32_t>(), dense.numel(),
                          flat.data<float>());
      });
    });
  }

  static Tensor on_device(const std::vector<int32_t>& positions, Device device) {
    Tensor t = Tensor::empty({static_cast<int64_t>(positions.size())}, DType::i32);
    std::copy(positions.begin(), positions.end(), t.data<int32_t>());
    return t.to(device);
  }

  // DGC's warm-up: 25%, then exponentially down to the target density over warmup_steps; or by
  // epoch, a quarter of the previous epoch's density, for warmup_epochs epochs.
  double density_at(int64_t step) const {
    if (o_.warmup_epochs > 0) {
      const int64_t epoch = step / o_.epoch_steps;
      if (epoch >= o_.warmup_epochs) return o_.ratio;
      return std::max(o_.ratio, 0.25 * std::pow(0.25, static_cast<double>(epoch)));
    }
    if (step >= o_.warmup_steps || o_.ratio >= 0.25) return o_.ratio;
    double progress = static_cast<double>(step) / static_cast<double>(o_.warmup_steps);
    return 0.25 * std::pow(o_.ratio / 0.25, progress);
  }

  State& state_for(const Bucket& bucket) {
    State& st = states_[bucket.index];
    if (st.residual.defined()) return st;
    st.residual = Tensor::zeros(bucket.flat.shape());
    st.velocity = Tensor::zeros(bucket.flat.shape());
    for (const auto& e : bucket.entries) {
      auto& positions = e.param->shape().size() <= 1 ? st.dense_positions : st.sparse_positions;
      for (int64_t i = 0; i < e.numel; ++i) positions.push_back(static_cast<int32_t>(e.offset + i));
    }
    return st;
  }

  Options o_;
  std::map<int, State> states_;
};

}  // namespace

std::unique_ptr<Compressor> make_topk(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "topk", options);
  TopK::Options o;
  o.ratio = read.number("ratio", 0.01);
  o.momentum = read.number("momentum", 0.0);
  o.masking = read.flag("masking", true);
  o.warmup_steps = read.integer("warmup_steps", 0);
  o.clip = read.number("clip", 0.0);
  o.warmup_epochs = read.integer("warmup_epochs", 0);
  o.epoch_steps = read.integer("epoch_steps", 0);
  read.finish();
  PAC_CHECK(o.warmup_epochs >= 0 && (o.warmup_epochs == 0 || o.epoch_steps > 0),
            "topk: warmup_epochs={} needs epoch_steps=S, the steps of one epoch (> 0), got {}",
            o.warmup_epochs, o.epoch_steps);
  PAC_CHECK(o.warmup_epochs == 0 || o.warmup_steps == 0,
            "topk: give warmup_steps or warmup_epochs, not both");
  PAC_CHECK(o.ratio > 0.0 && o.ratio <= 1.0, "topk: ratio must be in (0, 1], got {}", o.ratio);
  PAC_CHECK(o.momentum >= 0.0 && o.momentum < 1.0, "topk: momentum must be in [0, 1), got {}",
            o.momentum);
  PAC_CHECK(o.warmup_steps >= 0 && o.clip >= 0.0, "topk: warmup_steps and clip must be >= 0");
  return std::make_unique<TopK>(o);
}

}  // namespace pac::comm
