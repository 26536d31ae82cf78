// Row-major single-precision GEMM: through oneDNN when the build has it, else OpenBLAS's cblas.
#pragma once

#include <cstdint>

namespace pac::cpu {

// C [M, N] = alpha * op(A) op(B) + beta * C, where op(A) is [M, K] and op(B) is [K, N];
// lda/ldb/ldc are the row strides of A, B and C as stored.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Which GEMM runs, for reports: "oneDNN", or "OpenBLAS " and the kernel family OpenBLAS chose for
// this CPU ("Haswell", "SkylakeX", ...).
const char* gemm_name();

}  // namespace pac::cpu
