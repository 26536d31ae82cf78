// Parameter-free layers: activations, pooling, flattening.
#pragma once

#include "core/ops.h"
#include "layers/module.h"

namespace pac::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string describe() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::none)
      : approximation_(approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximation_); }
  std::string describe() const override {
    return approximation_ == GeluApproximation::tanh ? "GELU(tanh)" : "GELU";
  }

 private:
  GeluApproximation approximation_;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string describe() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string describe() const override { return "Sigmoid"; }
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel, int64_t stride, int64_t padding = 0)
      : kernel_(kernel), stride_(stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_); }
  std::string describe() const override {
    return fmt::format("MaxPool2d(kernel={}, stride={}, padding={})", kernel_, stride_, padding_);
  }

 private:
  int64_t kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, out_h_, out_w_); }
  std::string describe() const override {
    return fmt::format("AdaptiveAvgPool2d({}, {})", out_h_, out_w_);
  }

 private:
  int64_t out_h_, out_w_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...]
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return reshape(x, {x.size(0), -1}); }
  std::string describe() const override { return "Flatten"; }
};

}  // namespace pac::nn
