// The NCCL process group's tests, one process per rank under mpiexec. Without a GPU every rank
// exits with 77 before starting MPI, which mpiexec passes on and CTest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "comm/process_group.h"

namespace pac::testing {
comm::ProcessGroup& nccl_world() {
  static comm::ProcessGroupPtr group = comm::make_nccl_group();
  return *group;
}
}  // namespace pac::testing

int main(int argc, char** argv) {
  // NCCL needs a GPU of its own for every rank.
  const char* size_var = std::getenv("OMPI_COMM_WORLD_SIZE");
  int ranks = size_var ? std::atoi(size_var) : 1;
  if (pac::cuda_device_count() < ranks) {
    std::printf("%d rank(s) but %d GPU(s): NCCL tests skipped\n", ranks, pac::cuda_device_count());
    return 77;
  }
  pac::testing::nccl_world();
  doctest::Context context(argc, argv);
  int result = context.run();
  pac::testing::nccl_world().barrier();
  return result;
}
