#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pac::cuda {

namespace {

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  bool tf32 = false;
};

// Never destroyed: storages freed during static teardown still need the streams.
Context& context() {
  static Context* instance = new Context();
  return *instance;
}

Context& ready() {
  Context& c = context();
  if (c.compute != nullptr) return c;
  if (c.device < 0) c.device = 0;
  CUDA_CHECK(cudaSetDevice(c.device));
  // Non-blocking: the legacy default stream must not serialise the compute and comm streams.
  CUDA_CHECK(cudaStreamCreateWithFlags(&c.compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c.comm, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&c.blas));
  CUBLAS_CHECK(cublasSetStream(c.blas, c.compute));
  CUBLAS_CHECK(
      cublasSetMathMode(c.blas, c.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  CUDNN_CHECK(cudnnCreate(&c.dnn));
  CUDNN_CHECK(cudnnSetStream(c.dnn, c.compute));
  return c;
}

}  // namespace

void set_device(int index) {
  Context& c = context();
  PAC_CHECK(c.compute == nullptr || c.device == index,
            "cuda::set_device({}): this process already uses cuda:{}", index, c.device);
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  PAC_CHECK(index >= 0 && index < count, "cuda::set_device: device {} does not exist ({} visible)",
            index, count);
  c.device = index;
  ready();
}

int current_device() { return ready().device; }
cudaStream_t compute_stream() { return ready().compute; }
cudaStream_t comm_stream() { return ready().comm; }
cublasHandle_t cublas() { return ready().blas; }
cudnnHandle_t cudnn() { return ready().dnn; }

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }

void set_allow_tf32(bool allow) {
  Context& c = context();
  c.tf32 = allow;
  if (c.blas != nullptr) {
    CUBLAS_CHECK(
        cublasSetMathMode(c.blas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
}

bool allow_tf32() { return context().tf32; }

}  // namespace pac::cuda
