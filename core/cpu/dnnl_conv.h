// Convolution through oneDNN (Debian's libdnnl), the library PyTorch uses for CPU convolution.
// It is to the CPU what cuDNN is to the GPU: an optional fast path. The im2col + GEMM kernel in
// core/ops/conv.cpp stays the reference that these results are tested against.
#pragma once

#include <cstdint>
#include <tuple>

namespace pac::cpu {

// Everything that determines a convolution's primitives; used as the cache key.
struct ConvShape {
  int64_t batch, in_channels, height, width;
  int64_t out_channels, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  int64_t out_h, out_w;
  bool has_bias;
  // Spelled out rather than defaulted: the CUDA files that share this struct are C++17.
  auto fields() const {
    return std::tie(batch, in_channels, height, width, out_channels, kernel_h, kernel_w, stride_h,
                    stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, out_h, out_w, has_bias);
  }
  bool operator==(const ConvShape& other) const { return fields() == other.fields(); }
};

// All pointers are dense NCHW / OIHW f32 buffers; bias and grad_bias may be null. In a build
// without oneDNN (-DPAC_DNNL=OFF) they throw; set_conv_algorithm refuses to select them there.
void dnnl_conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                       float* y);
void dnnl_conv_backward_data(const ConvShape& s, const float* grad_y, const float* w,
                             float* grad_x);
void dnnl_conv_backward_weights(const ConvShape& s, const float* x, const float* grad_y,
                                float* grad_w, float* grad_bias);

}  // namespace pac::cpu
