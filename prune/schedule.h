// When to prune and to what sparsity (--prune-schedule):
//   oneshot:STEP           prune to the final sparsity once, before training step STEP
//   gradual:T0:T1:DT[:S0]  Zhu & Gupta (2017): every DT steps from T0 to T1, sparsity
//                          s(t) = s_f + (S0 - s_f) (1 - (t - T0) / (T1 - T0))^3  (S0 defaults to 0)
//   imp:ROUNDS:EPOCHS      iterative magnitude pruning with weight rewinding (the lottery ticket,
//                          Frankle & Carbin 2019): after every EPOCHS epochs, for ROUNDS rounds,
//                          prune to 1 - (1 - s_f)^(round / ROUNDS) and rewind the kept weights to
//                          their values at the start of training
// Steps count completed training steps: "before step t" is after t updates.
#pragma once

#include <cstdint>
#include <string>

namespace pac::prune {

struct PruneEvent {
  bool due = false;
  double sparsity = 0.0;  // the target after this event
  bool rewind = false;    // imp: rewind the weights to the start of training
};

class PruneSchedule {
 public:
  // `steps_per_epoch` is needed by imp only.
  PruneSchedule(const std::string& spec, double final_sparsity, int64_t steps_per_epoch);
  PruneEvent at(int64_t step) const;
  // The step of the last event: the sparsity is final from there on.
  int64_t last_step() const;
  std::string describe() const;
  bool rewinds() const { return kind_ == Kind::imp; }

 private:
  enum class Kind { oneshot, gradual, imp } kind_ = Kind::oneshot;
  double final_ = 0.0, initial_ = 0.0;
  int64_t t0_ = 0, t1_ = 0, dt_ = 1, rounds_ = 1, round_steps_ = 0;
  std::string spec_;
};

}  // namespace pac::prune
