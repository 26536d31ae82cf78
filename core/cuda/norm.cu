// Layer norm as custom kernels (one block per row); batch norm as custom kernels in training
// (chunked per-channel sums, then one elementwise pass) and as one elementwise pass in evaluation.
#include <algorithm>

#include "core/allocator.h"
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

// --- batch norm: each channel normalised over N and the plane, [n, c, s] ---
// Training mode takes each channel's statistics in one read, split into chunks so that a few
// wide channels still fill the GPU: every block sums its chunk, and one thread per channel adds
// the chunks in double. Sums are taken of x - K, K a value of the channel (its first), so that
// sum((x - K)^2) - sum(x - K)^2 / M does not cancel as the raw sums would when the mean is large
// against the spread.
namespace {

// Blocks per channel: enough blocks in all to fill an H200 several times over, none with fewer
// than 8 values a thread.
int64_t batch_norm_chunks(int64_t c, int64_t per_channel) {
  const int64_t wanted = (132 * 4 + c - 1) / c;
  const int64_t most = std::max<int64_t>(1, per_channel / (kThreads * 8));
  return std::clamp<int64_t>(wanted, 1, most);
}

// The t-th of the channel's values: image t / s, plane position t % s.
__device__ inline int64_t channel_index(int64_t t, int64_t ch, int64_t c, int64_t s) {
  return (t / s * c + ch) * s + t % s;
}

// Block (chunk, ch): partial[(ch * chunks + chunk) * 2 + {0, 1}] = the chunk's sums of a and b,
// a = x - K and b = (x - K)^2 (statistics) or a = dy and b = dy * (x - mean) (backward).
template <bool kBackward>
__global__ void batch_norm_partial_sums_kernel(const float* x, const float* grad_y,
                                               const float* mean, int64_t c, int64_t s, int64_t m,
                                               float* partial) {
  __shared__ float scratch[32];
  const int64_t ch = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int64_t length = (m + chunks - 1) / chunks;
  const int64_t first = chunk * length, end = min(m, first + length);
  const float k = kBackward ? mean[ch] : x[ch * s];
  float a = 0.0f, b = 0.0f;
  for (int64_t t = first + threadIdx.x; t < end; t += blockDim.x) {
    const int64_t i = channel_index(t, ch, c, s);
    const float centred = x[i] - k;
    if (kBackward) {
      a += grad_y[i];
      b += grad_y[i] * centred;
    } else {
      a += centred;
      b += centred * centred;
    }
  }
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (threadIdx.x == 0) {
    partial[(ch * chunks + chunk) * 2] = a;
    partial[(ch * chunks + chunk) * 2 + 1] = b;
  }
}

// The chunks' sums of one channel, in double.
__device__ inline void add_chunks(const float* partial, int64_t ch, int64_t chunks, double* a,
                                  double* b) {
  *a = 0.0;
  *b = 0.0;
  for (int64_t j = 0; j < chunks; ++j) {
    *a += partial[(ch * chunks + j) * 2];
    *b += partial[(ch * chunks + j) * 2 + 1];
  }
}

// A scratch buffer from the caching allocator for one call.
class Scratch {
 public:
  explicit Scratch(int64_t floats)
      : bytes_(static_cast<size_t>(floats) * sizeof(float)),
        data_(static_cast<float*>(cuda_allocate(bytes_, tag_))) {}
  ~Scratch() { cuda_free(data_, bytes_, tag_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return data_; }

 private:
  MemoryTag tag_ = current_memory_tag();  // declared first: the allocation reads it
  size_t bytes_;
  float* data_;
};

// The channels are the grid's second dimension.
void check_batch_norm_channels(int64_t c) {
  PAC_CHECK(c <= 65535, "batch_norm: the GPU kernels take at most 65535 channels, got {}", c);
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
  check_batch_norm_channels(c);
  const int64_t m = n * s, chunks = batch_norm_chunks(c, m);
  Scratch partial(c * chunks * 2);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(c));
  batch_norm_partial_sums_kernel<false>
      <<<grid, kThreads, 0, compute_stream()>>>(x, nullptr, nullptr, c, s, m, partial.data());
  PAC_CUDA_LAUNCH_CHECK();
  const float* sums = partial.data();
  // Per channel: mean and 1/std (the biased variance normalises the batch), and the running
  // statistics (the unbiased variance, as PyTorch and the CPU path keep them).
  for_each(c, [=] __device__(int64_t ch) {
    double shifted, squares;
    add_chunks(sums, ch, chunks, &shifted, &squares);
    const double count = static_cast<double>(m);
    const double mean = x[ch * s] + shifted / count;
    const double centred_squares = fmax(squares - shifted * shifted / count, 0.0);
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / sqrt(centred_squares / count + eps));
    if (running_mean != nullptr) {
      running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * mean);
      running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] +
                                           momentum * centred_squares / (count - 1.0));
    }
  });
  for_each(n * c * s, [=] __device__(int64_t i) {
    const int64_t ch = (i / s) % c;
    y[i] = (x[i] - save_mean[ch]) * (save_invstd[ch] * weight[ch]) + bias[ch];
  });
}

void batch_norm_backward_training(const float* x, const float* weight, const float* save_mean,
                                  const float* save_invstd, const float* grad_y, float* grad_x,
                                  float* grad_weight, float* grad_bias, int64_t n, int64_t c,
                                  int64_t s, float) {
  check_batch_norm_channels(c);
  const int64_t m = n * s, chunks = batch_norm_chunks(c, m);
  Scratch partial(c * chunks * 2);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(c));
  batch_norm_partial_sums_kernel<true>
      <<<grid, kThreads, 0, compute_stream()>>>(x, grad_y, save_mean, c, s, m, partial.data());
  PAC_CUDA_LAUNCH_CHECK();
  // sum(dy) is the bias's gradient and sum(dy * xhat) the weight's; the mean terms of the input's
  // gradient are the same sums over M (the batch statistics depend on x).
  const float* sums = partial.data();
  for_each(c, [=] __device__(int64_t ch) {
    double dy, dy_centred;
    add_chunks(sums, ch, chunks, &dy, &dy_centred);
    grad_bias[ch] = static_cast<float>(dy);
    grad_weight[ch] = static_cast<float>(dy_centred * save_invstd[ch]);
  });
  for_each(n * c * s, [=] __device__(int64_t i) {
    const int64_t ch = (i / s) % c;
    const float count = static_cast<float>(m), inv = save_invstd[ch];
    const float xhat = (x[i] - save_mean[ch]) * inv;
    grad_x[i] =
        weight[ch] * inv * (grad_y[i] - grad_bias[ch] / count - xhat * grad_weight[ch] / count);
  });
}

}  // namespace pac::cuda
