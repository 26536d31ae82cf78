// Reductions: sum and mean over all elements or a set of dimensions, max over all or one
// dimension. Summing over dimensions is sum_to onto the shape with those dimensions set to 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

using detail::check_float;

// The shape of x with each reduced dimension set to 1 (the keepdim shape).
static Shape keepdim_shape(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  Shape keep = x.shape();
  for (int64_t d : dims) {
    int64_t nd = detail::normalize_dim(d, x.dim(), op);
    keep[nd] = 1;
  }
  return keep;
}

static Shape drop_reduced(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<bool> reduced(x.dim(), false);
  for (int64_t d : dims) reduced[d < 0 ? d + x.dim() : d] = true;
  Shape out;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (!reduced[i]) out.push_back(x.shape()[i]);
  }
  return out;
}

class SumBackward : public Node {
 public:
  SumBackward(Shape input, Shape keep, float factor)
      : input_(std::move(input)), keep_(std::move(keep)), factor_(factor) {}
  std::string name() const override { return factor_ == 1.0f ? "SumBackward" : "MeanBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor spread = expand(reshape(g, keep_), input_);
    return {factor_ == 1.0f ? spread : mul_scalar(spread, factor_)};
  }

 private:
  Shape input_, keep_;
  float factor_;  // 1 for sum, 1 / count for mean
};

static Tensor reduce_sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                         float scale, const char* op) {
  check_float(x, op, "x");
  Shape keep = keepdim_shape(x, dims, op);
  Tensor out;
  {
    NoGradGuard no_grad;  // the reduction's own pieces are not part of the graph
    out = sum_to(x, keep);
    if (out.impl() == x.impl()) out = x.clone();
    if (scale != 1.0f) scale_(out, scale);
    if (!keepdim) out = out.view_flat(0, drop_reduced(x, dims));
  }
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<SumBackward>(x.shape(), keep, scale));
  }
  return out;
}

static std::vector<int64_t> all_dims(const Tensor& x) {
  std::vector<int64_t> dims(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) dims[i] = i;
  return dims;
}

Tensor sum(const Tensor& x) { return reduce_sum(x, all_dims(x), false, 1.0f, "sum"); }

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_sum(x, dims, keepdim, 1.0f, "sum");
}

Tensor mean(const Tensor& x) {
  PAC_CHECK(x.numel() > 0, "mean: tensor {} is empty", x.str());
  return reduce_sum(x, all_dims(x), false, 1.0f / static_cast<float>(x.numel()), "mean");
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_float(x, "mean", "x");
  int64_t count = x.numel() / std::max<int64_t>(1, shape_numel(keepdim_shape(x, dims, "mean")));
  PAC_CHECK(count > 0, "mean: reducing {} over empty dimensions", x.str());
  return reduce_sum(x, dims, keepdim, 1.0f / static_cast<float>(count), "mean");
}

Tensor Tensor::sum() const { return pac::sum(*this); }
Tensor Tensor::mean() const { return pac::mean(*this); }

// --- max: the gradient flows only to the (first) position that held the maximum ---
class MaxBackward : public Node {
 public:
  MaxBackward(Shape input, Tensor positions)
      : input_(std::move(input)), positions_(std::move(positions)) {}
  std::string name() const override { return "MaxBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = detail::zeros_on(input_, g);
    float* out = gx.data<float>();
    const float* pg = g.data<float>();
    const int64_t* at = positions_.data<int64_t>();
    if (gx.is_cuda()) {
      cuda::scatter_add(out, at, pg, positions_.numel());
    } else {
      for (int64_t i = 0, n = positions_.numel(); i < n; ++i) out[at[i]] += pg[i];
    }
    return {gx};
  }

 private:
  Shape input_;
  Tensor positions_;  // i64: flat input index of each output element's maximum
};

// Maximum along `dim` of the [outer, size, inner] view; `positions` (i64, same device) receives
// the flat input position of each maximum.
static Tensor max_along(const Tensor& x, int64_t dim, Tensor& positions) {
  auto s = detail::split_at(x.shape(), dim);
  PAC_CHECK(s.size > 0, "max: dimension {} of {} is empty", dim, x.str());
  Shape out_shape = x.shape();
  out_shape[dim] = 1;
  Tensor out = detail::empty_on(out_shape, x);
  positions = detail::empty_on({s.outer * s.inner}, x, DType::i64);
  const float* px = x.data<float>();
  float* po = out.data<float>();
  int64_t* pp = positions.data<int64_t>();
  if (x.is_cuda()) {
    cuda::max_along(px, po, pp, s.outer, s.size, s.inner);
    return out;
  }
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      int64_t base = o * s.size * s.inner + i;
      int64_t best = base;
      for (int64_t k = 1; k < s.size; ++k) {
        int64_t at = base + k * s.inner;
        if (px[at] > px[best] || std::isnan(px[at])) best = at;
      }
      po[o * s.inner + i] = px[best];
      pp[o * s.inner + i] = best;
    }
  }
  return out;
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  check_float(x, "max", "x");
  int64_t d = detail::normalize_dim(dim, x.dim(), "max");
  Tensor positions;
  Tensor out = max_along(x, d, positions);
  if (!keepdim) out = out.view_flat(0, drop_reduced(x, {d}));
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<MaxBackward>(x.shape(), std::move(positions)));
  }
  return out;
}

Tensor max(const Tensor& x) {
  check_float(x, "max", "x");
  PAC_CHECK(x.numel() > 0, "max: tensor {} is empty", x.str());
  Tensor positions;
  Tensor flat = x.view_flat(0, {x.numel()});
  Tensor out = max_along(flat, 0, positions).view_flat(0, {});
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<MaxBackward>(x.shape(), std::move(positions)));
  }
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  check_float(x, "argmax", "x");
  int64_t d = detail::normalize_dim(dim, x.dim(), "argmax");
  Tensor positions;
  max_along(x, d, positions);
  auto s = detail::split_at(x.shape(), d);
  Tensor out = detail::empty_on(drop_reduced(x, {d}), x, DType::i64);
  int64_t* po = out.data<int64_t>();
  const int64_t* pp = positions.data<int64_t>();
  if (x.is_cuda()) {
    cuda::position_to_index(pp, po, positions.numel(), s.size, s.inner);
    return out;
  }
  for (int64_t i = 0; i < positions.numel(); ++i) po[i] = (pp[i] / s.inner) % s.size;
  return out;
}

}  // namespace pac
