// The multi-rank tests: every rank runs the same doctest cases inside one MPI job
// (CTest starts them with mpiexec -n 2 and -n 4).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/mpi/world.h"

namespace pac::testing {

comm::ProcessGroup& world() {
  static comm::ProcessGroupPtr group = comm::make_mpi_group();
  return *group;
}

}  // namespace pac::testing

int main(int argc, char** argv) {
  pac::testing::world();  // start MPI before any test
  doctest::Context context(argc, argv);
  int result = context.run();
  pac::testing::world().barrier();
  return result;
}
