// Layer norm as custom kernels (one block per row), batch norm through cuDNN in training and as
// one elementwise pass in evaluation.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {

__global__ void layer_norm_forward_kernel(const float* x, const float* weight, const float* bias,
                                          float* y, float* mean_out, float* rstd_out, int64_t d,
                                          float eps) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * d;
  float* out = y + blockIdx.x * d;
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) total += row[j];
  float mean = block_sum(total, scratch) / static_cast<float>(d);
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    squares += (row[j] - mean) * (row[j] - mean);
  float rstd = rsqrtf(block_sum(squares, scratch) / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float v = (row[j] - mean) * rstd;
    if (weight != nullptr) v *= weight[j];
    if (bias != nullptr) v += bias[j];
    out[j] = v;
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy * weight.
__global__ void layer_norm_backward_input_kernel(const float* x, const float* weight,
                                                 const float* mean, const float* rstd,
                                                 const float* g, float* gx, int64_t d) {
  __shared__ float scratch[32];
  int64_t base = blockIdx.x * d;
  float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float dxhat = g[base + j] * (weight != nullptr ? weight[j] : 1.0f);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * (x[base + j] - mu) * rs;
  }
  float mean_dxhat = block_sum(sum_dxhat, scratch) / static_cast<float>(d);
  float mean_dxhat_xhat = block_sum(sum_dxhat_xhat, scratch) / static_cast<float>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float dxhat = g[base + j] * (weight != nullptr ? weight[j] : 1.0f);
    float xhat = (x[base + j] - mu) * rs;
    gx[base + j] = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

constexpr int64_t kRowsPerBlock = 64;

// Column sums of dy * xhat and dy over a chunk of rows, added atomically into zeroed outputs.
__global__ void layer_norm_backward_params_kernel(const float* x, const float* mean,
                                                  const float* rstd, const float* g, float* gw,
                                                  float* gb, int64_t rows, int64_t d) {
  int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  int64_t first = blockIdx.y * kRowsPerBlock;
  int64_t last = min(rows, first + kRowsPerBlock);
  float acc_w = 0.0f, acc_b = 0.0f;
  for (int64_t r = first; r < last; ++r) {
    float dy = g[r * d + j];
    acc_w += dy * (x[r * d + j] - mean[r]) * rstd[r];
    acc_b += dy;
  }
  if (gw != nullptr) atomicAdd(gw + j, acc_w);
  if (gb != nullptr) atomicAdd(gb + j, acc_b);
}

int threads_for(int64_t d) {
  int threads = 32;
  while (threads < 512 && threads < d) threads *= 2;
  return threads;
}

}  // namespace

void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y,
                        float* mean, float* rstd, int64_t rows, int64_t d, float eps) {
  if (rows == 0 || d == 0) return;
  layer_norm_forward_kernel<<<static_cast<unsigned>(rows), threads_for(d), 0, compute_stream()>>>(
      x, weight, bias, y, mean, rstd, d, eps);
  PAC_CUDA_LAUNCH_CHECK();
}

void layer_norm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                         const float* grad_y, float* grad_x, float* grad_weight, float* grad_bias,
                         int64_t rows, int64_t d) {
  if (rows == 0 || d == 0) return;
  if (grad_x != nullptr) {
    layer_norm_backward_input_kernel<<<static_cast<unsigned>(rows), threads_for(d), 0,
                                       compute_stream()>>>(x, weight, mean, rstd, grad_y, grad_x,
                                                           d);
    PAC_CUDA_LAUNCH_CHECK();
  }
  if (grad_weight == nullptr && grad_bias == nullptr) return;
  if (grad_weight != nullptr) zero_bytes(grad_weight, d * sizeof(float));
  if (grad_bias != nullptr) zero_bytes(grad_bias, d * sizeof(float));
  dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads),
            static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  layer_norm_backward_params_kernel<<<grid, kThreads, 0, compute_stream()>>>(
      x, mean, rstd, grad_y, grad_weight, grad_bias, rows, d);
  PAC_CUDA_LAUNCH_CHECK();
}

// --- batch norm: cuDNN's spatial mode normalises each channel over N and the plane ---
namespace {

struct BatchNormDescriptors {
  cudnnTensorDescriptor_t data = nullptr, channels = nullptr;
  BatchNormDescriptors(int64_t n, int64_t c, int64_t s) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&data));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&channels));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(data, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                           static_cast<int>(n), static_cast<int>(c),
                                           static_cast<int>(s), 1));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(channels, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                           static_cast<int>(c), 1, 1));
  }
  ~BatchNormDescriptors() {
    cudnnDestroyTensorDescriptor(data);
    cudnnDestroyTensorDescriptor(channels);
  }
  BatchNormDescriptors(const BatchNormDescriptors&) = delete;
  BatchNormDescriptors& operator=(const BatchNormDescriptors&) = delete;
};

void check_epsilon(float eps) {
  PAC_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm: eps {} is below cuDNN's minimum {}", eps,
            CUDNN_BN_MIN_EPSILON);
}

}  // namespace

void batch_norm_inference(const float* x, const float* weight, const float* bias,
                          const float* running_mean, const float* running_var, float* y, int64_t n,
                          int64_t c, int64_t s, float eps) {
  // As the CPU loop: y = (x - mean) * (weight / sqrt(var + eps)) + bias, per channel, one read
  // and one write of each value.
  for_each(n * c * s, [=] __device__(int64_t i) {
    const int64_t ch = (i / s) % c;
    const float scale = (weight != nullptr ? weight[ch] : 1.0f) / sqrtf(running_var[ch] + eps);
    const float shift = bias != nullptr ? bias[ch] : 0.0f;
    y[i] = (x[i] - running_mean[ch]) * scale + shift;
  });
}

void batch_norm_forward_training(const float* x, const float* weight, const float* bias, float* y,
                                 float* running_mean, float* running_var, float* save_mean,
                                 float* save_invstd, int64_t n, int64_t c, int64_t s,
                                 float momentum, float eps) {
  check_epsilon(eps);
  BatchNormDescriptors desc(n, c, s);
  const float one = 1.0f, zero = 0.0f;
  // cuDNN updates the running variance with the unbiased batch variance, as PyTorch does.
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, desc.data, x, desc.data, y, desc.channels,
      weight, bias, momentum, running_mean, running_var, eps, save_mean, save_invstd));
}

void batch_norm_backward_training(const float* x, const float* weight, const float* save_mean,
                                  const float* save_invstd, const float* grad_y, float* grad_x,
                                  float* grad_weight, float* grad_bias, int64_t n, int64_t c,
                                  int64_t s, float eps) {
  check_epsilon(eps);
  BatchNormDescriptors desc(n, c, s);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                              &zero, desc.data, x, desc.data, grad_y, desc.data,
                                              grad_x, desc.channels, weight, grad_weight, grad_bias,
                                              eps, save_mean, save_invstd));
}

}  // namespace pac::cuda
