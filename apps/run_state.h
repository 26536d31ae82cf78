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
  // Per rank: "compressor.<key>", "generator", "sync.<key>" and "criterion.<key>".
  std::vector<StateDict> ranks;
};

// Every rank calls this at the same step; rank 0 gets every rank's state in `ranks`, the others
// an empty list. `reducer` and `pruner` may be null. `sync_state` is this rank's state of a
// --sync mode other than step (saved as "sync.<key>").
RunState capture_run_state(comm::ProcessGroup& group, comm::Reducer* reducer,
                           const std::string& compressor, prune::Pruner* pruner,
                           const std::string& sync = "step", const StateDict& sync_state = {});

// Puts this rank's share of `state` back and returns its --sync state (empty for step). Refuses
// a state from another compressor, criterion, --sync mode or world size. `path` names the
// checkpoint in errors.
StateDict restore_run_state(const RunState& state, const std::string& path,
                            comm::ProcessGroup& group, comm::Reducer* reducer,
                            const std::string& compressor, prune::Pruner* pruner,
                            const std::string& sync = "step");

}  // namespace pac
