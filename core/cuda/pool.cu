// Max and average pooling through cuDNN; adaptive average pooling as a custom kernel, since cuDNN
// has no adaptive mode.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {

struct PoolDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  PoolDescriptors(PoolKind kind, const PoolShape& s) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                           static_cast<int>(s.n), static_cast<int>(s.c),
                                           static_cast<int>(s.h), static_cast<int>(s.w)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                           static_cast<int>(s.n), static_cast<int>(s.c),
                                           static_cast<int>(s.out_h), static_cast<int>(s.out_w)));
    cudnnPoolingMode_t mode = kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : kind == PoolKind::average_include_pad
                                  ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    int k = static_cast<int>(s.kernel), pad = static_cast<int>(s.padding);
    int stride = static_cast<int>(s.stride);
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool, mode, CUDNN_PROPAGATE_NAN, k, k, pad, pad, stride,
                                            stride));
  }
  ~PoolDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyPoolingDescriptor(pool);
  }
  PoolDescriptors(const PoolDescriptors&) = delete;
  PoolDescriptors& operator=(const PoolDescriptors&) = delete;
};

// PyTorch's adaptive window along one axis: [floor(i size / out), ceil((i + 1) size / out)).
__device__ inline int64_t window_begin(int64_t i, int64_t size, int64_t out) {
  return i * size / out;
}
__device__ inline int64_t window_end(int64_t i, int64_t size, int64_t out) {
  return ((i + 1) * size + out - 1) / out;
}

}  // namespace

void pool_forward(PoolKind kind, const PoolShape& s, const float* x, float* y) {
  PoolDescriptors d(kind, s);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingForward(cudnn(), d.pool, &one, d.x, x, &zero, d.y, y));
}

void pool_backward(PoolKind kind, const PoolShape& s, const float* x, const float* y,
                   const float* grad_y, float* grad_x) {
  PoolDescriptors d(kind, s);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(
      cudnnPoolingBackward(cudnn(), d.pool, &one, d.y, y, d.y, grad_y, d.x, x, &zero, d.x, grad_x));
}

void adaptive_avg_pool_forward(const float* x, float* y, int64_t planes, int64_t h, int64_t w,
                               int64_t out_h, int64_t out_w) {
  for_each(planes * out_h * out_w, [=] __device__(int64_t o) {
    int64_t j = o % out_w, i = (o / out_w) % out_h, p = o / (out_w * out_h);
    int64_t r0 = window_begin(i, h, out_h), r1 = window_end(i, h, out_h);
    int64_t c0 = window_begin(j, w, out_w), c1 = window_end(j, w, out_w);
    const float* plane = x + p * h * w;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) acc += plane[r * w + c];
    }
    y[o] = acc / static_cast<float>((r1 - r0) * (c1 - c0));
  });
}

// Gathers, per input element, the shares of every window that covers it (no atomics).
void adaptive_avg_pool_backward(const float* grad_y, float* grad_x, int64_t planes, int64_t h,
                                int64_t w, int64_t out_h, int64_t out_w) {
  for_each(planes * h * w, [=] __device__(int64_t e) {
    int64_t c = e % w, r = (e / w) % h, p = e / (w * h);
    float acc = 0.0f;
    for (int64_t i = 0; i < out_h; ++i) {
      int64_t r0 = window_begin(i, h, out_h), r1 = window_end(i, h, out_h);
      if (r < r0 || r >= r1) continue;
      for (int64_t j = 0; j < out_w; ++j) {
        int64_t c0 = window_begin(j, w, out_w), c1 = window_end(j, w, out_w);
        if (c < c0 || c >= c1) continue;
        acc += grad_y[(p * out_h + i) * out_w + j] / static_cast<float>((r1 - r0) * (c1 - c0));
      }
    }
    grad_x[e] = acc;
  });
}

}  // namespace pac::cuda
