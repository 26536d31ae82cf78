// Process-group faults that leave MPI unusable for the rest of the process, so each runs in a job
// of its own (CTest: mpi-group-faults-*):
//   thread-level    MPI initialised by the main thread with MPI_THREAD_SINGLE: making the group
//                   must be refused with the levels named (its communication thread would make
//                   MPI calls that level forbids).
//   after-mismatch  two ranks launch all-reduces of different sizes: both fail naming the
//                   mismatch, and the next collective fails at once naming the first failure
//                   instead of reading the stale message that is still on its way.
// Prints "ok" and exits 0 when the group behaves so.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "comm/process_group.h"
#include "core/error.h"

using namespace pac;

namespace {

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

int thread_level() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
  int status = 1;
  if (provided >= MPI_THREAD_SERIALIZED) {
    std::printf("ok (MPI gave thread level %d where SINGLE was asked; nothing to refuse)\n",
                provided);
    status = 0;
  } else {
    try {
      comm::make_mpi_group();
      std::printf("the group started under MPI_THREAD_SINGLE\n");
    } catch (const Error& e) {
      std::printf("%s\n", e.what());
      if (contains(e.what(), "MPI_THREAD_SINGLE") && contains(e.what(), "MPI_THREAD_SERIALIZED")) {
        std::printf("ok\n");
        status = 0;
      }
    }
  }
  MPI_Finalize();
  return status;
}

int after_mismatch() {
  comm::ProcessGroupPtr group = comm::make_mpi_group();
  if (group->size() != 2) {
    std::printf("after-mismatch runs on 2 ranks, not %d\n", group->size());
    return 1;
  }
  // 64 kB against 96 kB: above the eager limit, so the sends stay posted when the receive fails.
  Tensor mine = Tensor::full({group->rank() == 0 ? 16384 : 24576}, 1.0f);
  std::string first, second;
  try {
    group->all_reduce(mine, comm::ReduceOp::sum)->wait();
  } catch (const Error& e) {
    first = e.what();
  }
  Tensor next = Tensor::full({4}, 1.0f);
  try {
    group->all_reduce(next, comm::ReduceOp::sum)->wait();
  } catch (const Error& e) {
    second = e.what();
  }
  std::printf("rank %d: first: %s\nrank %d: next: %s\n", group->rank(), first.c_str(),
              group->rank(), second.c_str());
  const bool ok = contains(first.c_str(), "collectives do not match") &&
                  contains(second.c_str(), "an earlier collective of this process group failed") &&
                  contains(second.c_str(), "collectives do not match");
  if (ok) std::printf("ok\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "thread-level") return thread_level();
  if (mode == "after-mismatch") return after_mismatch();
  std::fprintf(stderr, "usage: %s thread-level|after-mismatch\n", argv[0]);
  return 2;
}
