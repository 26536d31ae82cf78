// The per-process CUDA state: the device this rank uses, its compute stream (every kernel, cuBLAS
// and cuDNN call of the framework runs on it, in order), its communication stream (NCCL), and the
// cuBLAS and cuDNN handles bound to the compute stream. Created on first use.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace pac::cuda {

// Chooses the GPU for this process; must come before any other CUDA call of the framework.
// Launchers pick the local rank (OMPI_COMM_WORLD_LOCAL_RANK and friends) modulo the device count.
void set_device(int index);
int current_device();

cudaStream_t compute_stream();
cudaStream_t comm_stream();
cublasHandle_t cublas();
cudnnHandle_t cudnn();

// Waits for everything queued on the compute stream.
void synchronize();

// Whether fp32 GEMMs may use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation), as
// PyTorch's torch.backends.cuda.matmul.allow_tf32. Off by default; convolutions follow the same
// switch (cuDNN's CUDNN_DEFAULT_MATH versus CUDNN_FMA_MATH).
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace pac::cuda
