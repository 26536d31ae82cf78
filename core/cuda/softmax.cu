// softmax / log-softmax, cross-entropy and embedding on the GPU. Softmax over the last dimension
// (the usual case) gives one warp per row up to 1024 entries and one block per longer row; over
// an inner dimension, one thread per column. The row kernels also scale their inputs and mask
// attention's future positions, so attention needs no separate passes for either.
#include <type_traits>

#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {

// How many leading entries of row r take part: all, or with causal_queries = T > 0 (rows are
// the queries of [..., T, size] attention scores), those up to the query's own position.
__device__ inline int64_t row_limit(int64_t r, int64_t size, int64_t causal_queries) {
  return causal_queries > 0 ? r % causal_queries + size - causal_queries + 1 : size;
}

// Rows of at most 32 * kPerLane entries: one warp per row, the row held in registers (one read
// and one write of each value, warp shuffles instead of block barriers). Attention's rows are
// this short; a block per row of 1024 threads spent most of its time at barriers.
template <int kPerLane>
__global__ void softmax_warp_kernel(const float* x, float* y, int64_t rows, int64_t size,
                                    bool log_space, float scale, int64_t causal_queries) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + r * size;
  float* out = y + r * size;
  const int64_t limit = row_limit(r, size, causal_queries);
  float v[kPerLane];
  float peak = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = lane + 32 * i;
    v[i] = k < limit ? row[k] * scale : -INFINITY;
    peak = fmaxf(peak, v[i]);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    peak = fmaxf(peak, __shfl_xor_sync(0xffffffffu, peak, offset));
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) total += lane + 32 * i < limit ? expf(v[i] - peak) : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  const float log_total = logf(total);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = lane + 32 * i;
    if (k >= size) break;
    const float shifted = v[i] - peak - log_total;  // -inf past the limit
    out[k] = log_space ? shifted : expf(shifted);
  }
}

template <int kPerLane>
__global__ void softmax_warp_backward_kernel(const float* y, const float* g, float* gx,
                                             int64_t rows, int64_t size, bool log_space,
                                             float scale) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t base = r * size;
  float yv[kPerLane], gv[kPerLane];
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = lane + 32 * i;
    yv[i] = k < size ? y[base + k] : 0.0f;
    gv[i] = k < size ? g[base + k] : 0.0f;
    dot += log_space ? gv[i] : gv[i] * yv[i];
  }
  for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = lane + 32 * i;
    if (k >= size) break;
    gx[base + k] = scale * (log_space ? gv[i] - expf(yv[i]) * dot : yv[i] * (gv[i] - dot));
  }
}

// Longer rows (a vocabulary's logits): one block per row.
__global__ void softmax_rows_kernel(const float* x, float* y, int64_t size, bool log_space,
                                    float scale, int64_t causal_queries) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * size;
  float* out = y + blockIdx.x * size;
  const int64_t limit = row_limit(blockIdx.x, size, causal_queries);
  float peak = -INFINITY;
  for (int64_t k = threadIdx.x; k < limit; k += blockDim.x) peak = fmaxf(peak, row[k] * scale);
  peak = block_max(peak, scratch);
  float total = 0.0f;
  for (int64_t k = threadIdx.x; k < limit; k += blockDim.x) total += expf(row[k] * scale - peak);
  float log_total = logf(block_sum(total, scratch));
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    float shifted = k < limit ? row[k] * scale - peak - log_total : -INFINITY;
    out[k] = log_space ? shifted : expf(shifted);
  }
}

__global__ void softmax_rows_backward_kernel(const float* y, const float* g, float* gx,
                                             int64_t size, bool log_space, float scale) {
  __shared__ float scratch[32];
  int64_t base = blockIdx.x * size;
  float dot = 0.0f;
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    dot += log_space ? g[base + k] : g[base + k] * y[base + k];
  }
  dot = block_sum(dot, scratch);
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    int64_t at = base + k;
    gx[at] = scale * (log_space ? g[at] - expf(y[at]) * dot : y[at] * (g[at] - dot));
  }
}

int threads_for(int64_t size) {
  int threads = 32;
  while (threads < 1024 && threads < size) threads *= 2;
  return threads;
}

// Calls launch(std::integral_constant<int, kPerLane>) with the smallest count of values per lane
// that holds a row of `size`; false when the row is too long for a warp.
template <class Launch>
bool with_warp_rows(int64_t size, Launch&& launch) {
  if (size <= 32) return launch(std::integral_constant<int, 1>{}), true;
  if (size <= 64) return launch(std::integral_constant<int, 2>{}), true;
  if (size <= 128) return launch(std::integral_constant<int, 4>{}), true;
  if (size <= 256) return launch(std::integral_constant<int, 8>{}), true;
  if (size <= 512) return launch(std::integral_constant<int, 16>{}), true;
  if (size <= 1024) return launch(std::integral_constant<int, 32>{}), true;
  return false;
}

constexpr int kWarpRowsPerBlock = 4;  // 128 threads, a row per warp

unsigned warp_row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
}

}  // namespace

void softmax_forward(const float* x, float* y, int64_t outer, int64_t size, int64_t inner,
                     bool log_space, float scale, int64_t causal_queries) {
  if (outer * inner == 0 || size == 0) return;
  if (inner == 1) {
    const bool warp_rows = with_warp_rows(size, [&](auto per_lane) {
      softmax_warp_kernel<decltype(per_lane)::value>
          <<<warp_row_blocks(outer), 32 * kWarpRowsPerBlock, 0, compute_stream()>>>(
              x, y, outer, size, log_space, scale, causal_queries);
    });
    if (!warp_rows) {
      softmax_rows_kernel<<<static_cast<unsigned>(outer), threads_for(size), 0, compute_stream()>>>(
          x, y, size, log_space, scale, causal_queries);
    }
    PAC_CUDA_LAUNCH_CHECK();
    return;
  }
  // Over an inner dimension (no scale or mask here: the op only asks for them on the last one).
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
                      int64_t size, int64_t inner, bool log_space, float scale) {
  if (outer * inner == 0 || size == 0) return;
  if (inner == 1) {
    const bool warp_rows = with_warp_rows(size, [&](auto per_lane) {
      softmax_warp_backward_kernel<decltype(per_lane)::value>
          <<<warp_row_blocks(outer), 32 * kWarpRowsPerBlock, 0, compute_stream()>>>(
              y, grad_y, grad_x, outer, size, log_space, scale);
    });
    if (!warp_rows) {
      softmax_rows_backward_kernel<<<static_cast<unsigned>(outer), threads_for(size), 0,
                                     compute_stream()>>>(y, grad_y, grad_x, size, log_space, scale);
    }
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
      grad_x[at] =
          scale * (log_space ? grad_y[at] - expf(y[at]) * dot : y[at] * (grad_y[at] - dot));
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
