// The GPU tests: each CUDA kernel against its CPU twin. Without a GPU (or in a build without
// CUDA) the program says so and exits with 77, which CTest reports as skipped, not passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/allocator.h"
#include "core/device.h"

int main(int argc, char** argv) {
  if (pac::cuda_device_count() == 0) {
    std::printf("no CUDA device (%s): GPU tests skipped\n",
                pac::cuda_compiled() ? "none visible" : "this build has no CUDA backend");
    return 77;
  }
  // Every GPU block starts as NaN, so an output element a kernel never writes fails its test.
  pac::cuda_poison_allocations(true);
  doctest::Context context(argc, argv);
  return context.run();
}
