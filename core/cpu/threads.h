// The number of threads CPU kernels use: OpenBLAS for GEMM and, when built in, oneDNN (OpenMP).
#pragma once

namespace pac::cpu {

void set_num_threads(int threads);
int num_threads();

}  // namespace pac::cpu
