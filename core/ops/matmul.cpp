// Matrix products on OpenBLAS. Leading dimensions of `a` fold into M when `b` is a matrix (the
// Linear-layer case); equal leading dimensions on both sides give a batched product.
#include <algorithm>

#include "core/cpu/gemm.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

namespace {

struct MatmulPlan {
  int64_t batch = 1;  // independent products
  int64_t m = 0, k = 0, n = 0;
  bool shared_b = true;  // b is one [K, N] matrix used by every row of a
  Shape out_shape;
};

MatmulPlan plan_matmul(const Tensor& a, const Tensor& b) {
  detail::check_float(a, "matmul", "a");
  detail::check_float(b, "matmul", "b");
  PAC_CHECK(a.dim() >= 2 && b.dim() >= 2,
            "matmul: both operands need at least 2 dims, a is {}, "
            "b is {}",
            a.str(), b.str());
  PAC_CHECK(a.size(-1) == b.size(-2), "matmul: inner dimensions differ: a is {}, b is {}", a.str(),
            b.str());
  MatmulPlan p;
  p.k = a.size(-1);
  p.n = b.size(-1);
  p.out_shape = a.shape();
  p.out_shape.back() = p.n;
  if (b.dim() == 2) {
    p.m = a.numel() / p.k;
    return p;
  }
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  PAC_CHECK(batch_a == batch_b, "matmul: batch dimensions differ: a is {}, b is {}", a.str(),
            b.str());
  p.shared_b = false;
  p.batch = shape_numel(batch_a);
  p.m = a.size(-2);
  return p;
}

}  // namespace

class MatmulBackward : public Node {
 public:
  MatmulBackward(Tensor a, Tensor b, MatmulPlan plan, Shape a_shape, Shape b_shape)
      : a_(std::move(a)),
        b_(std::move(b)),
        plan_(std::move(plan)),
        a_shape_(std::move(a_shape)),
        b_shape_(std::move(b_shape)) {}
  std::string name() const override { return "MatmulBackward"; }

  // dA = dC B^T and dB = A^T dC, per batch (or over the folded rows when b is shared).
  std::vector<Tensor> apply(const Tensor& g) override {
    const MatmulPlan& p = plan_;
    Tensor ga, gb;
    const float* pg = g.data<float>();
    if (needs_grad(0)) {
      ga = Tensor::empty(a_shape_);
      for (int64_t i = 0; i < p.batch; ++i) {
        const float* bi = b_.data<float>() + (p.shared_b ? 0 : i * p.k * p.n);
        cpu::sgemm(false, true, p.m, p.k, p.n, 1.0f, pg + i * p.m * p.n, p.n, bi, p.n, 0.0f,
                   ga.data<float>() + i * p.m * p.k, p.k);
      }
    }
    if (needs_grad(1)) {
      gb = Tensor::empty(b_shape_);
      for (int64_t i = 0; i < p.batch; ++i) {
        float* gbi = gb.data<float>() + (p.shared_b ? 0 : i * p.k * p.n);
        cpu::sgemm(true, false, p.k, p.n, p.m, 1.0f, a_.data<float>() + i * p.m * p.k, p.k,
                   pg + i * p.m * p.n, p.n, 0.0f, gbi, p.n);
      }
    }
    return {ga, gb};
  }

 private:
  Tensor a_, b_;
  MatmulPlan plan_;
  Shape a_shape_, b_shape_;
};

Tensor matmul(const Tensor& a, const Tensor& b) {
  MatmulPlan p = plan_matmul(a, b);
  Tensor out = Tensor::empty(p.out_shape);
  for (int64_t i = 0; i < p.batch; ++i) {
    const float* bi = b.data<float>() + (p.shared_b ? 0 : i * p.k * p.n);
    cpu::sgemm(false, false, p.m, p.n, p.k, 1.0f, a.data<float>() + i * p.m * p.k, p.k, bi, p.n,
               0.0f, out.data<float>() + i * p.m * p.n, p.n);
  }
  if (any_requires_grad({a, b})) {
    auto node = std::make_shared<MatmulBackward>(b.requires_grad() ? a.detach() : Tensor(),
                                                 a.requires_grad() ? b.detach() : Tensor(), p,
                                                 a.shape(), b.shape());
    detail::record(out, {a, b}, node);
  }
  return out;
}

// --- linear: the weight is used transposed by GEMM, never copied ---
class LinearBackward : public Node {
 public:
  LinearBackward(Tensor x, Tensor w, Shape x_shape, int64_t rows, int64_t in, int64_t out)
      : x_(std::move(x)),
        w_(std::move(w)),
        x_shape_(std::move(x_shape)),
        rows_(rows),
        in_(in),
        out_(out) {}
  std::string name() const override { return "LinearBackward"; }
  // dx = dy W, dW = dy^T x, db = column sums of dy.
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx, gw, gb;
    const float* pg = g.data<float>();
    if (needs_grad(0)) {
      gx = Tensor::empty(x_shape_);
      cpu::sgemm(false, false, rows_, in_, out_, 1.0f, pg, out_, w_.data<float>(), in_, 0.0f,
                 gx.data<float>(), in_);
    }
    if (needs_grad(1)) {
      gw = Tensor::empty({out_, in_});
      cpu::sgemm(true, false, out_, in_, rows_, 1.0f, pg, out_, x_.data<float>(), in_, 0.0f,
                 gw.data<float>(), in_);
    }
    if (needs_grad(2)) {
      gb = Tensor::zeros({out_});
      float* pb = gb.data<float>();
      for (int64_t r = 0; r < rows_; ++r) {
        for (int64_t o = 0; o < out_; ++o) pb[o] += pg[r * out_ + o];
      }
    }
    return {gx, gw, gb};
  }

 private:
  Tensor x_, w_;
  Shape x_shape_;
  int64_t rows_, in_, out_;
};

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float(x, "linear", "x");
  detail::check_float(weight, "linear", "weight");
  PAC_CHECK(weight.dim() == 2, "linear: weight must be [out, in], got {}", weight.str());
  PAC_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
            "linear: input {} does not end in the weight's {} input features ({})", x.str(),
            weight.size(1), weight.str());
  int64_t in = weight.size(1), out = weight.size(0), rows = x.numel() / std::max<int64_t>(1, in);
  if (bias.defined()) {
    detail::check_float(bias, "linear", "bias");
    PAC_CHECK(bias.shape() == Shape{out}, "linear: bias must be [{}], got {}", out, bias.str());
  }
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = Tensor::empty(out_shape);
  float* py = y.data<float>();
  if (bias.defined()) {
    const float* pb = bias.data<float>();
    for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + out, py + r * out);
  }
  cpu::sgemm(false, true, rows, out, in, 1.0f, x.data<float>(), in, weight.data<float>(), in,
             bias.defined() ? 1.0f : 0.0f, py, out);
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<LinearBackward>(weight.requires_grad() ? x.detach() : Tensor(),
                                                 x.requires_grad() ? weight.detach() : Tensor(),
                                                 x.shape(), rows, in, out);
    detail::record(y, {x, weight, bias}, node);
  }
  return y;
}

}  // namespace pac
