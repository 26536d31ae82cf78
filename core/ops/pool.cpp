// Pooling over [N, C, H, W]: max (remembering where each maximum came from), average with
// PyTorch's padding rule, and adaptive average with PyTorch's window boundaries. On the GPU, max
// and average pooling go through cuDNN and adaptive pooling through a custom kernel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

static void check_pool_input(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                             const char* op) {
  detail::check_float(x, op, "x");
  PAC_CHECK(x.dim() == 4, "{}: input must be [N, C, H, W], got {}", op, x.str());
  PAC_CHECK(kernel >= 1 && stride >= 1, "{}: kernel and stride must be >= 1, got {} and {}", op,
            kernel, stride);
  PAC_CHECK(padding >= 0 && 2 * padding <= kernel,
            "{}: padding must be in [0, kernel/2], got {} for kernel {}", op, padding, kernel);
  PAC_CHECK(x.size(2) + 2 * padding >= kernel && x.size(3) + 2 * padding >= kernel,
            "{}: kernel {} is larger than the padded input {}", op, kernel, x.str());
}

// --- the GPU: cuDNN's backward takes the input, the output and its gradient ---
class CudnnPoolBackward : public Node {
 public:
  CudnnPoolBackward(cuda::PoolKind kind, cuda::PoolShape shape, Tensor x, Tensor y)
      : kind_(kind), shape_(shape), x_(std::move(x)), y_(std::move(y)) {}
  std::string name() const override {
    return kind_ == cuda::PoolKind::max ? "MaxPool2dBackward" : "AvgPool2dBackward";
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = detail::empty_on(x_.shape(), g);
    cuda::pool_backward(kind_, shape_, x_.data<float>(), y_.data<float>(), g.data<float>(),
                        gx.data<float>());
    return {gx};
  }

 private:
  cuda::PoolKind kind_;
  cuda::PoolShape shape_;
  Tensor x_, y_;
};

static Tensor cudnn_pool(const Tensor& x, cuda::PoolKind kind, int64_t kernel, int64_t stride,
                         int64_t padding) {
  int64_t h = x.size(2), w = x.size(3);
  cuda::PoolShape shape{x.size(0),
                        x.size(1),
                        h,
                        w,
                        (h + 2 * padding - kernel) / stride + 1,
                        (w + 2 * padding - kernel) / stride + 1,
                        kernel,
                        stride,
                        padding};
  Tensor y = detail::empty_on({x.size(0), x.size(1), shape.out_h, shape.out_w}, x);
  cuda::pool_forward(kind, shape, x.data<float>(), y.data<float>());
  if (any_requires_grad({x})) {
    detail::record(y, {x},
                   std::make_shared<CudnnPoolBackward>(kind, shape, x.detach(), y.detach()));
  }
  return y;
}

class AdaptiveAvgPoolBackwardCuda : public Node {
 public:
  explicit AdaptiveAvgPoolBackwardCuda(Shape input) : input_(std::move(input)) {}
  std::string name() const override { return "AdaptiveAvgPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = detail::empty_on(input_, g);
    cuda::adaptive_avg_pool_backward(g.data<float>(), gx.data<float>(), input_[0] * input_[1],
                                     input_[2], input_[3], g.size(2), g.size(3));
    return {gx};
  }

 private:
  Shape input_;
};

// --- max pooling ---
class MaxPool2dBackward : public Node {
 public:
  MaxPool2dBackward(Shape input, std::vector<int64_t> argmax)
      : input_(std::move(input)), argmax_(std::move(argmax)) {}
  std::string name() const override { return "MaxPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = Tensor::zeros(input_);
    float* out = gx.data<float>();
    const float* pg = g.data<float>();
    for (size_t i = 0; i < argmax_.size(); ++i) out[argmax_[i]] += pg[i];
    return {gx};
  }

 private:
  Shape input_;
  std::vector<int64_t> argmax_;  // flat input index of each output's maximum
};

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  check_pool_input(x, kernel, stride, padding, "max_pool2d");
  if (x.is_cuda()) return cudnn_pool(x, cuda::PoolKind::max, kernel, stride, padding);
  int64_t nc = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  int64_t oh = (h + 2 * padding - kernel) / stride + 1;
  int64_t ow = (w + 2 * padding - kernel) / stride + 1;
  Tensor out = Tensor::empty({x.size(0), x.size(1), oh, ow});
  std::vector<int64_t> argmax(out.numel());
  const float* px = x.data<float>();
  float* po = out.data<float>();
  for (int64_t p = 0; p < nc; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_at = -1;
        for (int64_t ki = 0; ki < kernel; ++ki) {
          int64_t r = i * stride - padding + ki;
          if (r < 0 || r >= h) continue;
          for (int64_t kj = 0; kj < kernel; ++kj) {
            int64_t c = j * stride - padding + kj;
            if (c < 0 || c >= w) continue;
            int64_t at = (p * h + r) * w + c;
            if (best_at < 0 || px[at] > best || std::isnan(px[at])) {
              best = px[at];
              best_at = at;
            }
          }
        }
        int64_t o = (p * oh + i) * ow + j;
        po[o] = best;
        argmax[o] = best_at;
      }
    }
  }
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<MaxPool2dBackward>(x.shape(), std::move(argmax)));
  }
  return out;
}

// --- average pooling: every output is a weighted sum of a window, so one "window" description
// (start/end per axis and divisor) serves the forward, the backward and both pooling kinds. ---
namespace {
struct Window {
  int64_t begin, end;
};
struct PoolWindows {
  std::vector<Window> rows, cols;
  std::vector<float> divisor;  // per output position (oh * ow)
};
}  // namespace

static Tensor apply_windows(const Tensor& x, const PoolWindows& pw) {
  int64_t nc = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  int64_t oh = pw.rows.size(), ow = pw.cols.size();
  Tensor out = Tensor::empty({x.size(0), x.size(1), oh, ow});
  const float* px = x.data<float>();
  float* po = out.data<float>();
  for (int64_t p = 0; p < nc; ++p) {
    const float* plane = px + p * h * w;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        float acc = 0.0f;
        for (int64_t r = pw.rows[i].begin; r < pw.rows[i].end; ++r) {
          for (int64_t c = pw.cols[j].begin; c < pw.cols[j].end; ++c) acc += plane[r * w + c];
        }
        po[(p * oh + i) * ow + j] = acc / pw.divisor[i * ow + j];
      }
    }
  }
  return out;
}

class AvgPool2dBackward : public Node {
 public:
  AvgPool2dBackward(Shape input, PoolWindows windows)
      : input_(std::move(input)), windows_(std::move(windows)) {}
  std::string name() const override { return "AvgPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = Tensor::zeros(input_);
    int64_t nc = input_[0] * input_[1], h = input_[2], w = input_[3];
    int64_t oh = windows_.rows.size(), ow = windows_.cols.size();
    const float* pg = g.data<float>();
    float* out = gx.data<float>();
    for (int64_t p = 0; p < nc; ++p) {
      float* plane = out + p * h * w;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          float share = pg[(p * oh + i) * ow + j] / windows_.divisor[i * ow + j];
          for (int64_t r = windows_.rows[i].begin; r < windows_.rows[i].end; ++r) {
            for (int64_t c = windows_.cols[j].begin; c < windows_.cols[j].end; ++c) {
              plane[r * w + c] += share;
            }
          }
        }
      }
    }
    return {gx};
  }

 private:
  Shape input_;
  PoolWindows windows_;
};

static Tensor pool_with_windows(const Tensor& x, PoolWindows windows) {
  Tensor out = apply_windows(x, windows);
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<AvgPool2dBackward>(x.shape(), std::move(windows)));
  }
  return out;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                  bool count_include_pad) {
  check_pool_input(x, kernel, stride, padding, "avg_pool2d");
  if (x.is_cuda()) {
    return cudnn_pool(x,
                      count_include_pad ? cuda::PoolKind::average_include_pad
                                        : cuda::PoolKind::average_exclude_pad,
                      kernel, stride, padding);
  }
  int64_t h = x.size(2), w = x.size(3);
  int64_t oh = (h + 2 * padding - kernel) / stride + 1;
  int64_t ow = (w + 2 * padding - kernel) / stride + 1;
  PoolWindows pw;
  std::vector<int64_t> padded_rows, padded_cols;  // window sizes counting padding
  auto make_axis = [&](int64_t out, int64_t size, std::vector<Window>& axis,
                       std::vector<int64_t>& padded) {
    for (int64_t i = 0; i < out; ++i) {
      int64_t start = i * stride - padding;
      int64_t stop = std::min(start + kernel, size + padding);
      padded.push_back(stop - start);
      axis.push_back({std::max<int64_t>(start, 0), std::min(stop, size)});
    }
  };
  make_axis(oh, h, pw.rows, padded_rows);
  make_axis(ow, w, pw.cols, padded_cols);
  for (int64_t i = 0; i < oh; ++i) {
    for (int64_t j = 0; j < ow; ++j) {
      int64_t count = count_include_pad ? padded_rows[i] * padded_cols[j]
                                        : (pw.rows[i].end - pw.rows[i].begin) *
                                              (pw.cols[j].end - pw.cols[j].begin);
      pw.divisor.push_back(static_cast<float>(count));
    }
  }
  return pool_with_windows(x, std::move(pw));
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  detail::check_float(x, "adaptive_avg_pool2d", "x");
  PAC_CHECK(x.dim() == 4, "adaptive_avg_pool2d: input must be [N, C, H, W], got {}", x.str());
  PAC_CHECK(out_h >= 1 && out_w >= 1, "adaptive_avg_pool2d: output size must be >= 1, got {}x{}",
            out_h, out_w);
  int64_t h = x.size(2), w = x.size(3);
  if (x.is_cuda()) {
    Tensor y = detail::empty_on({x.size(0), x.size(1), out_h, out_w}, x);
    cuda::adaptive_avg_pool_forward(x.data<float>(), y.data<float>(), x.size(0) * x.size(1), h, w,
                                    out_h, out_w);
    if (any_requires_grad({x})) {
      detail::record(y, {x}, std::make_shared<AdaptiveAvgPoolBackwardCuda>(x.shape()));
    }
    return y;
  }
  // Window i covers [floor(i * size / out), ceil((i + 1) * size / out)), as in PyTorch.
  auto make_axis = [](int64_t out, int64_t size) {
    std::vector<Window> axis;
    for (int64_t i = 0; i < out; ++i) {
      axis.push_back({i * size / out, ((i + 1) * size + out - 1) / out});
    }
    return axis;
  };
  PoolWindows pw{make_axis(out_h, h), make_axis(out_w, w), {}};
  for (const Window& r : pw.rows) {
    for (const Window& c : pw.cols) {
      pw.divisor.push_back(static_cast<float>((r.end - r.begin) * (c.end - c.begin)));
    }
  }
  return pool_with_windows(x, std::move(pw));
}

}  // namespace pac
