// Deliberate faults for the fault-injection tests, read from the PACTRAIN_FAULT environment
// variable as KIND:STEP:RANK, e.g. PACTRAIN_FAULT=hang:5:1. Kinds:
//   nan-loss  that rank's loss becomes NaN at that step (so its gradients, and after the
//             all-reduce everyone's, are NaN)
//   hang      that rank stops responding at that step (sleeps forever)
//   exit      that rank dies at that step (exits with status 9, no clean-up)
//   kill-in-checkpoint
//             that rank is killed with SIGKILL halfway through writing the checkpoint after that
//             step (with --checkpoint-every), as `kill -9` at the worst moment would
//   slow-checkpoint
//             that rank takes 3 s longer to write the checkpoint after that step, as a slow
//             disk would (with --checkpoint-every)
//   extra-collective
//             that rank runs an all-reduce the others do not, before that step's backward, as a
//             rank whose collectives got out of step would
// Unset, nothing ever happens. A malformed value is an error.
#pragma once

#include <cstdint>
#include <string>

namespace pac {

struct Fault {
  std::string kind;  // empty: none
  int64_t step = -1;
  int rank = -1;
  bool due(const char* what, int64_t at_step, int at_rank) const {
    return kind == what && step == at_step && rank == at_rank;
  }
};

Fault fault_from_environment();

// The checkpoint writer calls checkpoint_write_halfway() with half of the file written; after
// arm_checkpoint_kill() that kills the process on the spot.
void arm_checkpoint_kill();
void checkpoint_write_halfway();

}  // namespace pac
