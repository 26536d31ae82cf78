// Ops that move elements without arithmetic: reshape (a view), permute/transpose, slice, cat,
// expand. Their backward passes move the gradient back the same way.
#include <algorithm>
#include <cstring>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

using detail::check_float;

// --- reshape: a view of the same storage ---
class ReshapeBackward : public Node {
 public:
  explicit ReshapeBackward(Shape input) : input_(std::move(input)) {}
  std::string name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {g.view_flat(0, input_)}; }

 private:
  Shape input_;
};

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape resolved = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      PAC_CHECK(infer_at < 0, "reshape: more than one -1 in {}", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      PAC_CHECK(shape[i] >= 0, "reshape: negative dimension in {}", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    PAC_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot infer -1 in {} for {}",
              shape_str(shape), x.str());
    resolved[infer_at] = x.numel() / known;
  }
  PAC_CHECK(shape_numel(resolved) == x.numel(), "reshape: {} has {} elements, shape {} needs {}",
            x.str(), x.numel(), shape_str(resolved), shape_numel(resolved));
  Tensor out = x.view_flat(0, resolved);
  if (any_requires_grad({x}))
    detail::record(out, {x}, std::make_shared<ReshapeBackward>(x.shape()));
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const { return pac::reshape(*this, shape); }

// --- permute: a copy with reordered dimensions ---
static Tensor permute_copy(const Tensor& x, const std::vector<int64_t>& order) {
  int64_t rank = x.dim();
  std::vector<int64_t> in_strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * x.shape()[d + 1];
  Shape out_shape(rank);
  std::vector<int64_t> strides(rank);  // input stride of each output dimension
  for (int64_t d = 0; d < rank; ++d) {
    out_shape[d] = x.shape()[order[d]];
    strides[d] = in_strides[order[d]];
  }
  Tensor out = detail::empty_on(out_shape, x);
  const float* px = x.data<float>();
  float* po = out.data<float>();
  int64_t n = out.numel();
  if (n == 0) return out;
  if (x.is_cuda()) {
    PAC_CHECK(rank <= cuda::kMaxDims, "permute: {} has more dims than the GPU kernels' {}", x.str(),
              cuda::kMaxDims);
    cuda::Strided g;
    g.rank = static_cast<int>(rank);
    for (int64_t d = 0; d < rank; ++d) {
      g.size[d] = out_shape[d];
      g.stride_a[d] = strides[d];
    }
    cuda::permute(px, po, n, g);
    return out;
  }
  if (rank == 0) {
    po[0] = px[0];
    return out;
  }
  // Row by row along the last output dimension: a plain copy when it is also the input's last
  // (the attention heads' permutes), a strided gather otherwise; the odometer over the other
  // dimensions advances once per row.
  const int64_t width = out_shape[rank - 1], step = strides[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t src = 0;
  for (int64_t row = 0; row < n / width; ++row) {
    float* dst = po + row * width;
    if (step == 1) {
      std::copy(px + src, px + src + width, dst);
    } else {
      for (int64_t j = 0; j < width; ++j) dst[j] = px[src + j * step];
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      ++index[d];
      src += strides[d];
      if (index[d] < out_shape[d]) break;
      src -= strides[d] * out_shape[d];
      index[d] = 0;
    }
  }
  return out;
}

class PermuteBackward : public Node {
 public:
  explicit PermuteBackward(std::vector<int64_t> inverse) : inverse_(std::move(inverse)) {}
  std::string name() const override { return "PermuteBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {permute_copy(g, inverse_)}; }

 private:
  std::vector<int64_t> inverse_;
};

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  check_float(x, "permute", "x");
  PAC_CHECK(static_cast<int64_t>(order.size()) == x.dim(),
            "permute: order has {} entries, tensor {} has {} dims", order.size(), x.str(), x.dim());
  std::vector<int64_t> normalized(order.size()), inverse(order.size(), -1);
  for (size_t d = 0; d < order.size(); ++d) {
    normalized[d] = detail::normalize_dim(order[d], x.dim(), "permute");
    PAC_CHECK(inverse[normalized[d]] < 0, "permute: dimension {} repeated in [{}]", order[d],
              fmt::join(order, ", "));
    inverse[normalized[d]] = static_cast<int64_t>(d);
  }
  Tensor out = permute_copy(x, normalized);
  if (any_requires_grad({x})) detail::record(out, {x}, std::make_shared<PermuteBackward>(inverse));
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  std::vector<int64_t> order(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) order[d] = d;
  std::swap(order[detail::normalize_dim(dim0, x.dim(), "transpose")],
            order[detail::normalize_dim(dim1, x.dim(), "transpose")]);
  return permute(x, order);
}

// Copies `rows` runs of `width` floats, `src_pitch` apart in src, to `dst_pitch` apart in dst: the
// data movement of slice and cat, on either device.
static void copy_rows(const Tensor& dst, int64_t dst_offset, int64_t dst_pitch, const Tensor& src,
                      int64_t src_offset, int64_t src_pitch, int64_t rows, int64_t width) {
  float* d = dst.data<float>() + dst_offset;
  const float* s = src.data<float>() + src_offset;
  if (dst.is_cuda()) return cuda::copy_rows(d, dst_pitch, s, src_pitch, rows, width);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + r * dst_pitch, s + r * src_pitch, width * sizeof(float));
  }
}

// --- slice: [start, end) along one dimension ---
class SliceBackward : public Node {
 public:
  SliceBackward(Shape input, int64_t dim, int64_t start)
      : input_(std::move(input)), dim_(dim), start_(start) {}
  std::string name() const override { return "SliceBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx = detail::zeros_on(input_, g);
    auto in = detail::split_at(input_, dim_);
    auto part = detail::split_at(g.shape(), dim_);
    int64_t width = part.size * part.inner;
    copy_rows(gx, start_ * in.inner, in.size * in.inner, g, 0, width, in.outer, width);
    return {gx};
  }

 private:
  Shape input_;
  int64_t dim_, start_;
};

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  check_float(x, "slice", "x");
  int64_t d = detail::normalize_dim(dim, x.dim(), "slice");
  int64_t size = x.shape()[d];
  PAC_CHECK(0 <= start && start <= end && end <= size,
            "slice: range [{}, {}) is not within dimension {} of {} (size {})", start, end, d,
            x.str(), size);
  Shape out_shape = x.shape();
  out_shape[d] = end - start;
  auto s = detail::split_at(x.shape(), d);
  Tensor out;
  if (d == 0) {
    out = x.view_flat(start * s.inner, out_shape);
  } else {
    out = detail::empty_on(out_shape, x);
    int64_t chunk = (end - start) * s.inner;
    copy_rows(out, 0, chunk, x, start * s.inner, s.size * s.inner, s.outer, chunk);
  }
  if (any_requires_grad({x})) {
    detail::record(out, {x}, std::make_shared<SliceBackward>(x.shape(), d, start));
  }
  return out;
}

// --- cat: join along one dimension; backward slices the gradient apart ---
class CatBackward : public Node {
 public:
  CatBackward(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::string name() const override { return "CatBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    std::vector<Tensor> grads(sizes_.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (needs_grad(i)) grads[i] = slice(g, dim_, start, start + sizes_[i]).clone();
      start += sizes_[i];
    }
    return grads;
  }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  PAC_CHECK(!xs.empty(), "cat: needs at least one tensor");
  for (const Tensor& x : xs) {
    check_float(x, "cat", "xs");
    detail::check_same_device(xs[0], x, "cat", "xs");
  }
  int64_t d = detail::normalize_dim(dim, xs[0].dim(), "cat");
  Shape out_shape = xs[0].shape();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    Shape expect = xs[0].shape();
    expect[d] = x.dim() == xs[0].dim() ? x.shape()[d] : -1;
    PAC_CHECK(x.shape() == expect, "cat: {} does not match {} outside dimension {}", x.str(),
              xs[0].str(), d);
    sizes.push_back(x.shape()[d]);
    out_shape[d] += x.shape()[d];
  }
  Tensor out = detail::empty_on(out_shape, xs[0]);
  auto so = detail::split_at(out_shape, d);
  int64_t start = 0;
  for (const Tensor& x : xs) {
    int64_t chunk = x.shape()[d] * so.inner;
    copy_rows(out, start * so.inner, so.size * so.inner, x, 0, chunk, so.outer, chunk);
    start += x.shape()[d];
  }
  if (any_requires_grad(xs)) detail::record(out, xs, std::make_shared<CatBackward>(d, sizes));
  return out;
}

// --- expand: materialise a broadcast; backward sums it back ---
class ExpandBackward : public Node {
 public:
  explicit ExpandBackward(Shape input) : input_(std::move(input)) {}
  std::string name() const override { return "ExpandBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {sum_to(g, input_)}; }

 private:
  Shape input_;
};

Tensor expand(const Tensor& x, const Shape& shape) {
  check_float(x, "expand", "x");
  PAC_CHECK(broadcast_shapes(x.shape(), shape, "expand") == shape,
            "expand: {} cannot be expanded to {}", x.str(), shape_str(shape));
  if (x.shape() == shape) return x;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = add(detail::zeros_on(shape, x), x);  // broadcasting does the copying
  }
  if (any_requires_grad({x})) detail::record(out, {x}, std::make_shared<ExpandBackward>(x.shape()));
  return out;
}

}  // namespace pac
