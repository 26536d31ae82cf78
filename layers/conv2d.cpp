#include "layers/conv2d.h"

#include "layers/init.h"

namespace pac::nn {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool with_bias,
               int64_t groups, int64_t dilation)
    : in_channels(in),
      out_channels(out),
      kernel(k),
      options(Conv2dOptions::square(stride, padding, dilation, groups)) {
  PAC_CHECK(in > 0 && out > 0 && k > 0 && groups > 0 && in % groups == 0 && out % groups == 0,
            "Conv2d: bad configuration in={} out={} kernel={} groups={}", in, out, k, groups);
  int64_t fan_in = in / groups * k * k;
  Generator& g = default_generator();
  weight = register_parameter("weight", init::default_uniform({out, in / groups, k, k}, fan_in, g));
  if (with_bias) bias = register_parameter("bias", init::default_uniform({out}, fan_in, g));
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight->data(), bias ? bias->data() : Tensor(), options);
}

std::string Conv2d::describe() const {
  std::string extra;
  if (options.groups != 1) extra += fmt::format(", groups={}", options.groups);
  if (options.dilation_h != 1) extra += fmt::format(", dilation={}", options.dilation_h);
  if (!bias) extra += ", bias=false";
  return fmt::format("Conv2d({}, {}, kernel={}, stride={}, padding={}{})", in_channels,
                     out_channels, kernel, options.stride_h, options.pad_h, extra);
}

}  // namespace pac::nn
