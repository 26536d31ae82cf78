// Error checks for the CUDA runtime, cuBLAS and cuDNN: each macro turns a failed call into a
// pac::Error that names the call, where it was made, and the library's own words for the error.
// NCCL_CHECK lives with the NCCL process group (comm/nccl_group.cpp), the only user of nccl.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.h"

#define PAC_LIBRARY_CHECK(call, ok, describe)                                             \
  do {                                                                                    \
    auto pac_status_ = (call);                                                            \
    if (pac_status_ != (ok)) {                                                            \
      PAC_FAIL("{}:{}: {} failed: {}", __FILE__, __LINE__, #call, describe(pac_status_)); \
    }                                                                                     \
  } while (0)

#define CUDA_CHECK(call) PAC_LIBRARY_CHECK(call, cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(call) PAC_LIBRARY_CHECK(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define CUDNN_CHECK(call) PAC_LIBRARY_CHECK(call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)

// After a kernel launch: a bad launch configuration is reported at once in every build; in debug
// builds the device is also synchronised, so a fault inside the kernel is reported by the launch
// that caused it instead of by some later call.
#ifdef NDEBUG
#define PAC_CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#else
#define PAC_CUDA_LAUNCH_CHECK()          \
  do {                                   \
    CUDA_CHECK(cudaGetLastError());      \
    CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#endif
