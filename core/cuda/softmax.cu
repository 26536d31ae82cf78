// softmax / log-softmax, cross-entropy and embedding on the GPU. Softmax over the last dimension
// (the usual case) gives one block per row; over an inner dimension, one thread per column.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {

__global__ void softmax_rows_kernel(const float* x, float* y, int64_t size, bool log_space) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * size;
  float* out = y + blockIdx.x * size;
  float peak = -INFINITY;
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) peak = fmaxf(peak, row[k]);
  peak = block_max(peak, scratch);
  float total = 0.0f;
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) total += expf(row[k] - peak);
  float log_total = logf(block_sum(total, scratch));
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    float shifted = row[k] - peak - log_total;
    out[k] = log_space ? shifted : expf(shifted);
  }
}

__global__ void softmax_rows_backward_kernel(const float* y, const float* g, float* gx,
                                             int64_t size, bool log_space) {
  __shared__ float scratch[32];
  int64_t base = blockIdx.x * size;
  float dot = 0.0f;
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    dot += log_space ? g[base + k] : g[base + k] * y[base + k];
  }
  dot = block_sum(dot, scratch);
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    int64_t at = base + k;
    gx[at] = log_space ? g[at] - expf(y[at]) * dot : y[at] * (g[at] - dot);
  }
}

int threads_for(int64_t size) {
  int threads = 32;
  while (threads < 1024 && threads < size) threads *= 2;
  return threads;
}

}  // namespace

void softmax_forward(const float* x, float* y, int64_t outer, int64_t size, int64_t inner,
                     bool log_space) {
  if (outer * inner == 0 || size == 0) return;
  if (inner == 1) {
    softmax_rows_kernel<<<static_cast<unsigned>(outer), threads_for(size), 0, compute_stream()>>>(
        x, y, size, log_space);
    PAC_CUDA_LAUNCH_CHECK();
    return;
  }
  for_each(outer * inner, [=] __device__(int64_t t) {
    int64_t base = (t / inner) * size * inner + t % inner;
    float peak = -INFINITY;
    for (int64_t k = 0; k < size; ++k) peak = fmaxf(peak, x[base + k * inner]);
    float total = 0.0f;
    for (int64_t k = 0; k < size; ++k) total += expf(x[base + k * inner] - peak);
    float log_total = logf(total);
    for (int64_t k = 0; k < size; ++k) {
      float shifted = x[base + k * inner] - peak - log_total;
      y[base + k * inner] = log_space ? shifted : expf(shifted);
    }
  });
}

void softmax_backward(const float* y, const float* grad_y, float* grad_x, int64_t outer,
                      int64_t size, int64_t inner, bool log_space) {
  if (outer * inner == 0 || size == 0) return;
  if (inner == 1) {
    softmax_rows_backward_kernel<<<static_cast<unsigned>(outer), threads_for(size), 0,
                                   compute_stream()>>>(y, grad_y, grad_x, size, log_space);
    PAC_CUDA_LAUNCH_CHECK();
    return;
  }
  for_each(outer * inner, [=] __device__(int64_t t) {
    int64_t base = (t / inner) * size * inner + t % inner;
    float dot = 0.0f;
    for (int64_t k = 0; k < size; ++k) {
      int64_t at = base + k * inner;
      dot += log_space ? grad_y[at] : grad_y[at] * y[at];
    }
    for (int64_t k = 0; k < size; ++k) {
      int64_t at = base + k * inner;
      grad_x[at] = log_space ? grad_y[at] - expf(y[at]) * dot : y[at] * (grad_y[at] - dot);
    }
  });
}

namespace {

__device__ inline int64_t label_at(const void* labels, bool i64, int64_t r) {
  return i64 ? static_cast<const int64_t*>(labels)[r] : static_cast<const int32_t*>(labels)[r];
}

// The first out-of-range index a kernel met, in device memory; the host copies it out after the
// copies that synchronise with the device (raise_index_error).
struct IndexError {
  int op;  // 0: none; 1: a cross-entropy label; 2: an embedding index; -1: being written
  long long index, position, bound;
};
enum : int { kNoError = 0, kLabel = 1, kEmbeddingIndex = 2 };

__device__ IndexError g_index_error;

IndexError* device_index_error() {
  static IndexError* device = [] {
    void* d = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(&d, g_index_error));
    return static_cast<IndexError*>(d);
  }();
  return device;
}

// Records (op, index, position, bound) unless an earlier error is recorded already.
__device__ void record_index_error(IndexError* record, int op, int64_t index, int64_t position,
                                   int64_t bound) {
  if (atomicCAS(&record->op, kNoError, -1) != kNoError) return;
  record->index = index;
  record->position = position;
  record->bound = bound;
  __threadfence();
  atomicExch(&record->op, op);
}

// One block: each thread sums its rows' losses, then the block adds them up.
__global__ void cross_entropy_kernel(const float* lp, const void* labels, bool i64, float* loss,
                                     int64_t n, int64_t c, float smoothing, IndexError* error) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    int64_t label = label_at(labels, i64, r);
    if (label < 0 || label >= c) {
      record_index_error(error, kLabel, label, r, c);
      acc += NAN;
      continue;
    }
    const float* row = lp + r * c;
    float row_sum = 0.0f;
    if (smoothing != 0.0f) {
      for (int64_t k = 0; k < c; ++k) row_sum += row[k];
    }
    acc -= (1.0f - smoothing) * row[label] + smoothing / static_cast<float>(c) * row_sum;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *loss = acc / static_cast<float>(n);
}

}  // namespace

void cross_entropy_forward(const float* log_probs, const void* labels, bool labels_i64, float* loss,
                           int64_t n, int64_t c, float smoothing) {
  cross_entropy_kernel<<<1, 512, 0, compute_stream()>>>(log_probs, labels, labels_i64, loss, n, c,
                                                        smoothing, device_index_error());
  PAC_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(const float* log_probs, const void* labels, bool labels_i64,
                            const float* grad_loss, float* grad_x, int64_t n, int64_t c,
                            float smoothing) {
  float uniform = smoothing / static_cast<float>(c);
  for_each(n * c, [=] __device__(int64_t i) {
    int64_t r = i / c, k = i % c;
    float target = uniform + (k == label_at(labels, labels_i64, r) ? 1.0f - smoothing : 0.0f);
    grad_x[i] = (expf(log_probs[i]) - target) * (*grad_loss / static_cast<float>(n));
  });
}

void embedding_forward(const float* table, const void* indices, bool indices_i64, float* out,
                       int64_t count, int64_t dim, int64_t vocab) {
  IndexError* error = device_index_error();
  for_each(count * dim, [=] __device__(int64_t i) {
    int64_t row = label_at(indices, indices_i64, i / dim);
    bool inside = row >= 0 && row < vocab;
    if (!inside && i % dim == 0) record_index_error(error, kEmbeddingIndex, row, i / dim, vocab);
    out[i] = inside ? table[row * dim + i % dim] : NAN;
  });
}

void raise_index_error() {
  IndexError seen{};
  CUDA_CHECK(cudaMemcpy(&seen, device_index_error(), sizeof(seen), cudaMemcpyDeviceToHost));
  if (seen.op == kNoError) return;
  CUDA_CHECK(cudaMemset(device_index_error(), 0, sizeof(IndexError)));
  // The CPU's messages (core/ops/softmax.cpp, core/ops/embedding.cpp).
  if (seen.op == kLabel) {
    PAC_FAIL("cross_entropy: label {} at position {} is outside [0, {})", seen.index, seen.position,
             seen.bound);
  }
  PAC_FAIL("embedding: index {} at position {} is outside [0, {})", seen.index, seen.position,
           seen.bound);
}

void embedding_backward(const float* grad_out, const void* indices, bool indices_i64,
                        float* grad_table, int64_t count, int64_t dim, int64_t vocab) {
  for_each(count * dim, [=] __device__(int64_t i) {
    int64_t row = label_at(indices, indices_i64, i / dim);
    if (row >= 0 && row < vocab) atomicAdd(grad_table + row * dim + i % dim, grad_out[i]);
  });
}

}  // namespace pac::cuda
