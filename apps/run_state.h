// RunState: what a resumed run needs besides the weights, masks, buffers and optimizer state to
// continue bit-identically. Two kinds:
//   shared   the pruner's (criterion sums, imp's rewind weights, event count); rank 0's copy
//            stands for all, since every rank observes the same reduced gradients and rank 0's
//            masks are the masks;
//   per rank the compressor's (error-feedback residuals, PowerSGD factors, step counters) and
//            the random generator's, which differ between ranks; with --sync local or diloco
//            also the inner optimizer's (each rank's own moments), the outer optimizer's and
//            the criterion's sums (each rank observed its own gradients).
//            They are gathered to rank 0, which writes the one checkpoint file, and each rank
//            takes its own back on resume.
#pragma once

#include <string>
#include <vector>

#include "comm/reducer.h"
#include "core/state_dict.h"
#include "prune/pruner.h"

namespace pac {

struct RunState {
  std::string compressor;     // the --compress name ("" when the run had no reducer)
  std::string prune;          // the --prune criterion ("" without pruning)
  std::string sync = "step";  // the --sync mode
  StateDict pruner;
  StateDict reducer;  // "buckets": the grouping the compressor's per-bucket state belongs to
  // fp16's loss scaling (optim/grad_scaler.h), the same on every rank; empty in fp32 and bf16.
  StateDict grad_scaler;
  // Per rank: "compressor.<key>", "generator", "sync.<key>" and "criterion.<key>".
  std::vector<StateDict> ranks;
};

// Every rank calls this at the same step; rank 0 gets every rank's state in `ranks`, the others
// an empty list. `reducer` and `pruner` may be null. `sync_state` is this rank's state of a
// --sync mode other than step (saved as "sync.<key>").
RunState capture_run_state(comm::ProcessGroup& group, comm::Reducer* reducer,
                           const std::string& compressor, prune::Pruner* pruner,
                           const std::string& sync = "step", const StateDict& sync_state = {});

struct RestoredRunState {
  StateDict sync;                  // this rank's --sync state (empty for step)
  std::vector<std::string> notes;  // on another number of ranks: how the ranks' state was mapped
};

// Puts this rank's share of `state` back. Refuses a state from another compressor, criterion or
// --sync mode. A state saved by another number of ranks is mapped onto this run's
// (apps/elastic_state.h; `seed` and `step` re-derive generators there). `path` names the
// checkpoint in errors.
RestoredRunState restore_run_state(const RunState& state, const std::string& path,
                                   comm::ProcessGroup& group, comm::Reducer* reducer,
                                   const std::string& compressor, prune::Pruner* pruner,
                                   const std::string& sync = "step", uint64_t seed = 0,
                                   int64_t step = 0);

}  // namespace pac
