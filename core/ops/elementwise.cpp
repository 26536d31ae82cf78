// Binary elementwise ops with NumPy broadcasting, and sum_to, the reduction that undoes a
// broadcast in backward.
#include <algorithm>
#include <cstring>

#include "core/autocast.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

using detail::check_float;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    PAC_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast", op,
              shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element strides of `shape` seen through a broadcast to `out` (0 along broadcast dimensions).
static std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    size_t i = shape.size() - 1 - k;
    size_t o = out.size() - 1 - k;
    strides[o] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

// Visits the output in rows of its last dimension; for each row calls row(out_base, a_base,
// b_base) with the broadcast element offsets, advancing a multi-index instead of dividing.
template <class Row>
static void for_each_row(const Shape& out, const std::vector<int64_t>& sa,
                         const std::vector<int64_t>& sb, Row row) {
  int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0) {
    row(0, 0, 0);
    return;
  }
  int64_t inner = out[rank - 1];
  int64_t rows = inner == 0 ? 0 : shape_numel(out) / inner;
  std::vector<int64_t> index(rank, 0);
  int64_t offset_a = 0, offset_b = 0;
  for (int64_t r = 0; r < rows; ++r) {
    row(r * inner, offset_a, offset_b);
    for (int64_t d = rank - 2; d >= 0; --d) {
      ++index[d];
      offset_a += sa[d];
      offset_b += sb[d];
      if (index[d] < out[d]) break;
      offset_a -= sa[d] * out[d];
      offset_b -= sb[d] * out[d];
      index[d] = 0;
    }
  }
}

// The GPU kernels' description of a broadcast: output sizes and each input's strides.
static cuda::Strided strided_geometry(const Shape& out, const std::vector<int64_t>& sa,
                                      const std::vector<int64_t>& sb, const char* op) {
  PAC_CHECK(out.size() <= cuda::kMaxDims, "{}: tensors of {} dims exceed the GPU kernels' {}", op,
            out.size(), cuda::kMaxDims);
  cuda::Strided g;
  g.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) {
    g.size[d] = out[d];
    g.stride_a[d] = sa[d];
    g.stride_b[d] = sb[d];
  }
  return g;
}

template <class F>
static Tensor broadcast_binary(const Tensor& a, const Tensor& b, const char* op,
                               cuda::BinaryOp cuda_op, F f) {
  check_float(a, op, "a");
  check_float(b, op, "b");
  detail::check_same_device(a, b, op, "b");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = detail::empty_on(shape, a);
  if (a.is_cuda()) {
    auto geometry = strided_geometry(shape, broadcast_strides(a.shape(), shape),
                                     broadcast_strides(b.shape(), shape), op);
    cuda::binary(cuda_op, a.data<float>(), b.data<float>(), out.data<float>(), out.numel(),
                 geometry);
    return out;
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
  } else if (b.numel() == 1) {
    float vb = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
  } else {
    auto sa = broadcast_strides(a.shape(), shape);
    auto sb = broadcast_strides(b.shape(), shape);
    int64_t inner = shape.empty() ? 1 : shape.back();
    int64_t ia = sa.empty() ? 0 : sa.back(), ib = sb.empty() ? 0 : sb.back();
    for_each_row(shape, sa, sb, [&](int64_t o, int64_t oa, int64_t ob) {
      for (int64_t j = 0; j < inner; ++j) po[o + j] = f(pa[oa + j * ia], pb[ob + j * ib]);
    });
  }
  return out;
}

// The GPU kernels' description of summing a tensor of shape `in` down to `out` (which broadcasts
// to `in`): dimensions where out has size 1 (or is missing) are reduced, the others kept.
static cuda::Reduction reduction_onto(const Shape& in, const Shape& out) {
  PAC_CHECK(in.size() <= cuda::kMaxDims, "sum_to: tensors of {} dims exceed the GPU kernels' {}",
            in.size(), cuda::kMaxDims);
  cuda::Reduction r;
  size_t lead = in.size() - out.size();
  int64_t stride = 1;
  std::vector<int64_t> strides(in.size());
  for (size_t k = in.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= in[k];
  }
  for (size_t d = 0; d < in.size(); ++d) {
    bool reduced = d < lead || (out[d - lead] == 1 && in[d] != 1);
    if (reduced) {
      r.reduced_size[r.reduced_rank] = in[d];
      r.reduced_stride[r.reduced_rank++] = strides[d];
      r.reduced *= in[d];
    } else {
      r.kept_size[r.kept_rank] = in[d];
      r.kept_stride[r.kept_rank++] = strides[d];
      r.outputs *= in[d];
    }
  }
  return r;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape check = broadcast_shapes(shape, t.shape(), "sum_to");
  PAC_CHECK(check == t.shape(), "sum_to: {} cannot be summed down to {}", t.str(),
            shape_str(shape));
  Tensor out = detail::zeros_on(shape, t);
  if (t.is_cuda()) {
    cuda::reduce_sum(t.data<float>(), out.data<float>(), reduction_onto(t.shape(), shape), false);
    return out;
  }
  const float* pt = t.data<float>();
  float* po = out.data<float>();
  auto so = broadcast_strides(shape, t.shape());
  std::vector<int64_t> st(t.shape().size(), 0);  // t itself is read contiguously, row by row
  int64_t inner = t.shape().empty() ? 1 : t.shape().back();
  int64_t io = so.empty() ? 0 : so.back();
  for_each_row(t.shape(), so, st, [&](int64_t row, int64_t oo, int64_t) {
    if (io == 0) {
      float acc = 0.0f;
      for (int64_t j = 0; j < inner; ++j) acc += pt[row + j];
      po[oo] += acc;
    } else {
      for (int64_t j = 0; j < inner; ++j) po[oo + j] += pt[row + j];
    }
  });
  return out;
}

// --- add / sub ---
class AddBackward : public Node {
 public:
  AddBackward(Shape a, Shape b, float sign_b)
      : a_(std::move(a)), b_(std::move(b)), sign_b_(sign_b) {}
  std::string name() const override { return sign_b_ > 0 ? "AddBackward" : "SubBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga, gb;
    if (needs_grad(0)) ga = sum_to(g, a_);
    if (needs_grad(1)) gb = sign_b_ > 0 ? sum_to(g, b_) : neg(sum_to(g, b_));
    return {ga, gb};
  }

 private:
  Shape a_, b_;
  float sign_b_;
};

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out =
      broadcast_binary(a, b, "add", cuda::BinaryOp::add, [](float x, float y) { return x + y; });
  if (any_requires_grad({a, b})) {
    detail::record(out, {a, b}, std::make_shared<AddBackward>(a.shape(), b.shape(), 1.0f));
  }
  return keep_input_precision("add", out, {a, b});
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out =
      broadcast_binary(a, b, "sub", cuda::BinaryOp::sub, [](float x, float y) { return x - y; });
  if (any_requires_grad({a, b})) {
    detail::record(out, {a, b}, std::make_shared<AddBackward>(a.shape(), b.shape(), -1.0f));
  }
  return out;
}

// --- mul: each input's gradient needs the other input, so each is saved only when needed ---
class MulBackward : public Node {
 public:
  MulBackward(Tensor a, Tensor b) : a_(std::move(a)), b_(std::move(b)) {}
  std::string name() const override { return "MulBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga, gb;
    if (needs_grad(0)) ga = sum_to(mul(g, b_), a_shape_);
    if (needs_grad(1)) gb = sum_to(mul(g, a_), b_shape_);
    return {ga, gb};
  }
  Shape a_shape_, b_shape_;

 private:
  Tensor a_, b_;
};

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out =
      broadcast_binary(a, b, "mul", cuda::BinaryOp::mul, [](float x, float y) { return x * y; });
  if (any_requires_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    auto node = std::make_shared<MulBackward>(need_b ? a.detach() : Tensor(),
                                              need_a ? b.detach() : Tensor());
    node->a_shape_ = a.shape();
    node->b_shape_ = b.shape();
    detail::record(out, {a, b}, node);
  }
  return out;
}

// --- div: d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 ---
class DivBackward : public Node {
 public:
  DivBackward(Tensor a, Tensor b) : a_(std::move(a)), b_(std::move(b)) {}
  std::string name() const override { return "DivBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga, gb;
    if (needs_grad(0)) ga = sum_to(div(g, b_), a_.shape());
    if (needs_grad(1)) gb = sum_to(neg(div(mul(g, a_), mul(b_, b_))), b_.shape());
    return {ga, gb};
  }

 private:
  Tensor a_, b_;
};

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out =
      broadcast_binary(a, b, "div", cuda::BinaryOp::div, [](float x, float y) { return x / y; });
  if (any_requires_grad({a, b})) {
    detail::record(out, {a, b}, std::make_shared<DivBackward>(a.detach(), b.detach()));
  }
  return out;
}

// --- scalar versions: y = a + s and y = a * s ---
class ScaleBackward : public Node {
 public:
  explicit ScaleBackward(float scale) : scale_(scale) {}
  std::string name() const override { return "ScaleBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    return {scale_ == 1.0f ? g : mul_scalar(g, scale_)};
  }

 private:
  float scale_;
};

Tensor add_scalar(const Tensor& a, float value) {
  check_float(a, "add_scalar", "a");
  Tensor out = detail::empty_on(a.shape(), a);
  const float* pa = a.data<float>();
  float* po = out.data<float>();
  if (a.is_cuda()) {
    cuda::binary_scalar(cuda::BinaryOp::add, pa, value, po, a.numel());
  } else {
    for (int64_t i = 0, count = a.numel(); i < count; ++i) po[i] = pa[i] + value;
  }
  if (any_requires_grad({a})) detail::record(out, {a}, std::make_shared<ScaleBackward>(1.0f));
  return out;
}

Tensor mul_scalar(const Tensor& a, float value) {
  check_float(a, "mul_scalar", "a");
  Tensor out = detail::empty_on(a.shape(), a);
  const float* pa = a.data<float>();
  float* po = out.data<float>();
  if (a.is_cuda()) {
    cuda::binary_scalar(cuda::BinaryOp::mul, pa, value, po, a.numel());
  } else {
    for (int64_t i = 0, count = a.numel(); i < count; ++i) po[i] = pa[i] * value;
  }
  if (any_requires_grad({a})) detail::record(out, {a}, std::make_shared<ScaleBackward>(value));
  return out;
}

// --- in-place helpers for the engine and optimizers (never recorded) ---
void add_(Tensor& a, const Tensor& b) { axpy_(a, 1.0f, b); }

void axpy_(Tensor& a, float alpha, const Tensor& b) {
  check_float(a, "axpy_", "a");
  check_float(b, "axpy_", "b");
  PAC_CHECK(a.shape() == b.shape(), "axpy_: shapes differ: a is {}, b is {}", a.str(), b.str());
  detail::check_same_device(a, b, "axpy_", "b");
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  if (a.is_cuda()) return cuda::axpy(pa, alpha, pb, a.numel());
  for (int64_t i = 0, count = a.numel(); i < count; ++i) pa[i] += alpha * pb[i];
}

void scale_(Tensor& a, float value) {
  check_float(a, "scale_", "a");
  float* pa = a.data<float>();
  if (a.is_cuda()) return cuda::binary_scalar(cuda::BinaryOp::mul, pa, value, pa, a.numel());
  for (int64_t i = 0, count = a.numel(); i < count; ++i) pa[i] *= value;
}

// The three index ops share their checks: `compact` is [n] and `index` lists n flat positions of
// `full`, all on one device.
static void check_index_op(const Tensor& compact, const Tensor& full, const Tensor& index,
                           const char* op) {
  check_float(compact, op, "the compact tensor");
  check_float(full, op, "the full tensor");
  PAC_CHECK(index.defined() && index.dtype() == DType::i32 && index.shape().size() == 1,
            "{}: index must be i32 [n], got {}", op, index.defined() ? index.str() : "undefined");
  PAC_CHECK(compact.numel() == index.numel(), "{}: {} values for {} positions", op, compact.numel(),
            index.numel());
  detail::check_same_device(compact, full, op, "the full tensor");
  detail::check_same_device(compact, index, op, "index");
}

void index_gather_add_(Tensor& dst, const Tensor& src, const Tensor& index) {
  check_index_op(dst, src, index, "index_gather_add_");
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const int32_t* at = index.data<int32_t>();
  const int64_t n = dst.numel();
  if (dst.is_cuda()) return cuda::index_gather(d, s, at, n, true);
  for (int64_t j = 0; j < n; ++j) d[j] += s[at[j]];
}

void index_gather_(Tensor& dst, const Tensor& src, const Tensor& index) {
  check_index_op(dst, src, index, "index_gather_");
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const int32_t* at = index.data<int32_t>();
  const int64_t n = dst.numel();
  if (dst.is_cuda()) return cuda::index_gather(d, s, at, n, false);
  for (int64_t j = 0; j < n; ++j) d[j] = s[at[j]];
}

void index_scatter_(Tensor& dst, const Tensor& src, const Tensor& index) {
  check_index_op(src, dst, index, "index_scatter_");
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const int32_t* at = index.data<int32_t>();
  const int64_t n = src.numel();
  if (dst.is_cuda()) return cuda::index_scatter(d, at, s, n);
  for (int64_t j = 0; j < n; ++j) d[at[j]] = s[j];
}

}  // namespace pac
