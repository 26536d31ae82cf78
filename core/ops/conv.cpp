// 2-D convolution: cuDNN on the GPU; on the CPU oneDNN or the reference im2col + GEMM. A few images
// are unfolded side by side so that one GEMM per group covers them all: small feature maps (14x14,
// 7x7) would otherwise make GEMMs too narrow to run fast. Backward recomputes the columns instead
// of keeping them from forward: less memory.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/autocast.h"
#include "core/cpu/dnnl_conv.h"
#include "core/cpu/gemm.h"
#include "core/cpu/im2col.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"
#include "core/saved_tensor.h"

namespace pac {

#ifdef PAC_WITH_DNNL
bool dnnl_compiled() { return true; }
static ConvAlgorithm current_algorithm = ConvAlgorithm::dnnl;
#else
bool dnnl_compiled() { return false; }
static ConvAlgorithm current_algorithm = ConvAlgorithm::im2col;
#endif

void set_conv_algorithm(ConvAlgorithm algorithm) {
  PAC_CHECK(algorithm != ConvAlgorithm::dnnl || dnnl_compiled(),
            "set_conv_algorithm: this build has no oneDNN (install libdnnl-dev and reconfigure)");
  current_algorithm = algorithm;
}

ConvAlgorithm conv_algorithm() { return current_algorithm; }

namespace {

struct ConvPlan {
  int64_t batch, in_channels, out_channels, groups;
  cpu::ConvGeometry geometry;  // per group
  int64_t group_in() const { return in_channels / groups; }
  int64_t group_out() const { return out_channels / groups; }
  int64_t in_image() const { return in_channels * geometry.height * geometry.width; }
  int64_t out_image() const { return out_channels * geometry.col_cols(); }
};

ConvPlan plan_conv(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  detail::check_float(x, "conv2d", "x");
  detail::check_float(w, "conv2d", "weight");
  detail::check_same_device(x, w, "conv2d", "weight");
  detail::check_same_device(x, bias, "conv2d", "bias");
  PAC_CHECK(x.dim() == 4, "conv2d: input must be [N, C, H, W], got {}", x.str());
  PAC_CHECK(w.dim() == 4, "conv2d: weight must be [OC, C/groups, KH, KW], got {}", w.str());
  PAC_CHECK(o.groups >= 1 && x.size(1) % o.groups == 0 && w.size(0) % o.groups == 0,
            "conv2d: groups={} must divide input channels {} and output channels {}", o.groups,
            x.size(1), w.size(0));
  PAC_CHECK(w.size(1) * o.groups == x.size(1),
            "conv2d: weight {} expects {} input channels (groups={}), input {} has {}", w.str(),
            w.size(1) * o.groups, o.groups, x.str(), x.size(1));
  PAC_CHECK(o.stride_h >= 1 && o.stride_w >= 1 && o.dilation_h >= 1 && o.dilation_w >= 1 &&
                o.pad_h >= 0 && o.pad_w >= 0,
            "conv2d: stride and dilation must be >= 1 and padding >= 0, got stride {}x{}, "
            "dilation {}x{}, padding {}x{}",
            o.stride_h, o.stride_w, o.dilation_h, o.dilation_w, o.pad_h, o.pad_w);
  if (bias.defined()) {
    detail::check_float(bias, "conv2d", "bias");
    PAC_CHECK(bias.shape() == Shape{w.size(0)}, "conv2d: bias must be [{}], got {}", w.size(0),
              bias.str());
  }
  ConvPlan p{x.size(0), x.size(1), w.size(0), o.groups, {}};
  auto& g = p.geometry;
  g = {w.size(1), x.size(2), x.size(3),    w.size(2),    w.size(3), o.stride_h, o.stride_w,
       o.pad_h,   o.pad_w,   o.dilation_h, o.dilation_w, 0,         0};
  int64_t span_h = o.dilation_h * (g.kernel_h - 1) + 1;
  int64_t span_w = o.dilation_w * (g.kernel_w - 1) + 1;
  PAC_CHECK(g.height + 2 * o.pad_h >= span_h && g.width + 2 * o.pad_w >= span_w,
            "conv2d: kernel span {}x{} is larger than the padded input {}x{}", span_h, span_w,
            g.height + 2 * o.pad_h, g.width + 2 * o.pad_w);
  g.out_h = (g.height + 2 * o.pad_h - span_h) / o.stride_h + 1;
  g.out_w = (g.width + 2 * o.pad_w - span_w) / o.stride_w + 1;
  return p;
}

// Images per GEMM: enough columns (about 2048) that small feature maps still give a wide GEMM,
// with the column buffer capped at 4M floats (16 MB).
int64_t images_per_chunk(const ConvPlan& p) {
  int64_t rows = p.geometry.col_rows(), cols = p.geometry.col_cols();
  int64_t wanted = (2048 + cols - 1) / cols;
  int64_t fits = (int64_t{4} << 20) / std::max<int64_t>(1, rows * cols);
  return std::max<int64_t>(1, std::min({wanted, fits, p.batch}));
}

cpu::ConvShape dnnl_shape(const ConvPlan& p, bool has_bias) {
  const auto& g = p.geometry;
  return {p.batch,      p.in_channels, g.height,   g.width, p.out_channels, g.kernel_h,
          g.kernel_w,   g.stride_h,    g.stride_w, g.pad_h, g.pad_w,        g.dilation_h,
          g.dilation_w, p.groups,      g.out_h,    g.out_w, has_bias};
}

// Unfolds image i of a chunk into columns [i * cols, (i + 1) * cols) of col [rows, ld].
void unfold(const float* image, const cpu::ConvGeometry& geo, float* col, int64_t ld) {
  if (!geo.is_pointwise()) return cpu::im2col(image, geo, col, ld);
  int64_t cols = geo.col_cols();
  for (int64_t r = 0; r < geo.col_rows(); ++r) {
    std::memcpy(col + r * ld, image + r * cols, cols * sizeof(float));
  }
}

// Folds columns of col [rows, ld] back onto one image, adding.
void fold(const float* col, const cpu::ConvGeometry& geo, float* image, int64_t ld) {
  if (!geo.is_pointwise()) return cpu::col2im(col, geo, image, ld);
  int64_t cols = geo.col_cols();
  for (int64_t r = 0; r < geo.col_rows(); ++r) {
    for (int64_t i = 0; i < cols; ++i) image[r * cols + i] += col[r * ld + i];
  }
}

}  // namespace

class Conv2dBackward : public Node {
 public:
  // x is saved only when the weight needs a gradient, w only when the input does.
  Conv2dBackward(SavedTensor x, Tensor w, Shape x_shape, Shape w_shape, ConvPlan plan,
                 bool has_bias, ConvAlgorithm algorithm, Precision precision)
      : x_(std::move(x)),
        w_(std::move(w)),
        x_shape_(std::move(x_shape)),
        w_shape_(std::move(w_shape)),
        plan_(plan),
        has_bias_(has_bias),
        algorithm_(algorithm),
        precision_(precision) {}
  std::string name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> apply(const Tensor& g) override {
    if (g.is_cuda()) return apply_cudnn(g);
    const Tensor x = rounded_values(x_.unpack(), precision_), w = rounded_values(w_, precision_);
    if (algorithm_ == ConvAlgorithm::dnnl) return apply_dnnl(g, x, w);
    const ConvPlan& p = plan_;
    const auto& geo = p.geometry;
    int64_t rows = geo.col_rows(), cols = geo.col_cols(), oc = p.group_out();
    int64_t group_image = p.group_in() * geo.height * geo.width;
    Tensor gx = needs_grad(0) ? Tensor::zeros(x_shape_) : Tensor();
    Tensor gw = needs_grad(1) ? Tensor::zeros(w_shape_) : Tensor();
    int64_t chunk = images_per_chunk(p);
    std::vector<float> col(rows * chunk * cols);    // unfolded x, then reused for dcol
    std::vector<float> gy_wide(oc * chunk * cols);  // dY of the chunk as [oc, nb * cols]
    const float* pg = g.data<float>();
    for (int64_t n0 = 0; n0 < p.batch; n0 += chunk) {
      int64_t nb = std::min(chunk, p.batch - n0), width = nb * cols;
      for (int64_t grp = 0; grp < p.groups; ++grp) {
        for (int64_t i = 0; i < nb; ++i) {
          for (int64_t o = 0; o < oc; ++o) {
            std::memcpy(gy_wide.data() + o * width + i * cols,
                        pg + (n0 + i) * p.out_image() + (grp * oc + o) * cols,
                        cols * sizeof(float));
          }
        }
        if (gw.defined()) {
          // dW [oc, rows] += dY [oc, width] x col^T [width, rows]
          for (int64_t i = 0; i < nb; ++i) {
            unfold(x.data<float>() + (n0 + i) * p.in_image() + grp * group_image, geo,
                   col.data() + i * cols, width);
          }
          cpu::sgemm(false, true, oc, rows, width, 1.0f, gy_wide.data(), width, col.data(), width,
                     1.0f, gw.data<float>() + grp * oc * rows, rows);
        }
        if (gx.defined()) {
          // dcol [rows, width] = W^T [rows, oc] x dY [oc, width], folded back onto each image
          cpu::sgemm(true, false, rows, width, oc, 1.0f, w.data<float>() + grp * oc * rows, rows,
                     gy_wide.data(), width, 0.0f, col.data(), width);
          for (int64_t i = 0; i < nb; ++i) {
            fold(col.data() + i * cols, geo,
                 gx.data<float>() + (n0 + i) * p.in_image() + grp * group_image, width);
          }
        }
      }
    }
    return {gx, gw, bias_grad(g)};
  }

 private:
  std::vector<Tensor> apply_cudnn(const Tensor& g) {
    auto shape = dnnl_shape(plan_, has_bias_);
    Tensor gx, gw, gb;
    if (needs_grad(0)) {
      gx = detail::empty_on(x_shape_, g);
      cuda::conv_backward_data(shape, g.data<float>(), w_.data<float>(), gx.data<float>());
    }
    if (needs_grad(1)) gw = detail::empty_on(w_shape_, g);
    if (has_bias_ && needs_grad(2)) gb = detail::empty_on({plan_.out_channels}, g);
    if (gw.defined() || gb.defined()) {
      cuda::conv_backward_filter(shape, gw.defined() ? x_.unpack().data<float>() : nullptr,
                                 g.data<float>(), gw.defined() ? gw.data<float>() : nullptr,
                                 gb.defined() ? gb.data<float>() : nullptr);
    }
    return {gx, gw, gb};
  }

  std::vector<Tensor> apply_dnnl(const Tensor& g, const Tensor& x, const Tensor& w) {
    auto shape = dnnl_shape(plan_, has_bias_);
    Tensor gx, gw, gb;
    if (needs_grad(0)) {
      gx = Tensor::empty(x_shape_);
      cpu::dnnl_conv_backward_data(shape, g.data<float>(), w.data<float>(), gx.data<float>());
    }
    if (needs_grad(1)) {
      // oneDNN computes the bias gradient in the same pass; keep it only when it is wanted.
      gw = Tensor::empty(w_shape_);
      Tensor bias_out = has_bias_ ? Tensor::empty({plan_.out_channels}) : Tensor();
      cpu::dnnl_conv_backward_weights(shape, x.data<float>(), g.data<float>(), gw.data<float>(),
                                      has_bias_ ? bias_out.data<float>() : nullptr);
      if (needs_grad(2)) gb = bias_out;
    } else {
      gb = bias_grad(g);
    }
    return {gx, gw, gb};
  }

  // d(bias)[c] = sum of dY over the batch and the plane of channel c.
  Tensor bias_grad(const Tensor& g) const {
    if (!has_bias_ || !needs_grad(2)) return Tensor();
    int64_t cols = plan_.geometry.col_cols();
    Tensor gb = Tensor::zeros({plan_.out_channels});
    float* pb = gb.data<float>();
    const float* pg = g.data<float>();
    for (int64_t n = 0; n < plan_.batch; ++n) {
      for (int64_t c = 0; c < plan_.out_channels; ++c) {
        const float* plane = pg + n * plan_.out_image() + c * cols;
        float acc = 0.0f;
        for (int64_t i = 0; i < cols; ++i) acc += plane[i];
        pb[c] += acc;
      }
    }
    return gb;
  }

  // Unrounded, as the op before made them (x in bf16/fp16 under autocast when those hold it).
  SavedTensor x_;
  Tensor w_;
  Shape x_shape_, w_shape_;
  ConvPlan plan_;
  bool has_bias_;
  ConvAlgorithm algorithm_;  // backward uses the forward's algorithm
  Precision precision_;      // autocast's, for the operands and dx, dW
};

// The reference kernel: unfold a chunk of images, one GEMM per group, scatter to NCHW.
static void im2col_forward(const ConvPlan& p, const Tensor& x, const Tensor& weight,
                           const Tensor& bias, Tensor& out) {
  const auto& geo = p.geometry;
  int64_t rows = geo.col_rows(), cols = geo.col_cols(), oc = p.group_out();
  int64_t group_image = p.group_in() * geo.height * geo.width;
  int64_t chunk = images_per_chunk(p);
  std::vector<float> col(rows * chunk * cols);   // [rows, nb * cols]
  std::vector<float> y_wide(oc * chunk * cols);  // [oc, nb * cols]
  for (int64_t n0 = 0; n0 < p.batch; n0 += chunk) {
    int64_t nb = std::min(chunk, p.batch - n0), width = nb * cols;
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      for (int64_t i = 0; i < nb; ++i) {
        unfold(x.data<float>() + (n0 + i) * p.in_image() + grp * group_image, geo,
               col.data() + i * cols, width);
      }
      // Y [oc, width] = W [oc, rows] x col [rows, width], then each image's block to NCHW
      cpu::sgemm(false, false, oc, width, rows, 1.0f, weight.data<float>() + grp * oc * rows, rows,
                 col.data(), width, 0.0f, y_wide.data(), width);
      for (int64_t i = 0; i < nb; ++i) {
        for (int64_t o = 0; o < oc; ++o) {
          std::memcpy(out.data<float>() + (n0 + i) * p.out_image() + (grp * oc + o) * cols,
                      y_wide.data() + o * width + i * cols, cols * sizeof(float));
        }
      }
    }
  }
  if (bias.defined()) {
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t c = 0; c < p.out_channels; ++c) {
        float* plane = out.data<float>() + n * p.out_image() + c * cols;
        float b = bias.data<float>()[c];
        for (int64_t i = 0; i < cols; ++i) plane[i] += b;
      }
    }
  }
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dOptions& options) {
  ConvPlan p = plan_conv(x_in, weight_in, bias_in, options);
  // Under autocast the operands and the result are rounded (core/autocast.h); the sums stay fp32.
  const Precision precision = autocast_precision_for("conv2d");
  const Tensor x = round_to_precision(x_in, precision);
  const Tensor weight = round_to_precision(weight_in, precision);
  const Tensor bias = round_to_precision(bias_in, precision);
  const auto& geo = p.geometry;
  Tensor out = detail::empty_on({p.batch, p.out_channels, geo.out_h, geo.out_w}, x);
  ConvAlgorithm algorithm = current_algorithm;
  if (x.is_cuda()) {
    cuda::conv_forward(dnnl_shape(p, bias.defined()), x.data<float>(), weight.data<float>(),
                       bias.defined() ? bias.data<float>() : nullptr, out.data<float>());
  } else if (algorithm == ConvAlgorithm::dnnl) {
    cpu::dnnl_conv_forward(dnnl_shape(p, bias.defined()), x.data<float>(), weight.data<float>(),
                           bias.defined() ? bias.data<float>() : nullptr, out.data<float>());
  } else {
    im2col_forward(p, x, weight, bias, out);
  }
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<Conv2dBackward>(
        SavedTensor(weight.requires_grad() ? x_in : Tensor()),
        x.requires_grad() ? weight_in.detach() : Tensor(), x.shape(), weight.shape(), p,
        bias.defined(), algorithm, precision);
    detail::record(out, {x, weight, bias}, node);
  }
  return round_to_precision(out, precision);
}

}  // namespace pac
