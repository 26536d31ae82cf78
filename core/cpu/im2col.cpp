#include "core/cpu/im2col.h"

#include <algorithm>
#include <cstring>

namespace pac::cpu {

// Output columns ow whose input column ow * stride + offset lies inside [0, width).
static void valid_range(int64_t offset, int64_t stride, int64_t width, int64_t out_w,
                        int64_t& begin, int64_t& end) {
  begin = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  end = width - offset <= 0 ? 0 : (width - offset + stride - 1) / stride;
  begin = std::min(begin, out_w);
  end = std::clamp(end, begin, out_w);
}

void im2col(const float* image, const ConvGeometry& g, float* col, int64_t ld) {
  for (int64_t c = 0; c < g.channels; ++c) {
    const float* channel = image + c * g.height * g.width;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ld;
        int64_t col_offset = kw * g.dilation_w - g.pad_w;
        int64_t begin, end;
        valid_range(col_offset, g.stride_w, g.width, g.out_w, begin, end);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          float* dst = row + oh * g.out_w;
          int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
          if (ih < 0 || ih >= g.height) {
            std::memset(dst, 0, g.out_w * sizeof(float));
            continue;
          }
          const float* src = channel + ih * g.width + col_offset;
          std::fill(dst, dst + begin, 0.0f);
          if (g.stride_w == 1) {
            std::memcpy(dst + begin, src + begin, (end - begin) * sizeof(float));
          } else {
            for (int64_t ow = begin; ow < end; ++ow) dst[ow] = src[ow * g.stride_w];
          }
          std::fill(dst + end, dst + g.out_w, 0.0f);
        }
      }
    }
  }
}

void col2im(const float* col, const ConvGeometry& g, float* image, int64_t ld) {
  for (int64_t c = 0; c < g.channels; ++c) {
    float* channel = image + c * g.height * g.width;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ld;
        int64_t col_offset = kw * g.dilation_w - g.pad_w;
        int64_t begin, end;
        valid_range(col_offset, g.stride_w, g.width, g.out_w, begin, end);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
          if (ih < 0 || ih >= g.height) continue;
          const float* src = row + oh * g.out_w;
          float* dst = channel + ih * g.width + col_offset;
          for (int64_t ow = begin; ow < end; ++ow) dst[ow * g.stride_w] += src[ow];
        }
      }
    }
  }
}

}  // namespace pac::cpu
