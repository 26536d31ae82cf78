// Matrix products on the CPU's GEMM (core/cpu/gemm.h) or cuBLAS. Leading dimensions of `a` fold
// into M when `b` is a matrix (the Linear-layer case); equal leading dimensions on both sides give
// a batched product.
#include <algorithm>

#include "core/autocast.h"
#include "core/cpu/gemm.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"
#include "core/saved_tensor.h"

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
  detail::check_same_device(a, b, "matmul", "b");
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

// `batch` row-major products C_i = alpha op(A_i) op(B_i) + beta C_i, the operands `stride_*`
// floats apart (0 for one shared operand), on the device of `like`.
void batched_gemm(const Tensor& like, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                  int64_t stride_b, float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (like.is_cuda()) {
    if (batch == 1)
      return cuda::gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    return cuda::gemm_batched(trans_a, trans_b, m, n, k, 1.0f, a, lda, stride_a, b, ldb, stride_b,
                              0.0f, c, ldc, stride_c, batch);
  }
  for (int64_t i = 0; i < batch; ++i) {
    cpu::sgemm(trans_a, trans_b, m, n, k, 1.0f, a + i * stride_a, lda, b + i * stride_b, ldb, 0.0f,
               c + i * stride_c, ldc);
  }
}

}  // namespace

class MatmulBackward : public Node {
 public:
  MatmulBackward(SavedTensor a, SavedTensor b, MatmulPlan plan, Shape a_shape, Shape b_shape,
                 Precision precision)
      : a_(std::move(a)),
        b_(std::move(b)),
        plan_(std::move(plan)),
        a_shape_(std::move(a_shape)),
        b_shape_(std::move(b_shape)),
        precision_(precision) {}
  std::string name() const override { return "MatmulBackward"; }

  // dA = dC B^T and dB = A^T dC, per batch (or over the folded rows when b is shared).
  std::vector<Tensor> apply(const Tensor& g) override {
    const MatmulPlan& p = plan_;
    Tensor ga, gb;
    const float* pg = g.data<float>();
    const Tensor a = rounded_values(a_.unpack(), precision_);
    const Tensor b = rounded_values(b_.unpack(), precision_);
    // b is shared only when there is one product (its rows folded into M), so its stride is moot.
    int64_t stride_b = p.shared_b ? 0 : p.k * p.n;
    if (needs_grad(0)) {
      ga = detail::empty_on(a_shape_, g);
      batched_gemm(g, false, true, p.m, p.k, p.n, pg, p.n, p.m * p.n, b.data<float>(), p.n,
                   stride_b, ga.data<float>(), p.k, p.m * p.k, p.batch);
    }
    if (needs_grad(1)) {
      gb = detail::empty_on(b_shape_, g);
      batched_gemm(g, true, false, p.k, p.n, p.m, a.data<float>(), p.k, p.m * p.k, pg, p.n,
                   p.m * p.n, gb.data<float>(), p.n, stride_b, p.batch);
    }
    return {ga, gb};
  }

 private:
  // Unrounded, as the ops before made them (in bf16/fp16 under autocast when those hold them).
  SavedTensor a_, b_;
  MatmulPlan plan_;
  Shape a_shape_, b_shape_;
  Precision precision_;  // autocast's, for the operands and dA, dB
};

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  MatmulPlan p = plan_matmul(a_in, b_in);
  // Under autocast the operands and the result are rounded (core/autocast.h); the sums stay fp32.
  const Precision precision = autocast_precision_for("matmul");
  const Tensor a = round_to_precision(a_in, precision), b = round_to_precision(b_in, precision);
  Tensor out = detail::empty_on(p.out_shape, a);
  batched_gemm(a, false, false, p.m, p.n, p.k, a.data<float>(), p.k, p.m * p.k, b.data<float>(),
               p.n, p.shared_b ? 0 : p.k * p.n, out.data<float>(), p.n, p.m * p.n, p.batch);
  if (any_requires_grad({a, b})) {
    auto node = std::make_shared<MatmulBackward>(SavedTensor(b.requires_grad() ? a_in : Tensor()),
                                                 SavedTensor(a.requires_grad() ? b_in : Tensor()),
                                                 p, a.shape(), b.shape(), precision);
    detail::record(out, {a, b}, node);
  }
  return round_to_precision(out, precision);
}

// --- linear: the weight is used transposed by GEMM, never copied ---
class LinearBackward : public Node {
 public:
  LinearBackward(SavedTensor x, Tensor w, Shape x_shape, int64_t rows, int64_t in, int64_t out,
                 Precision precision)
      : x_(std::move(x)),
        w_(std::move(w)),
        x_shape_(std::move(x_shape)),
        rows_(rows),
        in_(in),
        out_(out),
        precision_(precision) {}
  std::string name() const override { return "LinearBackward"; }
  // dx = dy W, dW = dy^T x, db = column sums of dy.
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor gx, gw, gb;
    const float* pg = g.data<float>();
    const Tensor x = rounded_values(x_.unpack(), precision_), w = rounded_values(w_, precision_);
    if (needs_grad(0)) {
      gx = detail::empty_on(x_shape_, g);
      batched_gemm(g, false, false, rows_, in_, out_, pg, out_, 0, w.data<float>(), in_, 0,
                   gx.data<float>(), in_, 0, 1);
    }
    if (needs_grad(1)) {
      gw = detail::empty_on({out_, in_}, g);
      batched_gemm(g, true, false, out_, in_, rows_, pg, out_, 0, x.data<float>(), in_, 0,
                   gw.data<float>(), in_, 0, 1);
    }
    if (needs_grad(2) && g.is_cuda()) {
      gb = sum_to(g.view_flat(0, {rows_, out_}), {out_});
    } else if (needs_grad(2)) {
      gb = Tensor::zeros({out_});
      float* pb = gb.data<float>();
      for (int64_t r = 0; r < rows_; ++r) {
        for (int64_t o = 0; o < out_; ++o) pb[o] += pg[r * out_ + o];
      }
    }
    return {gx, gw, gb};
  }

 private:
  // Unrounded, as the op before made it (in bf16/fp16 under autocast when those hold it).
  SavedTensor x_;
  Tensor w_;
  Shape x_shape_;
  int64_t rows_, in_, out_;
  Precision precision_;  // autocast's, for the operands and dx, dW
};

// linear after its checks. Under autocast the operands and the result are rounded
// (core/autocast.h); the sums stay fp32.
static Tensor linear_checked(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                             int64_t rows, int64_t in, int64_t out) {
  const Precision precision = autocast_precision_for("linear");
  const Tensor x = round_to_precision(x_in, precision);
  const Tensor weight = round_to_precision(weight_in, precision);
  const Tensor bias = round_to_precision(bias_in, precision);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = detail::empty_on(out_shape, x);
  float* py = y.data<float>();
  float beta = bias.defined() ? 1.0f : 0.0f;  // y starts as the bias in every row
  if (x.is_cuda()) {
    if (bias.defined()) cuda::broadcast_row(py, bias.data<float>(), rows, out);
    cuda::gemm(false, true, rows, out, in, 1.0f, x.data<float>(), in, weight.data<float>(), in,
               beta, py, out);
  } else {
    if (bias.defined()) {
      const float* pb = bias.data<float>();
      for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + out, py + r * out);
    }
    cpu::sgemm(false, true, rows, out, in, 1.0f, x.data<float>(), in, weight.data<float>(), in,
               beta, py, out);
  }
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<LinearBackward>(
        SavedTensor(weight.requires_grad() ? x_in : Tensor()),
        x.requires_grad() ? weight_in.detach() : Tensor(), x.shape(), rows, in, out, precision);
    detail::record(y, {x, weight, bias}, node);
  }
  return round_to_precision(y, precision);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float(x, "linear", "x");
  detail::check_float(weight, "linear", "weight");
  detail::check_same_device(x, weight, "linear", "weight");
  detail::check_same_device(x, bias, "linear", "bias");
  PAC_CHECK(weight.dim() == 2, "linear: weight must be [out, in], got {}", weight.str());
  PAC_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
            "linear: input {} does not end in the weight's {} input features ({})", x.str(),
            weight.size(1), weight.str());
  int64_t in = weight.size(1), out = weight.size(0), rows = x.numel() / std::max<int64_t>(1, in);
  if (bias.defined()) {
    detail::check_float(bias, "linear", "bias");
    PAC_CHECK(bias.shape() == Shape{out}, "linear: bias must be [{}], got {}", out, bias.str());
  }
  return linear_checked(x, weight, bias, rows, in, out);
}

}  // namespace pac
