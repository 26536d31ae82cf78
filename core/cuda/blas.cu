// Row-major GEMM on cuBLAS, which is column-major: a row-major matrix is its transpose in column
// order, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

namespace {
cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }
int as_int(int64_t v, const char* what) {
  PAC_CHECK(v >= 0 && v <= INT32_MAX, "gemm: {} = {} does not fit cuBLAS's 32-bit sizes", what, v);
  return static_cast<int>(v);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  CUBLAS_CHECK(cublasSgemm(cublas(), op(trans_b), op(trans_a), as_int(n, "n"), as_int(m, "m"),
                           as_int(k, "k"), &alpha, b, as_int(ldb, "ldb"), a, as_int(lda, "lda"),
                           &beta, c, as_int(ldc, "ldc")));
}

void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                  int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                  int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  CUBLAS_CHECK(cublasSgemmStridedBatched(
      cublas(), op(trans_b), op(trans_a), as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha, b,
      as_int(ldb, "ldb"), stride_b, a, as_int(lda, "lda"), stride_a, &beta, c, as_int(ldc, "ldc"),
      stride_c, as_int(batch, "batch")));
}

void broadcast_row(float* y, const float* row, int64_t rows, int64_t width) {
  for_each(rows * width, [=] __device__(int64_t i) { y[i] = row[i % width]; });
}

}  // namespace pac::cuda
