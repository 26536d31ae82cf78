// 2-D convolution as im2col + GEMM, one image and one group at a time (the column buffer of one
// image stays in cache). Backward recomputes the columns instead of keeping them: less memory.
#include <cstring>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/im2col.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

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

}  // namespace

class Conv2dBackward : public Node {
 public:
  // x is saved only when the weight needs a gradient, w only when the input does.
  Conv2dBackward(Tensor x, Tensor w, Shape x_shape, Shape w_shape, ConvPlan plan, bool has_bias)
      : x_(std::move(x)),
        w_(std::move(w)),
        x_shape_(std::move(x_shape)),
        w_shape_(std::move(w_shape)),
        plan_(plan),
        has_bias_(has_bias) {}
  std::string name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> apply(const Tensor& g) override {
    const ConvPlan& p = plan_;
    const auto& geo = p.geometry;
    int64_t rows = geo.col_rows(), cols = geo.col_cols();
    int64_t oc = p.group_out();
    Tensor gx, gw, gb;
    if (needs_grad(0)) gx = Tensor::zeros(x_shape_);
    if (needs_grad(1)) gw = Tensor::zeros(w_shape_);
    std::vector<float> col(geo.is_pointwise() ? 0 : rows * cols);
    const float* pg = g.data<float>();
    const float* pw = needs_grad(0) ? w_.data<float>() : nullptr;
    for (int64_t n = 0; n < p.batch; ++n) {
      for (int64_t grp = 0; grp < p.groups; ++grp) {
        const float* gy = pg + n * p.out_image() + grp * oc * cols;  // [oc, cols]
        const float* wg = pw ? pw + grp * oc * rows : nullptr;       // [oc, rows]
        int64_t image_at = n * p.in_image() + grp * p.group_in() * geo.height * geo.width;
        if (needs_grad(1)) {
          // dW [oc, rows] += dY [oc, cols] x col^T [cols, rows]
          const float* cx = x_.data<float>() + image_at;
          if (!geo.is_pointwise()) {
            cpu::im2col(cx, geo, col.data());
            cx = col.data();
          }
          cpu::sgemm(false, true, oc, rows, cols, 1.0f, gy, cols, cx, cols, 1.0f,
                     gw.data<float>() + grp * oc * rows, rows);
        }
        if (needs_grad(0)) {
          // dcol [rows, cols] = W^T [rows, oc] x dY [oc, cols], folded back onto the image
          float* gimage = gx.data<float>() + image_at;
          if (geo.is_pointwise()) {
            cpu::sgemm(true, false, rows, cols, oc, 1.0f, wg, rows, gy, cols, 0.0f, gimage, cols);
          } else {
            cpu::sgemm(true, false, rows, cols, oc, 1.0f, wg, rows, gy, cols, 0.0f, col.data(),
                       cols);
            cpu::col2im(col.data(), geo, gimage);
          }
        }
      }
    }
    if (has_bias_ && needs_grad(2)) {
      gb = Tensor::zeros({p.out_channels});
      float* pb = gb.data<float>();
      for (int64_t n = 0; n < p.batch; ++n) {
        for (int64_t c = 0; c < p.out_channels; ++c) {
          const float* plane = pg + n * p.out_image() + c * cols;
          float acc = 0.0f;
          for (int64_t i = 0; i < cols; ++i) acc += plane[i];
          pb[c] += acc;
        }
      }
    }
    return {gx, gw, gb};
  }

 private:
  Tensor x_, w_;
  Shape x_shape_, w_shape_;
  ConvPlan plan_;
  bool has_bias_;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  ConvPlan p = plan_conv(x, weight, bias, options);
  const auto& geo = p.geometry;
  int64_t rows = geo.col_rows(), cols = geo.col_cols();
  int64_t oc = p.group_out();
  Tensor out = Tensor::empty({p.batch, p.out_channels, geo.out_h, geo.out_w});
  std::vector<float> col(geo.is_pointwise() ? 0 : rows * cols);
  for (int64_t n = 0; n < p.batch; ++n) {
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const float* cx =
          x.data<float>() + n * p.in_image() + grp * p.group_in() * geo.height * geo.width;
      if (!geo.is_pointwise()) {
        cpu::im2col(cx, geo, col.data());
        cx = col.data();
      }
      // Y [oc, cols] = W [oc, rows] x col [rows, cols]
      cpu::sgemm(false, false, oc, cols, rows, 1.0f, weight.data<float>() + grp * oc * rows, rows,
                 cx, cols, 0.0f, out.data<float>() + n * p.out_image() + grp * oc * cols, cols);
    }
    if (bias.defined()) {
      for (int64_t c = 0; c < p.out_channels; ++c) {
        float* plane = out.data<float>() + n * p.out_image() + c * cols;
        float b = bias.data<float>()[c];
        for (int64_t i = 0; i < cols; ++i) plane[i] += b;
      }
    }
  }
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<Conv2dBackward>(weight.requires_grad() ? x.detach() : Tensor(),
                                                 x.requires_grad() ? weight.detach() : Tensor(),
                                                 x.shape(), weight.shape(), p, bias.defined());
    detail::record(out, {x, weight, bias}, node);
  }
  return out;
}

}  // namespace pac
