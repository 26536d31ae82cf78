// Elastic resume: the per-rank state of a checkpoint written by P ranks, mapped onto a run of P'
// ranks. The weights, masks, buffers, the optimizer under --sync step and the pruner's state are
// the same on every rank and load as they are; with the global batch unchanged, the loaders give
// the same samples to each step. What each rank holds of its own is mapped here:
//   compressor  entry by entry, by the compressor's rank_state_rule(): shared entries (step
//               counters, an agreed scale, PowerSGD's Q) are kept as saved; mean entries
//               (error-feedback residuals, DGC's velocity) become the mean over the P saved ranks
//               on every new rank, which keeps the correction the ranks add to the average what
//               it was. A compressor without a rule for an entry starts afresh, as does every
//               compressor when the saved buckets are not this run's (a ternary code's width, and
//               so pactrain's buckets, depends on the number of ranks); the run says so.
//   generator   kept where every saved rank's was the same (the ranks seed it alike and draw
//               alike), else re-derived from (seed, rank, step).
//   sync.*, criterion.*   under --sync local|diloco, checkpoints are written at synchronisations:
//               an entry equal on every saved rank (the outer momentum, counters) is kept; a
//               floating-point entry that differs (each rank's inner optimizer moments, a
//               streamed compressor's residuals, a criterion's sums) becomes the mean.
#pragma once

#include <string>
#include <vector>

#include "apps/run_state.h"
#include "comm/compressor.h"

namespace pac {

struct ElasticState {
  StateDict rank;                  // what this rank loads, in the form of one RunState::ranks entry
  std::vector<std::string> notes;  // what was kept, averaged, re-derived or reset: one line each
};

// Whether two tensors hold the same dtype, shape and bytes (wherever they live).
bool same_bytes(const Tensor& a, const Tensor& b);

// The state rank `rank` of a run on another number of ranks loads. `compressor` is this run's
// (null without a reducer); `grouping` its Reducer's buckets after the checkpoint's masks
// (Reducer::grouping()); `seed` and `step` re-derive a generator.
ElasticState map_rank_states(const RunState& saved, const comm::Compressor* compressor,
                             const Tensor& grouping, int rank, uint64_t seed, int64_t step);

}  // namespace pac
