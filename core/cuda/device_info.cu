// The CUDA half of core/device.h: compiled only when the CUDA backend is on.
#include <cuda_runtime.h>

#include "core/cuda/context.h"
#include "core/device.h"

namespace pac {

bool cuda_compiled() { return true; }

int cuda_device_count() {
  int count = 0;
  // No driver or no device is not an error for the framework: it just means "CPU only".
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
}

void cuda_set_device(int index) { cuda::set_device(index); }
int current_cuda_device() { return cuda::current_device(); }
void cuda_synchronize() { cuda::synchronize(); }
void cuda_set_tf32(bool allow) { cuda::set_allow_tf32(allow); }

}  // namespace pac
