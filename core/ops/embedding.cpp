// Embedding lookup: row i of the table for every index i. Backward scatters (adds) the output
// gradient rows back into a table-shaped gradient.
#include <cstring>
#include <vector>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

// On the GPU the indices stay there; an out-of-range one gives NaN rows instead of an error,
// since the device cannot throw (the trainer's finiteness check reports it).
class EmbeddingBackwardCuda : public Node {
 public:
  EmbeddingBackwardCuda(Shape table, Tensor indices)
      : table_(std::move(table)), indices_(std::move(indices)) {}
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gw = detail::zeros_on(table_, g);
    cuda::embedding_backward(g.data<float>(), indices_.raw_data(), indices_.dtype() == DType::i64,
                             gw.data<float>(), indices_.numel(), table_[1], table_[0]);
    return {gw};
  }

 private:
  Shape table_;
  Tensor indices_;
};

class EmbeddingBackward : public Node {
 public:
  EmbeddingBackward(Shape table, std::vector<int64_t> rows)
      : table_(std::move(table)), rows_(std::move(rows)) {}
  std::string name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gw = Tensor::zeros(table_);
    int64_t d = table_[1];
    const float* pg = g.data<float>();
    float* out = gw.data<float>();
    for (size_t i = 0; i < rows_.size(); ++i) {
      for (int64_t j = 0; j < d; ++j) out[rows_[i] * d + j] += pg[i * d + j];
    }
    return {gw};
  }

 private:
  Shape table_;
  std::vector<int64_t> rows_;
};

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_float(weight, "embedding", "weight");
  PAC_CHECK(weight.dim() == 2, "embedding: weight must be [V, D], got {}", weight.str());
  PAC_CHECK(indices.defined() && (indices.dtype() == DType::i64 || indices.dtype() == DType::i32),
            "embedding: indices must be i32 or i64, got {}",
            indices.defined() ? indices.str() : "undefined");
  detail::check_same_device(weight, indices, "embedding", "indices");
  int64_t v = weight.size(0), d = weight.size(1);
  if (weight.is_cuda()) {
    Shape out_shape = indices.shape();
    out_shape.push_back(d);
    Tensor out = detail::empty_on(out_shape, weight);
    cuda::embedding_forward(weight.data<float>(), indices.raw_data(), indices.dtype() == DType::i64,
                            out.data<float>(), indices.numel(), d, v);
    if (any_requires_grad({weight})) {
      detail::record(out, {weight},
                     std::make_shared<EmbeddingBackwardCuda>(weight.shape(), indices.detach()));
    }
    return out;
  }
  std::vector<int64_t> rows(indices.numel());
  for (int64_t i = 0, count = indices.numel(); i < count; ++i) {
    rows[i] =
        indices.dtype() == DType::i64 ? indices.data<int64_t>()[i] : indices.data<int32_t>()[i];
    PAC_CHECK(rows[i] >= 0 && rows[i] < v, "embedding: index {} at position {} is outside [0, {})",
              rows[i], i, v);
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(out.data<float>() + i * d, weight.data<float>() + rows[i] * d, d * sizeof(float));
  }
  if (any_requires_grad({weight})) {
    detail::record(out, {weight},
                   std::make_shared<EmbeddingBackward>(weight.shape(), std::move(rows)));
  }
  return out;
}

}  // namespace pac
