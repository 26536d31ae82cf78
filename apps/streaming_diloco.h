// Streaming DiLoCo (Douillard et al. 2025): the parameters are split into F fragments of
// consecutive layers, and every H/F inner steps one fragment synchronises, in turn, so that each
// does every H steps. Its outer all-reduce is started then and waited for only at the next
// fragment's turn, H/F steps later, while the inner steps go on: the link is busy all the time
// instead of in bursts, and the inner steps never wait for it. When the averaged
// pseudo-gradient arrives, the fragment's outer step (SGD with Nesterov momentum, from the
// fragment's anchor) gives its new global values; each rank mixes them with what it trained in
// the meantime, mix x local + (1 - mix) x global (0.5 in the paper), and the global values become
// the fragment's next anchor.
//
// The pseudo-gradient travels through a compressor of its own (the run's --compress), in buckets
// laid out as the Reducer's: compact where a mask is, so pactrain sends only the kept entries.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/compressor.h"
#include "comm/reducer.h"
#include "optim/sgd.h"

namespace pac {

class StreamingDiLoCo {
 public:
  // `anchor`: the parameters at the last synchronisation, one tensor per parameter, shared with
  // the caller (OuterSync), which keeps it masked.
  StreamingDiLoCo(const optim::NamedParameters& params, std::vector<Tensor>& anchor,
                  comm::ProcessGroupPtr group, std::unique_ptr<comm::Compressor> compressor,
                  int64_t every, int64_t fragments, float outer_lr, float outer_momentum,
                  float mix);
  ~StreamingDiLoCo();

  // After `local_steps` local steps (counted from the end of the warm-up): at a turn, applies the
  // fragment in flight and starts the next one's all-reduce. Returns the bytes this rank sent for
  // the all-reduce that landed (none at the first turn, where nothing was in flight).
  comm::ReducerStepStats step(int64_t local_steps);
  // Applies the fragment in flight, then synchronises every fragment at once and without mixing,
  // so that every rank holds the same parameters (for evaluation and checkpoints).
  comm::ReducerStepStats synchronise_all();
  int64_t fragments() const { return static_cast<int64_t>(fragments_.size()); }
  // Whether step(local_steps) is a turn.
  bool turn(int64_t local_steps) const { return local_steps > 0 && local_steps % interval_ == 0; }
  // Which fragment parameter i belongs to.
  int64_t fragment_of(size_t i) const;

  // Forgets every fragment's outer momentum (after the weights were rewound).
  void reset_outer_state();

  // The outer optimizers' state and this rank's compressor state, between synchronise_all() and
  // the next step().
  StateDict state() const;
  void load_state(const StateDict& state);

 private:
  struct Fragment {
    std::vector<size_t> params;  // indices into params_
    std::unique_ptr<optim::Sgd> outer;
  };
  struct InFlight;

  std::vector<comm::Bucket> make_fragment_buckets(size_t fragment) const;
  void launch(size_t fragment);
  // Waits for the fragment in flight and takes its outer step; with `merge`, each rank then mixes
  // the global values with its own. Returns the bytes this rank sent since the launch.
  uint64_t apply(bool merge);

  optim::NamedParameters params_;
  std::vector<Tensor>& anchor_;
  comm::ProcessGroupPtr group_;
  std::unique_ptr<comm::Compressor> compressor_;
  int64_t interval_;  // H / F: inner steps between turns
  float mix_;
  std::vector<Fragment> fragments_;
  std::unique_ptr<InFlight> in_flight_;
  size_t next_ = 0;  // the fragment whose turn is next
  // Per bucket index, its parameters' mask versions when it was last reduced: when they change,
  // the compressor drops what it kept for the old layout.
  std::map<int, std::vector<uint64_t>> mask_versions_;
};

}  // namespace pac
