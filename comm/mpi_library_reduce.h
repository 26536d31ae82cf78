// The MPI library's own all-reduce (MPI_Iallreduce) for the MPI group's AllReduceAlgorithm::mpi:
// what pactrain's written-out rings and recursive doubling are measured against. Only the MPI
// group's communication thread calls it, as every MPI call.
#pragma once

#ifdef PAC_WITH_MPI
#include <mpi.h>

#include <vector>

#include "comm/process_group.h"

namespace pac::comm {

class LibraryAllReduce {
 public:
  // Runs on a duplicate of MPI_COMM_WORLD, apart from the group's tagged point-to-point messages.
  LibraryAllReduce();
  ~LibraryAllReduce();  // before MPI_Finalize
  LibraryAllReduce(const LibraryAllReduce&) = delete;
  LibraryAllReduce& operator=(const LibraryAllReduce&) = delete;

  // Starts an MPI_Iallreduce for every segment at once (an average sums; the caller divides).
  // The caller waits for all the requests. fp16 and bf16 have no MPI type: they go as 16-bit
  // words with an operation of ours.
  std::vector<MPI_Request> start(std::vector<ReduceSegment>& segments);

 private:
  MPI_Op sixteen_bit_op(DType dtype, bool max);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op sixteen_bit_ops_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

}  // namespace pac::comm
#endif
