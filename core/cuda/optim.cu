// The optimizers' updates as one fused kernel per parameter, with the same arithmetic as
// optim/sgd.cpp and optim/adamw.cpp, over either a dense gradient or the compact one a compressor
// left (values at listed positions; pruned positions are zeroed).
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {
__device__ inline int64_t position_of(const CompactGrad& g, int64_t j) {
  return g.positions != nullptr ? g.positions[j] : j;
}
__device__ inline bool is_pruned(const CompactGrad& g, int64_t i) {
  return g.mask != nullptr && g.mask[i] == 0;
}
}  // namespace

void sgd_step(float* param, float* momentum_buf, const CompactGrad& g, float lr, float momentum,
              float dampening, float weight_decay, bool nesterov, bool first_step) {
  const float keep = 1.0f - dampening;
  for_each(g.count, [=] __device__(int64_t j) {
    int64_t i = position_of(g, j);
    if (is_pruned(g, i)) {
      param[i] = 0.0f;
      if (momentum_buf != nullptr) momentum_buf[i] = 0.0f;
      return;
    }
    float d = g.values[j] + weight_decay * param[i];
    if (momentum_buf == nullptr) {
      param[i] -= lr * d;
      return;
    }
    float b = first_step ? d : momentum * momentum_buf[i] + keep * d;
    momentum_buf[i] = b;
    param[i] -= lr * (nesterov ? d + momentum * b : b);
  });
}

void adamw_step(float* param, float* exp_avg, float* exp_avg_sq, const CompactGrad& g,
                float step_size, float sqrt_bias2, float beta1, float beta2, float eps,
                float decay) {
  for_each(g.count, [=] __device__(int64_t j) {
    int64_t i = position_of(g, j);
    if (is_pruned(g, i)) {
      param[i] = exp_avg[i] = exp_avg_sq[i] = 0.0f;
      return;
    }
    float grad = g.values[j];
    float w = param[i] * decay;
    float m = beta1 * exp_avg[i] + (1.0f - beta1) * grad;
    float v = beta2 * exp_avg_sq[i] + (1.0f - beta2) * grad * grad;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = w - step_size * m / (sqrtf(v) / sqrt_bias2 + eps);
  });
}

void apply_mask(float* values, const uint8_t* mask, int64_t n) {
  for_each(n, [=] __device__(int64_t i) {
    if (mask[i] == 0) values[i] = 0.0f;
  });
}

namespace {
__global__ void masked_reduce_kernel(MaskedReduce kind, const float* values, const uint8_t* mask,
                                     int64_t n, float* result) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if (mask != nullptr && mask[i] == 0) continue;
    float v = values[i];
    acc += kind == MaskedReduce::sum_squares ? v * v : (isfinite(v) ? 0.0f : 1.0f);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(result, acc);
}
}  // namespace

void masked_reduce(MaskedReduce kind, const float* values, const uint8_t* mask, int64_t n,
                   float* result) {
  if (n == 0) return;
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 4);
  masked_reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, compute_stream()>>>(
      kind, values, mask, n, result);
  PAC_CUDA_LAUNCH_CHECK();
}

}  // namespace pac::cuda
