// Elementwise arithmetic, reductions, permutes and the dropout mask on the GPU: one thread per
// output element, except the reductions (one block per output element).
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {

__device__ inline float apply_binary(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::add:
      return x + y;
    case BinaryOp::sub:
      return x - y;
    case BinaryOp::mul:
      return x * y;
    case BinaryOp::div:
      return x / y;
  }
  return 0.0f;
}

// The input offsets of output element i under a broadcast or permute.
__device__ inline void strided_offsets(const Strided& g, int64_t i, int64_t& a, int64_t& b) {
  a = 0;
  b = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    int64_t index = i % g.size[d];
    i /= g.size[d];
    a += index * g.stride_a[d];
    b += index * g.stride_b[d];
  }
}

}  // namespace

void binary(BinaryOp op, const float* a, const float* b, float* out, int64_t n,
            const Strided& geometry) {
  // Same shapes (a residual connection, a gradient sum) need no index arithmetic.
  bool contiguous = true;
  for (int d = 0; d < geometry.rank; ++d) {
    int64_t expected = 1;
    for (int e = d + 1; e < geometry.rank; ++e) expected *= geometry.size[e];
    contiguous = contiguous && (geometry.size[d] == 1 || (geometry.stride_a[d] == expected &&
                                                          geometry.stride_b[d] == expected));
  }
  if (contiguous) {
    return for_each(n, [=] __device__(int64_t i) { out[i] = apply_binary(op, a[i], b[i]); });
  }
  for_each(n, [=] __device__(int64_t i) {
    int64_t ia, ib;
    strided_offsets(geometry, i, ia, ib);
    out[i] = apply_binary(op, a[ia], b[ib]);
  });
}

void binary_scalar(BinaryOp op, const float* a, float value, float* out, int64_t n) {
  for_each(n, [=] __device__(int64_t i) { out[i] = apply_binary(op, a[i], value); });
}

void axpy(float* a, float alpha, const float* b, int64_t n) {
  for_each(n, [=] __device__(int64_t i) { a[i] += alpha * b[i]; });
}

void permute(const float* x, float* out, int64_t n, const Strided& geometry) {
  for_each(n, [=] __device__(int64_t i) {
    int64_t ia, unused;
    strided_offsets(geometry, i, ia, unused);
    out[i] = x[ia];
  });
}

// --- unary ops: the same rules as core/ops/unary.cpp ---
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;

__device__ inline float unary_value(UnaryOp op, float p, float v) {
  switch (op) {
    case UnaryOp::neg:
      return -v;
    case UnaryOp::abs:
      return fabsf(v);
    case UnaryOp::exp:
      return expf(v);
    case UnaryOp::log:
      return logf(v);
    case UnaryOp::sqrt:
      return sqrtf(v);
    case UnaryOp::pow:
      return powf(v, p);
    case UnaryOp::relu:
      return v > 0.0f ? v : 0.0f;
    case UnaryOp::tanh:
      return tanhf(v);
    case UnaryOp::sigmoid:
      return 1.0f / (1.0f + expf(-v));
    case UnaryOp::gelu:
      return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    case UnaryOp::gelu_tanh:
      return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
  }
  return 0.0f;
}

__device__ inline float unary_derivative(UnaryOp op, float p, float v, float y) {
  switch (op) {
    case UnaryOp::neg:
      return -1.0f;
    case UnaryOp::abs:
      return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : 0.0f;
    case UnaryOp::exp:
      return y;
    case UnaryOp::log:
      return 1.0f / v;
    case UnaryOp::sqrt:
      return 0.5f / y;
    case UnaryOp::pow:
      return p * powf(v, p - 1.0f);
    case UnaryOp::relu:
      return y > 0.0f ? 1.0f : 0.0f;
    case UnaryOp::tanh:
      return 1.0f - y * y;
    case UnaryOp::sigmoid:
      return y * (1.0f - y);
    case UnaryOp::gelu: {
      float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
      return cdf + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    case UnaryOp::gelu_tanh: {
      float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      float inner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * inner;
    }
  }
  return 0.0f;
}

}  // namespace

void unary_forward(UnaryOp op, float param, const float* x, float* y, int64_t n) {
  for_each(n, [=] __device__(int64_t i) { y[i] = unary_value(op, param, x[i]); });
}

void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* grad_y,
                    float* grad_x, int64_t n) {
  for_each(n, [=] __device__(int64_t i) {
    grad_x[i] = grad_y[i] * unary_derivative(op, param, x[i], y[i]);
  });
}

// --- reductions ---
namespace {

__global__ void reduce_sum_kernel(const float* x, float* out, Reduction r, bool accumulate) {
  __shared__ float scratch[32];
  int64_t o = blockIdx.x;
  int64_t base = 0, rest = o;
  for (int d = r.kept_rank - 1; d >= 0; --d) {
    base += (rest % r.kept_size[d]) * r.kept_stride[d];
    rest /= r.kept_size[d];
  }
  float acc = 0.0f;
  for (int64_t k = threadIdx.x; k < r.reduced; k += blockDim.x) {
    int64_t offset = base, left = k;
    for (int d = r.reduced_rank - 1; d >= 0; --d) {
      offset += (left % r.reduced_size[d]) * r.reduced_stride[d];
      left /= r.reduced_size[d];
    }
    acc += x[offset];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[o] = accumulate ? out[o] + acc : acc;
}

// x as [rows, cols], summed over the rows (a bias's gradient): 32 neighbouring columns per block,
// so a warp reads 32 neighbouring floats of a row at once, and 32 row groups whose partial sums a
// fixed tree adds.
__global__ void sum_rows_kernel(const float* x, float* out, int64_t rows, int64_t cols,
                                bool accumulate) {
  __shared__ float partial[32][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 32) acc += x[r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int half = 16; half > 0; half /= 2) {
    if (threadIdx.y < half)
      partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols)
    out[c] = accumulate ? out[c] + partial[0][threadIdx.x] : partial[0][threadIdx.x];
}

// Whether r sums leading dimensions onto the last, contiguous one: x is then [r.reduced, cols].
bool is_rows_onto_last(const Reduction& r) {
  if (r.kept_rank != 1 || r.kept_stride[0] != 1 || r.reduced_rank == 0) return false;
  int64_t stride = r.kept_size[0];
  for (int d = r.reduced_rank - 1; d >= 0; --d) {
    if (r.reduced_stride[d] != stride) return false;
    stride *= r.reduced_size[d];
  }
  return true;
}

__global__ void max_along_kernel(const float* x, float* out, int64_t* positions, int64_t size,
                                 int64_t inner, int64_t count) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  int64_t o = i / inner, j = i % inner;
  int64_t base = o * size * inner + j, best = base;
  for (int64_t k = 1; k < size; ++k) {
    int64_t at = base + k * inner;
    if (x[at] > x[best] || isnan(x[at])) best = at;
  }
  out[i] = x[best];
  positions[i] = best;
}

// Of two candidates (value, position), the one the sequential scan above keeps: the last NaN if
// either is one, else the larger value, and of equal values the first position.
__device__ inline bool keeps_second(float v1, int64_t p1, float v2, int64_t p2) {
  if (isnan(v1) || isnan(v2)) return isnan(v2) && (!isnan(v1) || p2 > p1);
  return v2 > v1 || (v2 == v1 && p2 < p1);
}

// One block per output, for few outputs over a long dimension (the maximum of a whole tensor, a
// row's argmax over a vocabulary): the threads stride over the dimension, then a tree in shared
// memory picks the block's answer. The same result as max_along_kernel.
__global__ void max_along_block_kernel(const float* x, float* out, int64_t* positions, int64_t size,
                                       int64_t inner) {
  __shared__ float values[256];
  __shared__ int64_t at[256];
  const int64_t i = blockIdx.x, o = i / inner, j = i % inner, base = o * size * inner + j;
  float best = x[base];
  int64_t best_at = base;
  for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
    int64_t p = base + k * inner;
    if (keeps_second(best, best_at, x[p], p)) {
      best = x[p];
      best_at = p;
    }
  }
  values[threadIdx.x] = best;
  at[threadIdx.x] = best_at;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && keeps_second(values[threadIdx.x], at[threadIdx.x],
                                           values[threadIdx.x + half], at[threadIdx.x + half])) {
      values[threadIdx.x] = values[threadIdx.x + half];
      at[threadIdx.x] = at[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[i] = values[0];
    positions[i] = at[0];
  }
}

}  // namespace

void reduce_sum(const float* x, float* out, const Reduction& r, bool accumulate) {
  if (r.outputs == 0) return;
  if (is_rows_onto_last(r) && r.reduced >= 64) {
    // Reading down the columns one block per output would read with a stride of a whole row.
    const int64_t cols = r.kept_size[0];
    sum_rows_kernel<<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 32), 0, compute_stream()>>>(
        x, out, r.reduced, cols, accumulate);
    PAC_CUDA_LAUNCH_CHECK();
    return;
  }
  // 32 to 512 threads: enough to cover the reduced elements without idle warps.
  int threads = 32;
  while (threads < 512 && threads < r.reduced) threads *= 2;
  reduce_sum_kernel<<<static_cast<unsigned>(r.outputs), threads, 0, compute_stream()>>>(x, out, r,
                                                                                        accumulate);
  PAC_CUDA_LAUNCH_CHECK();
}

void max_along(const float* x, float* out, int64_t* positions, int64_t outer, int64_t size,
               int64_t inner) {
  int64_t count = outer * inner;
  if (count == 0) return;
  // Few outputs over a long dimension would leave one thread scanning it alone.
  if (size >= 512 && count < 8192) {
    max_along_block_kernel<<<static_cast<unsigned>(count), 256, 0, compute_stream()>>>(
        x, out, positions, size, inner);
    PAC_CUDA_LAUNCH_CHECK();
    return;
  }
  max_along_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0,
                     compute_stream()>>>(x, out, positions, size, inner, count);
  PAC_CUDA_LAUNCH_CHECK();
}

void scatter_add(float* out, const int64_t* positions, const float* values, int64_t n) {
  for_each(n, [=] __device__(int64_t i) { atomicAdd(out + positions[i], values[i]); });
}

void index_gather(float* out, const float* src, const int32_t* positions, int64_t n,
                  bool accumulate) {
  if (accumulate)
    for_each(n, [=] __device__(int64_t j) { out[j] += src[positions[j]]; });
  else
    for_each(n, [=] __device__(int64_t j) { out[j] = src[positions[j]]; });
}

void index_scatter(float* out, const int32_t* positions, const float* values, int64_t n) {
  for_each(n, [=] __device__(int64_t j) { out[positions[j]] = values[j]; });
}

void position_to_index(const int64_t* positions, int64_t* out, int64_t n, int64_t size,
                       int64_t inner) {
  for_each(n, [=] __device__(int64_t i) { out[i] = (positions[i] / inner) % size; });
}

// --- dropout: a SplitMix64 hash of (seed, i) gives each element its own uniform number ---
void dropout_mask(float* mask, int64_t n, float keep, uint64_t seed) {
  float scale = 1.0f / keep;
  for_each(n, [=] __device__(int64_t i) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 bits in [0, 1)
    mask[i] = u < keep ? scale : 0.0f;
  });
}

}  // namespace pac::cuda
