// topk (Top-k sparsification with error feedback, as in Lin et al.'s DGC without its extra
// options): every rank adds its residual to the gradient, keeps its own k = ratio * n entries of
// largest magnitude, and all-gathers their values and indices; the average is scattered back.
// What was not sent stays in the residual for the next step. 1-D parameters (biases, norms) are
// all-reduced densely, as DGC does: they are small and sensitive.
#include <algorithm>
#include <cmath>

#include "comm/compressors/builtin.h"
#include "comm/compressors/options.h"

namespace pac::comm {

namespace {

class TopK : public Compressor {
 public:
  explicit TopK(double ratio) : ratio_(ratio) {}
  std::string name() const override { return "topk"; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Tensor flat = bucket.flat;
    State& st = state_for(bucket);
    int64_t candidates = static_cast<int64_t>(st.sparse_positions.size());
    int64_t k = candidates
                    ? std::clamp<int64_t>(static_cast<int64_t>(ratio_ * candidates), 1, candidates)
                    : 0;
    int world = group.size();
    auto values = Tensor::empty({k}), indices = Tensor::empty({k}, DType::i32);
    auto dense = Tensor::empty({static_cast<int64_t>(st.dense_positions.size())});
    timed([&] {
      float* acc = flat.data<float>();
      float* r = st.residual.data<float>();
      for (int64_t i = 0, n = flat.numel(); i < n; ++i) acc[i] += r[i];
      std::vector<int32_t> order(st.sparse_positions);
      std::nth_element(order.begin(), order.begin() + k, order.end(),
                       [&](int32_t a, int32_t b) { return std::abs(acc[a]) > std::abs(acc[b]); });
      std::copy(acc, acc + flat.numel(), r);  // everything is residual until it is sent
      for (int64_t j = 0; j < k; ++j) {
        values.data<float>()[j] = acc[order[j]];
        indices.data<int32_t>()[j] = order[j];
        r[order[j]] = 0.0f;
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

 private:
  struct State {
    Tensor residual;
    std::vector<int32_t> sparse_positions, dense_positions;
  };

  State& state_for(const Bucket& bucket) {
    State& st = states_[bucket.index];
    if (st.residual.defined()) return st;
    st.residual = Tensor::zeros(bucket.flat.shape());
    for (const auto& e : bucket.entries) {
      auto& positions = e.param->shape().size() <= 1 ? st.dense_positions : st.sparse_positions;
      for (int64_t i = 0; i < e.numel; ++i) positions.push_back(static_cast<int32_t>(e.offset + i));
    }
    return st;
  }

  double ratio_;
  std::map<int, State> states_;
};

}  // namespace

std::unique_ptr<Compressor> make_topk(const CompressorOptions& options) {
  OptionReader read("topk", options);
  double ratio = read.number("ratio", 0.01);
  read.finish();
  PAC_CHECK(ratio > 0.0 && ratio <= 1.0, "topk: ratio must be in (0, 1], got {}", ratio);
  return std::make_unique<TopK>(ratio);
}

}  // namespace pac::comm
