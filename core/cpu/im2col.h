// im2col / col2im: unfold the receptive fields of one image into the columns of a matrix so that
// a convolution becomes one GEMM, and fold such a matrix back (summing overlaps) for backward.
#pragma once

#include <cstdint>

namespace pac::cpu {

struct ConvGeometry {
  int64_t channels, height, width;  // input image (one group's channels)
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t pad_h, pad_w;
  int64_t dilation_h, dilation_w;
  int64_t out_h, out_w;
  int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  int64_t col_cols() const { return out_h * out_w; }
  // A 1x1, stride-1, unpadded convolution needs no unfolding: the image already is the matrix.
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
           pad_w == 0;
  }
};

// image [channels, height, width] -> col [channels * kernel_h * kernel_w, out_h * out_w], where
// consecutive rows of col are `ld` floats apart (ld >= out_h * out_w), so several images can be
// unfolded side by side into one wide matrix.
void im2col(const float* image, const ConvGeometry& g, float* col, int64_t ld);
// col [channels * kernel_h * kernel_w, out_h * out_w] (row stride ld) -> image (+=)
void col2im(const float* col, const ConvGeometry& g, float* image, int64_t ld);

}  // namespace pac::cpu
