// The CUDA kernels behind the ops, as plain launchers on device pointers. The ops in core/ops/
// keep the shape checks and the autograd nodes, and call these when their tensors are on a GPU;
// the CPU loops beside each call are the reference the GPU tests compare against. Everything is
// queued on the compute stream (core/cuda/context.h) and returns without waiting.
//
// In a build without CUDA each launcher is an inline function that throws, so the ops compile
// unchanged; it is never reached, because no tensor can be on a GPU there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu/dnnl_conv.h"  // ConvShape: the same description serves oneDNN and cuDNN
#include "core/dtype.h"
#include "core/error.h"

namespace pac::cuda {

#ifdef PAC_WITH_CUDA
#define PAC_CUDA_FN(...) __VA_ARGS__;
#else
[[noreturn]] inline void not_compiled() {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
#define PAC_CUDA_FN(...) \
  [[noreturn, maybe_unused]] inline __VA_ARGS__ { not_compiled(); }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif

// Up to this many dimensions in broadcasts, permutes and reductions.
constexpr int kMaxDims = 8;

// Offsets into two inputs for every element of a row-major output: stride 0 where an input is
// broadcast along a dimension.
struct Strided {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride_a[kMaxDims] = {};
  int64_t stride_b[kMaxDims] = {};
};

// A reduction of a row-major input onto `outputs` elements: the kept dimensions index the output
// (row-major, with the input's strides), the reduced dimensions are summed over.
struct Reduction {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_size[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  int64_t reduced_size[kMaxDims] = {}, reduced_stride[kMaxDims] = {};
  int64_t outputs = 1, reduced = 1;
};

enum class BinaryOp { add, sub, mul, div };
enum class UnaryOp { neg, abs, exp, log, sqrt, pow, relu, tanh, sigmoid, gelu, gelu_tanh };

// --- memory (memory.cu) ---
// Copies between any two of host and device. Returns at once for a copy from pinned host memory
// to the device (queued on the compute stream); waits for the others, since the host may read or
// free its side as soon as this returns.
PAC_CUDA_FN(void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                            size_t nbytes, bool host_pinned))
PAC_CUDA_FN(void zero_bytes(void* dst, size_t nbytes))
PAC_CUDA_FN(void fill(float* dst, float value, int64_t n))
// Element conversion through float, as Tensor::to(DType) does on the CPU.
PAC_CUDA_FN(void convert(const void* src, DType from, void* dst, DType to, int64_t n))
// rows x width floats from src (rows `src_pitch` apart) to dst (`dst_pitch` apart); slice and cat.
PAC_CUDA_FN(void copy_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch,
                           int64_t rows, int64_t width))

// --- elementwise.cu ---
PAC_CUDA_FN(void binary(BinaryOp op, const float* a, const float* b, float* out, int64_t n,
                        const Strided& geometry))
PAC_CUDA_FN(void binary_scalar(BinaryOp op, const float* a, float value, float* out, int64_t n))
PAC_CUDA_FN(void axpy(float* a, float alpha, const float* b, int64_t n))
PAC_CUDA_FN(void unary_forward(UnaryOp op, float param, const float* x, float* y, int64_t n))
PAC_CUDA_FN(void unary_backward(UnaryOp op, float param, const float* x, const float* y,
                                const float* grad_y, float* grad_x, int64_t n))
// out[i] (+)= sum over the reduced dimensions; one block per output element.
PAC_CUDA_FN(void reduce_sum(const float* x, float* out, const Reduction& r, bool accumulate))
// Maximum along the middle of an [outer, size, inner] view, with the flat input position of each.
PAC_CUDA_FN(void max_along(const float* x, float* out, int64_t* positions, int64_t outer,
                           int64_t size, int64_t inner))
// out[positions[i]] += values[i] (atomic: overlapping pooling windows share inputs).
PAC_CUDA_FN(void scatter_add(float* out, const int64_t* positions, const float* values, int64_t n))
// out[j] (+)= src[positions[j]] for j < n (accumulate: +=), and out[positions[j]] = values[j]:
// gathers and scatters by flat i32 position (a pruned weight's kept entries).
PAC_CUDA_FN(void index_gather(float* out, const float* src, const int32_t* positions, int64_t n,
                              bool accumulate))
PAC_CUDA_FN(void index_scatter(float* out, const int32_t* positions, const float* values,
                               int64_t n))
// positions -> index along the reduced dimension (argmax).
PAC_CUDA_FN(void position_to_index(const int64_t* positions, int64_t* out, int64_t n, int64_t size,
                                   int64_t inner))
PAC_CUDA_FN(void permute(const float* x, float* out, int64_t n, const Strided& geometry))
// mask[i] = (uniform(seed, i) < keep) / keep, from a counter-based hash: reproducible per seed.
PAC_CUDA_FN(void dropout_mask(float* mask, int64_t n, float keep, uint64_t seed))

// --- softmax.cu ---
// Softmax of scale * x over `size`; with inner == 1 and causal_queries = T > 0, row r takes its
// first r % T + size - T + 1 entries only (attention's causal mask; the rest get probability 0).
// scale must be 1 and causal_queries 0 when inner > 1. The backward multiplies by scale.
PAC_CUDA_FN(void softmax_forward(const float* x, float* y, int64_t outer, int64_t size,
                                 int64_t inner, bool log_space, float scale,
                                 int64_t causal_queries))
PAC_CUDA_FN(void softmax_backward(const float* y, const float* grad_y, float* grad_x, int64_t outer,
                                  int64_t size, int64_t inner, bool log_space, float scale))
// loss = mean over rows of -(1 - eps) lp[label] - eps / C sum(lp); NaN when a label is out of
// range (the device cannot throw; the trainer's finiteness check reports it).
PAC_CUDA_FN(void cross_entropy_forward(const float* log_probs, const void* labels, bool labels_i64,
                                       float* loss, int64_t n, int64_t c, float smoothing))
PAC_CUDA_FN(void cross_entropy_backward(const float* log_probs, const void* labels, bool labels_i64,
                                        const float* grad_loss, float* grad_x, int64_t n, int64_t c,
                                        float smoothing))
PAC_CUDA_FN(void embedding_forward(const float* table, const void* indices, bool indices_i64,
                                   float* out, int64_t count, int64_t dim, int64_t vocab))
PAC_CUDA_FN(void embedding_backward(const float* grad_out, const void* indices, bool indices_i64,
                                    float* grad_table, int64_t count, int64_t dim, int64_t vocab))
// A kernel cannot throw. One that meets a label or an embedding index outside [0, bound) records
// the first such one in a small device-side record (and writes NaN where the value would go);
// every copy from the GPU to the host (a step reads its loss) then reads the record and throws
// the CPU's message for it, and clears it.
PAC_CUDA_FN(void raise_index_error())

// --- norm.cu: layer norm kernels and cuDNN batch norm ---
PAC_CUDA_FN(void layer_norm_forward(const float* x, const float* weight, const float* bias,
                                    float* y, float* mean, float* rstd, int64_t rows, int64_t d,
                                    float eps))
// grad_x may be null; grad_weight and grad_bias (null when not wanted) are overwritten.
PAC_CUDA_FN(void layer_norm_backward(const float* x, const float* weight, const float* mean,
                                     const float* rstd, const float* grad_y, float* grad_x,
                                     float* grad_weight, float* grad_bias, int64_t rows, int64_t d))
// Training-mode batch norm over [n, c, s]; weight and bias must be real tensors (ones/zeros when
// the layer has none); running statistics may be null. Saves mean and 1/std for backward.
PAC_CUDA_FN(void batch_norm_forward_training(const float* x, const float* weight, const float* bias,
                                             float* y, float* running_mean, float* running_var,
                                             float* save_mean, float* save_invstd, int64_t n,
                                             int64_t c, int64_t s, float momentum, float eps))
// Evaluation-mode batch norm with the running statistics, in one pass; weight and bias may be
// null.
PAC_CUDA_FN(void batch_norm_inference(const float* x, const float* weight, const float* bias,
                                      const float* running_mean, const float* running_var, float* y,
                                      int64_t n, int64_t c, int64_t s, float eps))
PAC_CUDA_FN(void batch_norm_backward_training(const float* x, const float* weight,
                                              const float* save_mean, const float* save_invstd,
                                              const float* grad_y, float* grad_x,
                                              float* grad_weight, float* grad_bias, int64_t n,
                                              int64_t c, int64_t s, float eps))

// --- blas.cu: row-major GEMM on cuBLAS (C = alpha op(A) op(B) + beta C) ---
PAC_CUDA_FN(void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc))
PAC_CUDA_FN(void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const float* a, int64_t lda, int64_t stride_a,
                              const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                              int64_t ldc, int64_t stride_c, int64_t batch))
// Every row of y [rows, width] set to row.
PAC_CUDA_FN(void broadcast_row(float* y, const float* row, int64_t rows, int64_t width))

// --- conv.cu and pool.cu: cuDNN ---
PAC_CUDA_FN(void conv_forward(const cpu::ConvShape& s, const float* x, const float* w,
                              const float* bias, float* y))
PAC_CUDA_FN(void conv_backward_data(const cpu::ConvShape& s, const float* grad_y, const float* w,
                                    float* grad_x))
// Either output may be null.
PAC_CUDA_FN(void conv_backward_filter(const cpu::ConvShape& s, const float* x, const float* grad_y,
                                      float* grad_w, float* grad_bias))
enum class PoolKind { max, average_include_pad, average_exclude_pad };
struct PoolShape {
  int64_t n, c, h, w, out_h, out_w, kernel, stride, padding;
};
PAC_CUDA_FN(void pool_forward(PoolKind kind, const PoolShape& s, const float* x, float* y))
PAC_CUDA_FN(void pool_backward(PoolKind kind, const PoolShape& s, const float* x, const float* y,
                               const float* grad_y, float* grad_x))
// Adaptive average pooling with PyTorch's window boundaries (cuDNN has no adaptive mode).
PAC_CUDA_FN(void adaptive_avg_pool_forward(const float* x, float* y, int64_t planes, int64_t h,
                                           int64_t w, int64_t out_h, int64_t out_w))
PAC_CUDA_FN(void adaptive_avg_pool_backward(const float* grad_y, float* grad_x, int64_t planes,
                                            int64_t h, int64_t w, int64_t out_h, int64_t out_w))

// --- masked.cu ---
// values[i] = 0 where mask[i] == 0 (a parameter's pruning mask, u8).
PAC_CUDA_FN(void apply_mask(float* values, const uint8_t* mask, int64_t n))
// Adds to *result (a device float) the sum of squares, or the count of non-finite values, of n
// values. Many parameters can add into one array of results that is then read with a single copy.
enum class Statistic { sum_squares, nonfinite_count };
PAC_CUDA_FN(void add_statistic(Statistic kind, const float* values, int64_t n, float* result))

#ifndef PAC_WITH_CUDA
#pragma GCC diagnostic pop
#endif
#undef PAC_CUDA_FN

}  // namespace pac::cuda
