// Batch normalisation (per channel over N, H, W) and layer normalisation (per row over the
// trailing dimensions). Both save the input and the per-group mean and 1/std, and recompute the
// normalised values in backward. On the GPU both have their own kernels (core/cuda/norm.cu); batch
// norm in evaluation mode with gradients flowing is a composition of elementwise ops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"
#include "core/ops/vector_math.h"
#include "core/saved_tensor.h"

namespace pac {

// --- batch norm: x viewed as [N, C, S] with S = H * W (or 1 for [N, C]) ---
class BatchNormBackward : public Node {
 public:
  BatchNormBackward(SavedTensor x, Tensor weight, std::vector<float> mean,
                    std::vector<float> invstd, bool training)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        mean_(std::move(mean)),
        invstd_(std::move(invstd)),
        training_(training) {}
  std::string name() const override { return "BatchNormBackward"; }

  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor x = x_.unpack();
    int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
    double m = static_cast<double>(n * s);
    const float* px = x.data<float>();
    const float* pg = g.data<float>();
    Tensor gx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor gw = needs_grad(1) ? Tensor::empty({c}) : Tensor();
    Tensor gb = needs_grad(2) ? Tensor::empty({c}) : Tensor();
    for (int64_t ch = 0; ch < c; ++ch) {
      // sum_dy = sum(dy), sum_dy_xhat = sum(dy * xhat) over the channel
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      const float mu = mean_[ch], inv = invstd_[ch];
      for (int64_t b = 0; b < n; ++b) {
        const float* xs = px + (b * c + ch) * s;
        const float* gs = pg + (b * c + ch) * s;
        float plane_dy = vec::sum(gs, s, [](float dy) { return dy; });
        float plane_dy_xhat =
            vec::sum(gs, xs, s, [mu](float dy, float v) { return dy * (v - mu); });
        sum_dy += plane_dy;
        sum_dy_xhat += static_cast<double>(plane_dy_xhat) * inv;
      }
      if (gw.defined()) gw.data<float>()[ch] = static_cast<float>(sum_dy_xhat);
      if (gb.defined()) gb.data<float>()[ch] = static_cast<float>(sum_dy);
      if (!gx.defined()) continue;
      float w = weight_.defined() ? weight_.data<float>()[ch] : 1.0f;
      float scale = w * invstd_[ch];
      // Training: the batch statistics depend on x, which adds the two mean terms.
      float mean_dy = training_ ? static_cast<float>(sum_dy / m) : 0.0f;
      float mean_dy_xhat = training_ ? static_cast<float>(sum_dy_xhat / m) : 0.0f;
      for (int64_t b = 0; b < n; ++b) {
        const float* xs = px + (b * c + ch) * s;
        const float* gs = pg + (b * c + ch) * s;
        float* out = gx.data<float>() + (b * c + ch) * s;
        vec::map2(gs, xs, out, s, [=](float dy, float v) {
          return scale * (dy - mean_dy - (v - mu) * inv * mean_dy_xhat);
        });
      }
    }
    return {gx, gw, gb};
  }

 private:
  SavedTensor x_;  // kept in bf16/fp16 under autocast when those hold it exactly
  Tensor weight_;
  std::vector<float> mean_, invstd_;
  bool training_;
};

// --- batch norm on the GPU ---
class CudaBatchNormBackward : public Node {
 public:
  CudaBatchNormBackward(Tensor x, Tensor weight, Tensor save_mean, Tensor save_invstd, float eps)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        save_mean_(std::move(save_mean)),
        save_invstd_(std::move(save_invstd)),
        eps_(eps) {}
  std::string name() const override { return "BatchNormBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    int64_t n = x_.size(0), c = x_.size(1), s = x_.numel() / (n * c);
    // The kernels always write all three gradients.
    Tensor gx = detail::empty_on(x_.shape(), g);
    Tensor gw = detail::empty_on({c}, g);
    Tensor gb = detail::empty_on({c}, g);
    cuda::batch_norm_backward_training(x_.data<float>(), weight_.data<float>(),
                                       save_mean_.data<float>(), save_invstd_.data<float>(),
                                       g.data<float>(), gx.data<float>(), gw.data<float>(),
                                       gb.data<float>(), n, c, s, eps_);
    return {needs_grad(0) ? gx : Tensor(), needs_grad(1) ? gw : Tensor(),
            needs_grad(2) ? gb : Tensor()};
  }

 private:
  Tensor x_, weight_, save_mean_, save_invstd_;
  float eps_;
};

static Tensor batch_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& running_mean, const Tensor& running_var, bool training,
                              float momentum, float eps) {
  int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  if (!training && !any_requires_grad({x, weight, bias})) {
    // Evaluation without gradients (a model being evaluated): one fused pass.
    Tensor y = detail::empty_on(x.shape(), x);
    cuda::batch_norm_inference(x.data<float>(), weight.defined() ? weight.data<float>() : nullptr,
                               bias.defined() ? bias.data<float>() : nullptr,
                               running_mean.data<float>(), running_var.data<float>(),
                               y.data<float>(), n, c, s, eps);
    return y;
  }
  if (!training) {
    // With gradients (a frozen batch norm being trained through):
    // y = (x - mean) * (weight / sqrt(var + eps)) + bias, per channel, as ops autograd follows.
    Shape per_channel = x.dim() == 4 ? Shape{1, c, 1, 1} : Shape{1, c};
    Tensor scale = pow(add_scalar(running_var.detach(), eps), -0.5f);
    if (weight.defined()) scale = mul(scale, weight);
    Tensor y =
        mul(sub(x, reshape(running_mean.detach(), per_channel)), reshape(scale, per_channel));
    return bias.defined() ? add(y, reshape(bias, per_channel)) : y;
  }
  Tensor w = weight.defined() ? weight : Tensor::ones({c}, x.device());
  Tensor b = bias.defined() ? bias : Tensor::zeros({c}, DType::f32, x.device());
  Tensor y = detail::empty_on(x.shape(), x);
  Tensor save_mean = detail::empty_on({c}, x), save_invstd = detail::empty_on({c}, x);
  cuda::batch_norm_forward_training(
      x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(),
      running_mean.defined() ? running_mean.data<float>() : nullptr,
      running_var.defined() ? running_var.data<float>() : nullptr, save_mean.data<float>(),
      save_invstd.data<float>(), n, c, s, momentum, eps);
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<CudaBatchNormBackward>(x.detach(), w.detach(), save_mean,
                                                        save_invstd, eps);
    detail::record(y, {x, weight, bias}, node);
  }
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum, float eps) {
  detail::check_float(x, "batch_norm", "x");
  PAC_CHECK(x.dim() == 2 || x.dim() == 4,
            "batch_norm: input must be [N, C] or [N, C, H, W], got {}", x.str());
  int64_t n = x.size(0), c = x.size(1), s = x.numel() / std::max<int64_t>(1, n * c);
  for (const auto& [t, label] :
       {std::pair{weight, "weight"}, std::pair{bias, "bias"},
        std::pair{running_mean, "running_mean"}, std::pair{running_var, "running_var"}}) {
    if (!t.defined()) continue;
    detail::check_float(t, "batch_norm", label);
    detail::check_same_device(x, t, "batch_norm", label);
    PAC_CHECK(t.shape() == Shape{c}, "batch_norm: {} must be [{}] for input {}, got {}", label, c,
              x.str(), t.str());
  }
  PAC_CHECK(training || (running_mean.defined() && running_var.defined()),
            "batch_norm: evaluation mode needs running_mean and running_var");
  PAC_CHECK(!training || n * s > 1,
            "batch_norm: training needs more than one value per channel, input is {}", x.str());
  if (x.is_cuda()) {
    return batch_norm_cuda(x, weight, bias, running_mean, running_var, training, momentum, eps);
  }

  const float* px = x.data<float>();
  std::vector<float> mean(c), invstd(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mu, var;
    if (training) {
      // Float sums within a plane (vectorised), double across planes (accurate).
      double total = 0.0, total_sq = 0.0;
      for (int64_t b = 0; b < n; ++b) {
        total += vec::sum(px + (b * c + ch) * s, s, [](float v) { return v; });
      }
      mu = total / static_cast<double>(n * s);
      const float mu_f = static_cast<float>(mu);
      for (int64_t b = 0; b < n; ++b) {
        total_sq +=
            vec::sum(px + (b * c + ch) * s, s, [mu_f](float v) { return (v - mu_f) * (v - mu_f); });
      }
      var = total_sq / static_cast<double>(n * s);  // biased: what normalises the batch
      if (running_mean.defined()) {
        NoGradGuard no_grad;
        float* rm = running_mean.data<float>();
        float* rv = running_var.data<float>();
        double unbiased = total_sq / static_cast<double>(n * s - 1);
        rm[ch] = static_cast<float>((1.0 - momentum) * rm[ch] + momentum * mu);
        rv[ch] = static_cast<float>((1.0 - momentum) * rv[ch] + momentum * unbiased);
      }
    } else {
      mu = running_mean.data<float>()[ch];
      var = running_var.data<float>()[ch];
    }
    mean[ch] = static_cast<float>(mu);
    invstd[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }

  Tensor out = Tensor::empty(x.shape());
  float* po = out.data<float>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      float w = weight.defined() ? weight.data<float>()[ch] : 1.0f;
      float shift = bias.defined() ? bias.data<float>()[ch] : 0.0f;
      float scale = w * invstd[ch];
      const float mu = mean[ch];
      vec::map(px + (b * c + ch) * s, po + (b * c + ch) * s, s,
               [=](float v) { return (v - mu) * scale + shift; });
    }
  }
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<BatchNormBackward>(SavedTensor(x),
                                                    weight.defined() ? weight.detach() : Tensor(),
                                                    std::move(mean), std::move(invstd), training);
    detail::record(out, {x, weight, bias}, node);
  }
  return keep_input_precision("batch_norm", out, {x});
}

// --- layer norm: x viewed as [rows, D] with D the product of normalized_shape ---
// Each row of x [rows, d] normalised to mean 0 and variance 1 (sums in double), then scaled and
// shifted; its mean and 1/std are kept for backward.
PAC_SIMD_CLONES static void layer_norm_rows(const float* px, const float* pw, const float* pb,
                                            float* po, float* mean, float* rstd, int64_t rows,
                                            int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    double total = 0.0, total_sq = 0.0;
    for (int64_t j = 0; j < d; ++j) total += xr[j];
    const double mu = total / d;
    for (int64_t j = 0; j < d; ++j) total_sq += (xr[j] - mu) * (xr[j] - mu);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(total_sq / d + eps));
    const float m = mean[r], s = rstd[r];
    float* yr = po + r * d;
    for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * s;
    if (pw) {
      for (int64_t j = 0; j < d; ++j) yr[j] *= pw[j];
    }
    if (pb) {
      for (int64_t j = 0; j < d; ++j) yr[j] += pb[j];
    }
  }
}

// Backward of layer_norm_rows for g [rows, d]: adds to the scale's and shift's gradients (when
// given) and writes x's (when given). xhat and dxhat are scratch rows of d.
PAC_SIMD_CLONES static void layer_norm_rows_backward(const float* px, const float* pg,
                                                     const float* pw, const float* mean,
                                                     const float* rstd, float* pgx, float* pgw,
                                                     float* pgb, float* xhat, float* dxhat,
                                                     int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    const float* gr = pg + r * d;
    const float m = mean[r], s = rstd[r];
    for (int64_t j = 0; j < d; ++j) xhat[j] = (xr[j] - m) * s;
    if (pgw) {
      for (int64_t j = 0; j < d; ++j) pgw[j] += gr[j] * xhat[j];
    }
    if (pgb) {
      for (int64_t j = 0; j < d; ++j) pgb[j] += gr[j];
    }
    if (!pgx) continue;
    for (int64_t j = 0; j < d; ++j) dxhat[j] = pw ? gr[j] * pw[j] : gr[j];
    double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      sum_dxhat += dxhat[j];
      sum_dxhat_xhat += dxhat[j] * xhat[j];
    }
    const float mean_dxhat = static_cast<float>(sum_dxhat / d);
    const float mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat / d);
    float* out = pgx + r * d;
    for (int64_t j = 0; j < d; ++j)
      out[j] = s * (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat);
  }
}

class LayerNormBackward : public Node {
 public:
  LayerNormBackward(SavedTensor x, Tensor weight, std::vector<float> mean, std::vector<float> rstd,
                    int64_t d)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        mean_(std::move(mean)),
        rstd_(std::move(rstd)),
        d_(d) {}
  std::string name() const override { return "LayerNormBackward"; }

  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor x = x_.unpack();
    int64_t rows = x.numel() / d_;
    const float* px = x.data<float>();
    const float* pg = g.data<float>();
    const float* pw = weight_.defined() ? weight_.data<float>() : nullptr;
    Tensor gx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor gw = needs_grad(1) ? Tensor::zeros({d_}) : Tensor();
    Tensor gb = needs_grad(2) ? Tensor::zeros({d_}) : Tensor();
    float* pgw = gw.defined() ? gw.data<float>() : nullptr;
    float* pgb = gb.defined() ? gb.data<float>() : nullptr;
    float* pgx = gx.defined() ? gx.data<float>() : nullptr;
    std::vector<float> xhat(d_), dxhat(d_);
    layer_norm_rows_backward(px, pg, pw, mean_.data(), rstd_.data(), pgx, pgw, pgb, xhat.data(),
                             dxhat.data(), rows, d_);
    return {gx, gw, gb};
  }

 private:
  SavedTensor x_;  // kept in bf16/fp16 under autocast when those hold it exactly
  Tensor weight_;
  std::vector<float> mean_, rstd_;
  int64_t d_;
};

class LayerNormBackwardCuda : public Node {
 public:
  LayerNormBackwardCuda(Tensor x, Tensor weight, Tensor mean, Tensor rstd, Shape normalized)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        mean_(std::move(mean)),
        rstd_(std::move(rstd)),
        normalized_(std::move(normalized)),
        d_(shape_numel(normalized_)) {}
  std::string name() const override { return "LayerNormBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = needs_grad(0) ? detail::empty_on(x_.shape(), g) : Tensor();
    Tensor gw = needs_grad(1) ? detail::empty_on({d_}, g) : Tensor();
    Tensor gb = needs_grad(2) ? detail::empty_on({d_}, g) : Tensor();
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    cuda::layer_norm_backward(x_.data<float>(), ptr(weight_), mean_.data<float>(),
                              rstd_.data<float>(), g.data<float>(), ptr(gx), ptr(gw), ptr(gb),
                              x_.numel() / d_, d_);
    if (gw.defined()) gw = gw.view_flat(0, normalized_);
    if (gb.defined()) gb = gb.view_flat(0, normalized_);
    return {gx, gw, gb};
  }

 private:
  Tensor x_, weight_, mean_, rstd_;
  Shape normalized_;
  int64_t d_;
};

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, float eps) {
  detail::check_float(x, "layer_norm", "x");
  size_t k = normalized_shape.size();
  PAC_CHECK(k >= 1 && k <= x.shape().size() &&
                Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
            "layer_norm: normalized_shape {} must match the trailing dimensions of {}",
            shape_str(normalized_shape), x.str());
  int64_t d = shape_numel(normalized_shape);
  for (const auto& [t, label] : {std::pair{weight, "weight"}, std::pair{bias, "bias"}}) {
    if (!t.defined()) continue;
    detail::check_float(t, "layer_norm", label);
    detail::check_same_device(x, t, "layer_norm", label);
    PAC_CHECK(t.shape() == normalized_shape, "layer_norm: {} must be {}, got {}", label,
              shape_str(normalized_shape), t.str());
  }
  int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (x.is_cuda()) {
    Tensor y = detail::empty_on(x.shape(), x);
    Tensor mean = detail::empty_on({rows}, x), rstd = detail::empty_on({rows}, x);
    cuda::layer_norm_forward(x.data<float>(), weight.defined() ? weight.data<float>() : nullptr,
                             bias.defined() ? bias.data<float>() : nullptr, y.data<float>(),
                             mean.data<float>(), rstd.data<float>(), rows, d, eps);
    if (any_requires_grad({x, weight, bias})) {
      auto node = std::make_shared<LayerNormBackwardCuda>(
          x.detach(), weight.defined() ? weight.detach() : Tensor(), mean, rstd, normalized_shape);
      detail::record(y, {x, weight, bias}, node);
    }
    return y;
  }
  std::vector<float> mean(rows), rstd(rows);
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* po = out.data<float>();
  layer_norm_rows(px, pw, pb, po, mean.data(), rstd.data(), rows, d, eps);
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<LayerNormBackward>(SavedTensor(x),
                                                    weight.defined() ? weight.detach() : Tensor(),
                                                    std::move(mean), std::move(rstd), d);
    detail::record(out, {x, weight, bias}, node);
  }
  return out;
}

}  // namespace pac
