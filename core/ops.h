// Every differentiable op of the framework. Each is defined in core/ops/<group>.cpp with its
// backward node right below its forward. All ops compute in f32 on contiguous tensors and record
// a Node when grad mode is on and an input requires a gradient.
#pragma once

#include <optional>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace pac {

// --- elementwise.cpp: binary ops with NumPy broadcasting ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, float value);
Tensor mul_scalar(const Tensor& a, float value);
// Shape of broadcasting a with b (throws when they are incompatible).
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums `t` down to `shape` over the broadcast dimensions (the backward of broadcasting).
Tensor sum_to(const Tensor& t, const Shape& shape);
// In-place, no autograd: a += b (same shape), a += alpha * b, a *= value.
void add_(Tensor& a, const Tensor& b);
void axpy_(Tensor& a, float alpha, const Tensor& b);
void scale_(Tensor& a, float value);
// In place, no autograd, by flat i32 positions (index: [n], dst or src: [n], the other any shape):
// dst[j] += src.flat[index[j]], the gather that accumulates a pruned weight's compact gradient;
// dst[j] = src.flat[index[j]]; and dst.flat[index[j]] = src[j].
void index_gather_add_(Tensor& dst, const Tensor& src, const Tensor& index);
void index_gather_(Tensor& dst, const Tensor& src, const Tensor& index);
void index_scatter_(Tensor& dst, const Tensor& src, const Tensor& index);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float s) { return add_scalar(a, s); }
inline Tensor operator*(const Tensor& a, float s) { return mul_scalar(a, s); }

// --- unary.cpp ---
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, float exponent);
Tensor relu(const Tensor& x);
enum class GeluApproximation { none, tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::none);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
inline Tensor operator-(const Tensor& x) { return neg(x); }

// --- matmul.cpp ---
// a [..., M, K] x b [K, N] -> [..., M, N]; or a [B..., M, K] x b [B..., K, N] with equal batch
// dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] x weight [out, in]^T + bias [out] -> [..., out], as PyTorch's F.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// --- reduce.cpp ---
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim);  // i64, no gradient

// --- softmax.cpp ---
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Attention's weights from scores [..., T, S]: softmax over the last dimension of scale * scores,
// where with `causal` query i sees keys j <= i + S - T only (the others get weight 0). One pass,
// where scaling, adding a -inf mask and softmax would take three.
Tensor attention_softmax(const Tensor& scores, float scale, bool causal);
// Mean cross-entropy of logits [N, C] against integer labels [N] (i32 or i64).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing = 0.0f);

// --- shape.cpp ---
Tensor reshape(const Tensor& x, const Shape& shape);  // a view; one dimension may be -1
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Elements start..end-1 along dim; a view (shared storage) when dim is 0, a copy otherwise.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);

// --- conv.cpp --- x [N, C, H, W], weight [OC, C/groups, KH, KW], bias [OC] or undefined.
struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  static Conv2dOptions square(int64_t stride, int64_t padding, int64_t dilation = 1,
                              int64_t groups = 1) {
    return {stride, stride, padding, padding, dilation, dilation, groups};
  }
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options = {});
// How conv2d runs on the CPU: through oneDNN when the library was built with it (the default
// then), or with the im2col + GEMM reference kernel. The tests check that both agree.
enum class ConvAlgorithm { im2col, dnnl };
bool dnnl_compiled();
void set_conv_algorithm(ConvAlgorithm algorithm);  // dnnl throws when it is not built in
ConvAlgorithm conv_algorithm();

// --- pool.cpp --- x [N, C, H, W]
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0,
                  bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// --- norm.cpp ---
// x [N, C] or [N, C, H, W]; weight/bias [C] or undefined. In training mode the batch statistics
// normalise and running_mean/running_var (if defined) are updated in place with `momentum`.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  float momentum = 0.1f, float eps = 1e-5f);
// Normalises over the trailing dimensions given by normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, float eps = 1e-5f);

// --- dropout.cpp, embedding.cpp ---
Tensor dropout(const Tensor& x, float p, bool training, Generator& generator);
// weight [V, D], indices (i32 or i64) of any shape -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace pac
